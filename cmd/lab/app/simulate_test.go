package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	autoscalingv2 "k8s.io/api/autoscaling/v2"

	"github.com/saturation-adapter/saturation-adapter/lab/simulate"
)

const azureConvTrace = "../../../data/azure-llm-trace-2023/AzureLLMInferenceTrace_conv.csv"

// TestSimulateCommand replays three minutes of the Azure conversation trace at
// twice its rate under every built-in policy and the README's HPA, twice: the
// table has a line per policy, the JSON and SVG are written, and the same seed
// gives the same JSON.
func TestSimulateCommand(t *testing.T) {
	dir := t.TempDir()
	run := func(name string) (string, []byte) {
		jsonPath := filepath.Join(dir, name+".json")
		out, progress, err := runRoot("simulate", "--trace", azureConvTrace, "--start", "20m", "--length", "3m", "--rate-scale", "2",
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
	wantRows := []string{"oracle", "static", "gpu-util", "keda-queue", "keda-queue-cached", "kv", "saturation", "demand-replicas", "my-hpa"}
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
		Autoscalers []struct {
			Name             string            `json:"name"`
			GPUHoursVsOracle float64           `json:"gpuHoursVsOracle"`
			Series           []json.RawMessage `json:"series"`
		} `json:"autoscalers"`
	}
	if err := json.Unmarshal(first, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Settings.Seed != 5 || rep.Workload.Requests < 1000 || len(rep.Autoscalers) != len(wantRows) || rep.Autoscalers[0].GPUHoursVsOracle != 1 {
		t.Errorf("report header %+v, %d policies; want seed 5, the window's requests, %d policies, the oracle at ratio 1",
			rep.Settings, len(rep.Autoscalers), len(wantRows))
	}
	for _, p := range rep.Autoscalers {
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
	_, _, err := runRoot("simulate", "--autoscalers", "kv,fastest", "--hpa-metrics-path", "carrier-pigeon", "--rate-scale", "0",
		"--queue-depth-set-point", "0", "--gpu-utilization-target", "0")
	for _, want := range []string{"--trace is required", `unknown autoscaler "fastest"`, `--hpa-metrics-path="carrier-pigeon"`,
		"rate scale must be in (0, 1000], got 0", "--queue-depth-set-point=0", "--gpu-utilization-target=0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error = %v, want it to contain %q", err, want)
		}
	}
	_, _, err = runRoot("simulate", "--trace", azureConvTrace, "--length", "1m", "--hpa", "testdata/malformed.prom")
	if err == nil || !strings.Contains(err.Error(), "testdata/malformed.prom") {
		t.Errorf("error = %v, want one naming the bad --hpa file", err)
	}
	_, _, err = runRoot("simulate", "--trace", azureConvTrace, "--profile", "testdata/none.yaml")
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
	if _, progress, err := runRoot("simulate", "--trace", azureConvTrace, "--length", "1m", "--autoscalers", "", "--profile", profile,
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
		Autoscalers []struct{ Name string } `json:"autoscalers"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if e := rep.Settings.Engine; e.MaxNumSeqs != 32 || e.StepTime.Base != "7ms" || len(rep.Autoscalers) != 2 {
		t.Errorf("engine %+v, %d policies; want the profile's 32 seqs, the flag's 7ms base, only the oracle and static", e, len(rep.Autoscalers))
	}
}

// TestSimulateUserHPAs: --hpa is repeatable and each manifest becomes a policy
// named after it; the README's metric kinds are accepted (External and Pods
// metrics of the adapter, Resource nvidia.com/gpu), and the ones it excludes are
// rejected with the reason: Pods llm_demand_replicas, Pods metrics off the adapter
// path.
func TestSimulateUserHPAs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, metrics string) string {
		path := filepath.Join(dir, name+".yaml")
		manifest := "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: " + name + "}\n" +
			"spec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: vllm}\n  maxReplicas: 4\n  metrics:\n" + metrics
		if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	pods := func(metric string) string {
		return "  - type: Pods\n    pods:\n      metric: {name: " + metric + "}\n      target: {type: AverageValue, averageValue: 800m}\n"
	}
	kvPods := write("kv-pods", pods("llm_kv_cache_usage"))
	gpu := write("gpu", "  - type: Resource\n    resource:\n      name: nvidia.com/gpu\n      target: {type: Utilization, averageUtilization: 70}\n")
	waiting := write("waiting", "  - type: External\n    external:\n      metric: {name: llm_num_requests_waiting}\n"+
		"      target: {type: AverageValue, averageValue: \"5\"}\n")
	out, progress, err := runRoot("simulate", "--trace", azureConvTrace, "--length", "1m", "--time-scale", "0.5", "--autoscalers", "",
		"--hpa", kvPods, "--hpa", gpu, "--hpa", waiting)
	if err != nil {
		t.Fatalf("simulate: %v\n%s", err, progress)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	wantRows := []string{"oracle", "static", "kv-pods", "gpu", "waiting"}
	if len(lines) != len(wantRows)+2 {
		t.Fatalf("table:\n%s\nwant a header, %d policy lines and a footer", out, len(wantRows))
	}
	for i, name := range wantRows {
		if f := strings.Fields(lines[i+1]); len(f) == 0 || f[0] != name {
			t.Errorf("table line %d = %q, want policy %s", i+1, lines[i+1], name)
		}
	}
	// --time-scale 0.5: a minute of trace replayed in 30 s.
	if footer := lines[len(lines)-1]; !strings.Contains(footer, "over 30s") {
		t.Errorf("footer %q, want the minute replayed over 30s", footer)
	}

	_, _, err = runRoot("simulate", "--trace", azureConvTrace, "--length", "1m", "--autoscalers", "", "--hpa", write("demand-pods", pods("llm_demand_replicas")))
	if err == nil || !strings.Contains(err.Error(), `Pods metric "llm_demand_replicas" is not one the simulated adapter serves per pod`) {
		t.Errorf("error = %v, want Pods llm_demand_replicas rejected", err)
	}
	_, _, err = runRoot("simulate", "--trace", azureConvTrace, "--length", "1m", "--autoscalers", "", "--hpa", kvPods, "--hpa-metrics-path", "keda")
	if err == nil || !strings.Contains(err.Error(), "Pods metrics are simulated on the adapter path only") {
		t.Errorf("error = %v, want Pods metrics off the adapter path rejected", err)
	}
}

// TestSimulateNeverServed: a request still waiting for its first token when
// --drain-limit ends counts as a miss, and a quantile that falls on it reads
// "never" (the README's Columns paragraph).
func TestSimulateNeverServed(t *testing.T) {
	out, progress, err := runRoot("simulate", "--trace", azureConvTrace, "--length", "20s", "--autoscalers", "", "--drain-limit", "1ms")
	if err != nil {
		t.Fatalf("simulate: %v\n%s", err, progress)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("table:\n%s\nwant a header, the oracle, static and a footer", out)
	}
	for _, line := range lines[1:3] {
		f := strings.Fields(line)
		if len(f) < 6 || f[1] == "100.00%" || f[5] != "never" {
			t.Errorf("line %q: want a TTFT share below 100%% and p99 TTFT never", line)
		}
	}
}

// TestHostileLabInputs: inputs that once crashed the lab tool, hung it or
// destroyed a file are refused before any replay, each naming the flag: a
// NaN target reached a quantity parser that panics, a 1 ns oracle interval
// or two billion seeds ran out of memory, a huge time scale ran for hours,
// and --json naming the trace overwrote it.
func TestHostileLabInputs(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "conv.csv")
	data, err := os.ReadFile(azureConvTrace)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(trace, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sb := []string{"scoreboard", "--trace", trace, "--tune-start", "20m", "--score-start", "22m", "--slice-length", "1m", "--seeds", "1"}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"NaN queue target", append(sb, "--families", "queue", "--queue-targets", "NaN"), []string{"queue target NaN"}},
		{"infinite and NaN KV targets", append(sb, "--families", "kv", "--kv-targets", "Inf,NaN"), []string{"KV-cache usage target +Inf", "KV-cache usage target NaN"}},
		{"rates out of range", append(sb, "--rates", "-1,1e308"), []string{"demand rate -1", "demand rate 1e+308"}},
		{"GPU utilization over 100 %", append(sb, "--gpu-utilization-targets", "1000"), []string{"GPU utilization target 1000"}},
		{"scale-up windows past the API's range", append(sb, "--scale-up-windows", "2h,1500ms,0s,0s"), []string{"--scale-up-windows: scale-up window 2h0m0s: want whole seconds in [0, 1h]", "scale-up window 1.5s: want whole seconds", "scale-up window 0s given twice"}},
		{"scale-up policy past the API's range", append(sb, "--scale-up-pods", "0", "--scale-up-period", "1500ms"), []string{"--scale-up-pods=0 --scale-up-percent=0 --scale-up-period=1.5s: want 1 to 1024 pods"}},
		{"negative scale-up percentage", append(sb, "--scale-up-percent", "-100"), []string{"--scale-up-percent=-100"}},
		{"huge scale-up percentage", append(sb, "--scale-up-percent", "2147483647"), []string{"--scale-up-percent=2147483647", "a percentage in [0, 10000]"}},
		{"scale-up pods past int32", append(sb, "--scale-up-pods", "2147483647"), []string{"--scale-up-pods=2147483647", "want 1 to 1024 pods"}},
		{"scale-down percentage over 100", append(sb, "--scale-down-percent", "101"), []string{"--scale-down-percent=101: want a percentage in [0, 100]"}},
		{"fractional scale-down period", append(sb, "--scale-down-period", "1500ms"), []string{"--scale-down-window=5m0s --scale-down-period=1.5s: want whole seconds"}},
		{"too many scale-up windows", append(sb, "--scale-up-windows", "0s,1s,2s,3s,4s,5s,6s,7s,8s,9s,10s"), []string{"--scale-up-windows: 11 windows, want 1 to 10"}},
		{"two rates one label", append(sb, "--families", "saturation+rate", "--rates", "8.4,8.40000001"), []string{"point saturation+rate/rate=8.4 given twice (points are told apart by their labels, which keep 3 decimals)"}},
		{"trend window under a second", append(sb, "--trend-window", "1ms"), []string{"trend window 1ms: want one in [1s, 24h0m0s]"}},
		{"trend lookahead past an hour", append(sb, "--trend-lookahead", "2h"), []string{"trend lookahead 2h0m0s: want one in (0s, 1h0m0s]"}},
		{"two billion seeds", append(sb[:len(sb)-1], "2000000000"), []string{"--seeds=2000000000: want 1 to 1000"}},
		{"seeds wrapping around", append(sb, "--first-seed", "18446744073709551615", "--seeds", "2"), []string{"wrap around"}},
		{"negative workers", append(sb, "--workers", "-1"), []string{"--workers=-1"}},
		{"scoreboard JSON over the trace", append(sb, "--json", trace), []string{"is an input of this run"}},
		{"simulate JSON over the trace", []string{"simulate", "--trace", trace, "--length", "1m", "--json", trace}, []string{"--json=" + trace + ": is an input of this run"}},
		{"JSON and SVG to one file", []string{"simulate", "--trace", trace, "--length", "1m", "--json", filepath.Join(dir, "x"), "--svg", filepath.Join(dir, "x")}, []string{"--json writes the same file"}},
		{"output that is a directory", []string{"simulate", "--trace", trace, "--length", "1m", "--json", dir}, []string{"--json=" + dir + ": is a directory"}},
		{"output into a missing directory", []string{"simulate", "--trace", trace, "--length", "1m", "--svg", filepath.Join(dir, "no", "x.svg")}, []string{"its directory does not exist"}},
		{"1 ns oracle interval", []string{"simulate", "--trace", trace, "--length", "1m", "--oracle-interval", "1ns"}, []string{"oracle interval must be in [1s, 1h0m0s], got 1ns"}},
		{"huge time scale", []string{"simulate", "--trace", trace, "--start", "20m", "--length", "1m", "--time-scale", "1e6"}, []string{"more than 744h0m0s"}},
		{"clients that leave before the SLO", []string{"simulate", "--trace", trace, "--length", "1m", "--abandon-after", "1ns"}, []string{"abandon after 1ns is under the TTFT SLO 2s"}},
		{"min replicas past the oracle's cap", []string{"simulate", "--trace", trace, "--length", "1m", "--min-replicas", "5000"}, []string{"min replicas must be in [1, 1024], got 5000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runRoot(tt.args...)
			for _, want := range tt.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error = %v, want it to contain %q", err, want)
				}
			}
		})
	}
	if after, err := os.ReadFile(trace); err != nil || !bytes.Equal(after, data) {
		t.Errorf("the trace changed (%v)", err)
	}
}

// TestInterruptedRunReturns: with its context done (the first SIGINT or
// SIGTERM), a command returns at once, without waiting for its replays.
func TestInterruptedRunReturns(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	block := make(chan struct{})
	defer close(block)
	err := untilDone(ctx, func() error { <-block; return nil })
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("untilDone = %v, want an interruption", err)
	}
	if err := untilDone(context.Background(), func() error { return errors.New("bad flag") }); err == nil || err.Error() != "bad flag" {
		t.Errorf("untilDone = %v, want the run's own error", err)
	}
	// The assembled command: a scoreboard of many seconds returns with the
	// interruption (its replays go on in the background until the test
	// binary exits, so the slice is short).
	cmd := NewCommand(ctx)
	cmd.SetArgs([]string{"scoreboard", "--trace", azureConvTrace, "--tune-start", "20m", "--score-start", "22m", "--slice-length", "1m",
		"--seeds", "2", "--families", "queue", "--queue-targets", "5"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("scoreboard with its context done = %v, want an interruption", err)
	}
}

// TestScoreboardBehaviorFlags: one --scale-up-windows, --scale-up-pods,
// --scale-up-percent, --scale-up-period, --scale-down-window,
// --scale-down-period and --scale-down-percent set every family's HPA
// behavior; the rest stays the recommended one.
func TestScoreboardBehaviorFlags(t *testing.T) {
	o := NewScoreboardOptions()
	fs := pflag.NewFlagSet("scoreboard", pflag.ContinueOnError)
	for _, f := range o.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse([]string{"--scale-up-windows", "60s", "--scale-up-pods", "4", "--scale-up-percent", "100", "--scale-up-period", "15s",
		"--scale-down-window", "90s", "--scale-down-period", "30s", "--scale-down-percent", "50"}); err != nil {
		t.Fatal(err)
	}
	want := simulate.RecommendedBehavior()
	up, down := int32(60), int32(90)
	want.ScaleUp.StabilizationWindowSeconds = &up
	want.ScaleUp.Policies = []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15},
		{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}}
	want.ScaleDown.StabilizationWindowSeconds = &down
	want.ScaleDown.Policies = []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 30},
		{Type: autoscalingv2.PercentScalingPolicy, Value: 50, PeriodSeconds: 30}}
	if diff := cmp.Diff(want, o.grid().HPABehavior()); diff != "" {
		t.Errorf("behavior (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(simulate.RecommendedBehavior(), NewScoreboardOptions().grid().HPABehavior()); diff != "" {
		t.Errorf("default behavior is not the recommended one (-want +got):\n%s", diff)
	}
}
