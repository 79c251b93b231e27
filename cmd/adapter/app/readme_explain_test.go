package app

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/saturation-adapter/saturation-adapter/internal/doctest"
)

// explainDocs are the documents and sections whose `adapter explain` commands
// TestReadmeExplainCommands runs. exact marks a section whose every command is
// followed by the output it prints, which must be what the command prints, byte
// for byte.
var explainDocs = []struct {
	doc, section string
	exact        bool
}{
	{"README.md", "Check it", true},
	{explainDoc, "`adapter explain`: evaluate /metrics offline", false},
	{explainDoc, "A wedged pod beside a sleeping one", true},
	{"docs/prometheus.md", "Prometheus, Thanos or Mimir as the source", false},
}

// The documents holding the PolicyConfig blocks the explain commands use, and the
// header those blocks start with.
const (
	policiesDoc              = "docs/policies.md"
	scaleToZeroDoc           = "docs/scale-to-zero.md"
	readmePolicyConfigHeader = "apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies:\n"
)

// readmeExplainFiles are the files the documented explain commands name, each a copy
// of a real capture: an engine under load (4 waiting, saturation 0.8 at the
// default set points), an idle vLLM V1 engine (saturation 0), hazard NC-04's
// endpoint picker holding 380 requests for qwen3-32b-pool, and a real Prometheus
// answer to a range selector over two emulated vLLM pods.
var readmeExplainFiles = map[string]string{
	"pod-a.prom":  "testdata/samples/llm-d-inference-sim_v0.10.2_load.prom",
	"pod-b.prom":  "testdata/samples/vllm_v1-0.10-nvcr25.09_single-engine.prom",
	"a.prom":      "testdata/samples/vllm_v1-0.10-nvcr25.09_single-engine.prom",
	"a-1.prom":    "testdata/samples/vllm_v1-0.10-nvcr25.09_single-engine.prom",
	"a-2.prom":    "testdata/samples/vllm_v1-0.10-nvcr25.09_single-engine.prom",
	"a-3.prom":    "testdata/samples/vllm_v1-0.10-nvcr25.09_single-engine.prom",
	"b.prom":      "testdata/samples/llm-d-inference-sim_v0.10.2_load.prom",
	"epp.prom":    "testdata/hazards/NC-04-epp.prom",
	"answer.json": "testdata/prometheus/vllm-emulator_range.json",
	// A vLLM pod wedged over four scrapes, and one asleep (cmd/adapter/app's own).
	"wedged-0.prom": "cmd/adapter/app/testdata/wedged-t0.prom",
	"wedged-1.prom": "cmd/adapter/app/testdata/wedged-t1.prom",
	"wedged-2.prom": "cmd/adapter/app/testdata/wedged-t2.prom",
	"wedged-3.prom": "cmd/adapter/app/testdata/wedged-t3.prom",
	"asleep.prom":   "cmd/adapter/app/testdata/sleeping.prom",
}

// readmePolicies returns a policies.yaml made of the documentation's own
// PolicyConfig blocks: the three workload policies of docs/policies.md
// (chat-saturation among them, the block pkg/config checks as config.Example) and
// the gateway input's example of docs/scale-to-zero.md (qwen-demand).
func readmePolicies(t *testing.T) string {
	t.Helper()
	md := docText(t, policiesDoc) + docText(t, scaleToZeroDoc)
	var workload, gateway string
	for _, block := range strings.Split(md, "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if !strings.HasPrefix(block, readmePolicyConfigHeader) {
			continue
		}
		switch {
		case strings.Contains(block, "\n- name: batch-demand\n"):
			workload = block
		case strings.Contains(block, "\n- name: qwen-demand\n"):
			gateway = strings.TrimPrefix(block, readmePolicyConfigHeader)
		}
	}
	if workload == "" || gateway == "" {
		t.Fatalf("%s, %s: no PolicyConfig block with the workload policies (batch-demand), or none with qwen-demand", policiesDoc, scaleToZeroDoc)
	}
	return workload + gateway
}

// TestReadmeExplainCommands runs every `adapter explain` command of explainDocs'
// sections as written, through the root command, in a directory holding the files
// they name (readmeExplainFiles, and policies.yaml from the documentation's own
// policy blocks), and checks what each prints: the pods it names, the policy, and
// the value these captures give, and in an exact section the output shown.
func TestReadmeExplainCommands(t *testing.T) {
	files := map[string][]byte{"policies.yaml": []byte(readmePolicies(t))}
	for name, src := range readmeExplainFiles {
		b, err := os.ReadFile(filepath.Join(repoRoot, src))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	type command struct {
		doctest.Command
		doc, md string
		exact   bool
	}
	var cmds []command
	for _, d := range explainDocs {
		md := docText(t, d.doc)
		for _, c := range docAdapterCommands(t, d.doc, d.section) {
			cmds = append(cmds, command{c, d.doc, md, d.exact})
		}
	}
	dir := doctest.InCheckoutDir(t, repoRoot)
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	checks := readmeExplainChecks()
	for _, c := range cmds {
		if c.Args[0] != "explain" {
			t.Errorf("%s line %d: %s: want only explain commands here", c.doc, c.Block.Line, c.Line)
			continue
		}
		check, ok := checks[c.Line]
		if !ok {
			t.Errorf("%s line %d: %s: no check for this command in readmeExplainChecks", c.doc, c.Block.Line, c.Line)
			continue
		}
		delete(checks, c.Line)
		out, errOut, err := runRoot(c.Args...)
		if err != nil {
			t.Errorf("%s: %v\n%s", c.Line, err, errOut)
			continue
		}
		if msg := check(out); msg != "" {
			t.Errorf("%s: %s; it printed:\n%s", c.Line, msg, out)
		}
		if c.exact {
			if want := doctest.Output(t, c.md, c.Block); out != want {
				t.Errorf("%s line %d: the output shown for %s:\n%s\nit prints:\n%s", c.doc, c.Block.Line, c.Line, want, out)
			}
		}
	}
	for line := range checks {
		t.Errorf("readmeExplainChecks has %q, which is no documented command", line)
	}
}

// readmeExplainChecks returns, for each documented explain command as written, what
// its output must show with readmeExplainFiles: "" when it does, else what is wrong.
func readmeExplainChecks() map[string]func(out string) string {
	pool := func(want ExplainPool, sources ...string) func(string) string {
		return func(out string) string {
			var ex Explanation
			if err := json.Unmarshal([]byte(out), &ex); err != nil {
				return "no JSON: " + err.Error()
			}
			var got []string
			for _, p := range ex.Pods {
				got = append(got, p.Source)
			}
			switch p := ex.Pool; {
			case strings.Join(got, " ") != strings.Join(sources, " "):
				return "pods " + strings.Join(got, " ") + ", want " + strings.Join(sources, " ")
			case p.Policy != want.Policy || p.Pods != want.Pods || p.Value == nil || math.Abs(*p.Value-*want.Value) > 1e-9:
				return "the pool is not " + want.Policy + " = " + jsonString(want.Value)
			case (want.GatewayQueue == nil) != (p.GatewayQueue == nil) || want.GatewayQueue != nil && *p.GatewayQueue != *want.GatewayQueue:
				return "gateway queue " + jsonString(p.GatewayQueue) + ", want " + jsonString(want.GatewayQueue)
			}
			return ""
		}
	}
	table := func(lines ...string) func(string) string {
		return func(out string) string {
			for _, l := range lines {
				if !strings.Contains(out, l) {
					return "the table lacks " + l
				}
			}
			return ""
		}
	}
	f := func(v float64) *float64 { return &v }
	return map[string]func(string) string{
		// The loaded engine at 4 waiting / 5 = 0.8 beside an idle one: the mean.
		"adapter explain pod-a.prom pod-b.prom": pool(ExplainPool{Policy: "llm_saturation", Pods: 2, Value: f(0.4)}, "pod-a.prom", "pod-b.prom"),
		// The same as a table; the README shows its output, checked byte for byte.
		"adapter explain -o table pod-a.prom pod-b.prom": table(
			"pod-a.prom  vllm-v1  ok     4", "pod-b.prom  vllm-v1  ok     0", "pool llm_saturation = 0.4 over 2 pods (0 unknown)"),
		// 4 waiting / 25.
		"adapter explain --queue-depth-set-point 25 pod-a.prom": pool(ExplainPool{Policy: "llm_saturation", Pods: 1, Value: f(0.16)}, "pod-a.prom"),
		// One pod of three scrapes.
		"adapter explain --interval 15s a-1.prom,a-2.prom,a-3.prom": func(out string) string {
			if msg := pool(ExplainPool{Policy: "llm_saturation", Pods: 1, Value: f(0)}, "a-1.prom,a-2.prom,a-3.prom")(out); msg != "" {
				return msg
			}
			if !strings.Contains(out, `"scrapes": 3`) {
				return "not three scrapes"
			}
			return ""
		},
		// b.prom's 4 waiting at chat-saturation's set point 4, and its TTFT guardrail at the SLO.
		"adapter explain --config policies.yaml --policy chat-saturation -o table a-1.prom,a-2.prom b.prom": table(
			"queueDepth 4/4=1*", "pool ttft: 1.5s / SLO 1.5s = 1", "pool chat-saturation = 1 over 2 pods (0 unknown)"),
		// 0 + 0.8 replicas from the engines, 380 held / 5 = 76 from the gateway.
		"adapter explain --config policies.yaml --policy qwen-demand --gateway epp.prom a.prom b.prom": pool(
			ExplainPool{Policy: "qwen-demand", Pods: 2, Value: f(76.8), GatewayQueue: f(380)}, "a.prom", "b.prom"),
		"adapter explain --config policies.yaml --policy qwen-demand --gateway epp.prom": pool(
			ExplainPool{Policy: "qwen-demand", Pods: 0, Value: f(76), GatewayQueue: f(380)}),
		// Both unknown: wedged, and asleep; explain.md shows the table, checked byte for byte.
		"adapter explain --interval 5s -o table wedged-0.prom,wedged-1.prom,wedged-2.prom,wedged-3.prom asleep.prom,asleep.prom,asleep.prom,asleep.prom": table(
			"vllm-v1  wedged    50", "vllm-v1  sleeping  0", "pool llm_saturation: no value over 2 pods (2 unknown)"),
		// The two emulated pods Prometheus scraped, at their newest readings (18 and 36 waiting / 5).
		"adapter explain --prometheus-response answer.json -o table": table(
			"llm/vllm-0  vllm-v1  ok     18", "llm/vllm-1  vllm-v1  ok     36", "pool llm_saturation = 5.4 over 2 pods (0 unknown)"),
	}
}

// jsonString formats an optional value as the JSON output does.
func jsonString(v *float64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// docs/examples/policies.yaml is the policies.yaml the documented explain
// commands name, shipped so that a reader can run them: the documentation's own
// blocks, which it must equal.
func TestShippedExamplePolicies(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "examples", "policies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var body []string
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if len(body) == 0 && strings.HasPrefix(line, "# ") {
			continue // the file's own header
		}
		body = append(body, line)
	}
	if got, want := strings.Join(body, ""), readmePolicies(t); got != want {
		t.Errorf("docs/examples/policies.yaml differs from the policy blocks of %s and %s; write them into it:\n%s", policiesDoc, scaleToZeroDoc, want)
	}
}
