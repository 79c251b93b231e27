package app

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const azureConvTrace = "../../../data/azure-llm-trace-2023/AzureLLMInferenceTrace_conv.csv"

// runSimulate runs `adapter simulate` with args as a user does and returns its
// standard output and error.
func runSimulate(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := NewSimulateCommand()
	var out, errOut bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

// TestSimulateCommand replays three minutes of the Azure conversation trace at
// twice its rate under every built-in policy and the README's HPA, twice: the
// table has a line per policy, the JSON and SVG are written, and the same seed
// gives the same JSON.
func TestSimulateCommand(t *testing.T) {
	dir := t.TempDir()
	run := func(name string) (string, []byte) {
		jsonPath := filepath.Join(dir, name+".json")
		out, progress, err := runSimulate(t, "--trace", azureConvTrace, "--start", "20m", "--length", "3m", "--rate-scale", "2",
			"--cold-start", "60s", "--hpa", "testdata/hpa-demand.yaml", "--seed", "5",
			"--json", jsonPath, "--svg", filepath.Join(dir, name+".svg"))
		if err != nil {
			t.Fatalf("simulate: %v\n%s", err, progress)
		}
		if !strings.Contains(progress, "simulated my-hpa") {
			t.Errorf("progress does not name the last policy:\n%s", progress)
		}
		data, err := os.ReadFile(jsonPath)
		if err != nil {
			t.Fatal(err)
		}
		return out, data
	}
	table, first := run("a")
	_, second := run("b")
	if !bytes.Equal(first, second) {
		t.Error("two runs with --seed 5 wrote different JSON")
	}
	lines := strings.Split(strings.TrimSpace(table), "\n")
	wantRows := []string{"oracle", "static", "gpu-util", "keda-queue", "kv", "saturation", "demand-replicas", "my-hpa"}
	if len(lines) != len(wantRows)+2 || !strings.Contains(lines[0], "TTFT<=2s") || !strings.Contains(lines[0], "x oracle") {
		t.Fatalf("table:\n%s\nwant a header, %d policy lines and a footer", table, len(wantRows))
	}
	for i, name := range wantRows {
		if f := strings.Fields(lines[i+1]); len(f) < 11 || f[0] != name || !strings.HasSuffix(f[1], "%") {
			t.Errorf("table line %d = %q, want policy %s and its figures", i+1, lines[i+1], name)
		}
	}
	var rep struct {
		Settings struct {
			Seed uint64 `json:"seed"`
		} `json:"settings"`
		Workload struct {
			Requests int `json:"requests"`
		} `json:"workload"`
		Policies []struct {
			Name             string            `json:"name"`
			GPUHoursVsOracle float64           `json:"gpuHoursVsOracle"`
			Series           []json.RawMessage `json:"series"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(first, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Settings.Seed != 5 || rep.Workload.Requests < 1000 || len(rep.Policies) != len(wantRows) || rep.Policies[0].GPUHoursVsOracle != 1 {
		t.Errorf("report header %+v, %d policies; want seed 5, the window's requests, %d policies, the oracle at ratio 1",
			rep.Settings, len(rep.Policies), len(wantRows))
	}
	for _, p := range rep.Policies {
		if len(p.Series) < 18 { // 3 minutes at 10 s
			t.Errorf("%s: %d samples, want one every 10 s", p.Name, len(p.Series))
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, "a.svg"))
	if err != nil || !bytes.HasPrefix(svg, []byte("<svg ")) || !bytes.Contains(svg, []byte("my-hpa: TTFT")) {
		t.Errorf("SVG: %v, starts %.40q; want a chart with a panel per policy", err, svg)
	}
}

func TestSimulateFlagErrors(t *testing.T) {
	_, _, err := runSimulate(t, "--policies", "kv,fastest", "--hpa-metrics-path", "carrier-pigeon", "--rate-scale", "0",
		"--queue-depth-set-point", "0", "--gpu-utilization-target", "0")
	for _, want := range []string{"--trace is required", `unknown policy "fastest"`, `--hpa-metrics-path="carrier-pigeon"`,
		"rate scale must be in (0, 1000], got 0", "--queue-depth-set-point=0", "--gpu-utilization-target=0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error = %v, want it to contain %q", err, want)
		}
	}
	_, _, err = runSimulate(t, "--trace", azureConvTrace, "--length", "1m", "--hpa", "testdata/malformed.prom")
	if err == nil || !strings.Contains(err.Error(), "testdata/malformed.prom") {
		t.Errorf("error = %v, want one naming the bad --hpa file", err)
	}
	_, _, err = runSimulate(t, "--trace", azureConvTrace, "--profile", "testdata/none.yaml")
	if err == nil || !strings.Contains(err.Error(), "reading engine profile") {
		t.Errorf("error = %v, want the missing profile named", err)
	}
}

// TestSimulateProfileAndEngineFlags: an engine flag overrides the profile file.
func TestSimulateProfileAndEngineFlags(t *testing.T) {
	profile := filepath.Join(t.TempDir(), "engine.yaml")
	if err := os.WriteFile(profile, []byte("maxNumSeqs: 32\nstepTime: {base: 9ms}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	jsonPath := filepath.Join(t.TempDir(), "r.json")
	if _, progress, err := runSimulate(t, "--trace", azureConvTrace, "--length", "1m", "--policies", "", "--profile", profile,
		"--step-time-base", "7ms", "--json", jsonPath); err != nil {
		t.Fatalf("simulate: %v\n%s", err, progress)
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Settings struct {
			Engine struct {
				MaxNumSeqs int `json:"maxNumSeqs"`
				StepTime   struct {
					Base string `json:"base"`
				} `json:"stepTime"`
			} `json:"engine"`
		} `json:"settings"`
		Policies []struct{ Name string } `json:"policies"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if e := rep.Settings.Engine; e.MaxNumSeqs != 32 || e.StepTime.Base != "7ms" || len(rep.Policies) != 2 {
		t.Errorf("engine %+v, %d policies; want the profile's 32 seqs, the flag's 7ms base, only the oracle and static", e, len(rep.Policies))
	}
}

// TestReadmeSimulateTable runs the README's `adapter simulate` example as written
// and checks that it prints the README's table. The whole hour at 8 times the rate
// takes 15 s of CPU, several minutes under -race, so the race-enabled `make test`
// skips it; run it with `go test ./cmd/adapter/app -run TestReadmeSimulateTable`.
func TestReadmeSimulateTable(t *testing.T) {
	if testing.Short() || raceDetector {
		t.Skip("the full-hour replay is slow under -race or -short; run: go test ./cmd/adapter/app -run TestReadmeSimulateTable")
	}
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "```sh\nadapter simulate ")
	if start < 0 {
		t.Fatal("no adapter simulate example in the README")
	}
	block := text[start+len("```sh\n"):]
	block = block[:strings.Index(block, "```")]
	args := strings.Fields(strings.ReplaceAll(block, "\\\n", " "))[2:] // drop "adapter simulate"
	dir := t.TempDir()
	for i := range args {
		if args[i] == "--json" || args[i] == "--svg" {
			args[i+1] = filepath.Join(dir, args[i+1])
		}
		if args[i] == "--trace" {
			args[i+1] = filepath.Join("../../..", args[i+1])
		}
	}
	out, progress, err := runSimulate(t, args...)
	if err != nil {
		t.Fatalf("simulate %v: %v\n%s", args, err, progress)
	}
	rest := text[start+len("```sh\n")+len(block)+len("```\n"):]
	table := rest[strings.Index(rest, "```\n")+len("```\n"):]
	table = table[:strings.Index(table, "```")]
	if out != table {
		t.Errorf("README table:\n%s\nsimulate prints:\n%s", table, out)
	}
}
