package app

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

const samples = "../../../testdata/samples/"

// explain on every real sample: a documented answer, or a clear error for an engine
// build that exposes no saturation signal.
func TestExplainRealSamples(t *testing.T) {
	tests := []struct {
		file       string
		dialect    string
		saturation float64
		err        string
	}{
		{file: "vllm_v1-0.10-nvcr25.09_single-engine.prom", dialect: "vllm-v1", saturation: 0}, // idle: the KV residue (null block) is not demand
		{file: "vllm_v0-0.6-qwenvl-issue55_excerpt.prom", dialect: "vllm-v0", saturation: 0},
		{file: "llm-d-inference-sim_v0.10.2_load.prom", dialect: "vllm-v1", saturation: 4.0 / 5},
		{file: "sglang_v0.4-docs.prom", dialect: "sglang", saturation: 2826.0 / 5},
		{file: "triton-trtllm_readme.prom", dialect: "triton-trtllm", saturation: 0.4875 / 0.8},
		{file: "llamacpp_mid2025-pr13196_excerpt.prom", err: "no LLM engine saturation metrics found"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join(samples, tt.file)
			ex, err := Explain([]string{path}, NewScoringOptions(), ExplainOptions{}, nil)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), tt.file) {
					t.Fatalf("error = %v, want one naming the file and containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := ex.Pods[0]
			if got.Dialect != tt.dialect || got.Source != path {
				t.Errorf("dialect/source = %s/%s, want %s/%s", got.Dialect, got.Source, tt.dialect, path)
			}
			if got.Saturation == nil || math.Abs(*got.Saturation-tt.saturation) > 1e-12 {
				t.Errorf("saturation = %v, want %g", got.Saturation, tt.saturation)
			}
			if ex.Pool.Pods != 1 || ex.Pool.DemandReplicas == nil || *ex.Pool.DemandReplicas != *got.Saturation {
				t.Errorf("pool = %+v, want one pod with demand = saturation", ex.Pool)
			}
		})
	}
}

// The JSON schema documented in docs/explain.md: field names and null for absent values.
func TestExplainJSONSchema(t *testing.T) {
	cmd := newExplainCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetIn(strings.NewReader("vllm:num_requests_waiting{engine=\"0\"} 10\nvllm:kv_cache_usage_perc{engine=\"0\"} NaN\n"))
	cmd.SetArgs([]string{"-", filepath.Join(samples, "vllm_v1-0.10-nvcr25.09_single-engine.prom"), "--queue-depth-set-point", "10"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Pods []map[string]json.RawMessage `json:"pods"`
		Pool map[string]json.RawMessage   `json:"pool"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, key := range []string{"source", "dialect", "engines", "queueDepth", "running", "kvCacheUsage", "terms", "saturation", "warnings"} {
		if _, ok := doc.Pods[0][key]; !ok {
			t.Errorf("pods[0] has no %q", key)
		}
	}
	if got := string(doc.Pods[0]["kvCacheUsage"]); got != "null" {
		t.Errorf("kvCacheUsage = %s, want null for a rejected NaN", got)
	}
	if got := string(doc.Pods[0]["saturation"]); got != "1" {
		t.Errorf("saturation = %s, want 1 (10 waiting / --queue-depth-set-point 10)", got)
	}
	for _, key := range []string{"pods", "unknown", "saturation", "demandReplicas"} {
		if _, ok := doc.Pool[key]; !ok {
			t.Errorf("pool has no %q", key)
		}
	}
}

// Every field of explain's JSON is in docs/explain.md's field table, as
// `name` (a pod's, or the pool's in its row) or `pool.name`.
func TestExplainJSONFieldsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/explain.md")
	if err != nil {
		t.Fatal(err)
	}
	var table []string
	for _, l := range strings.Split(string(doc[bytes.Index(doc, []byte("| field | meaning |")):]), "\n") {
		if !strings.HasPrefix(l, "|") {
			break
		}
		table = append(table, l)
	}
	rows := strings.Join(table, "\n")
	poolRow := ""
	for _, l := range table {
		if strings.HasPrefix(l, "| `pool` |") {
			poolRow = l
		}
	}
	for _, c := range []struct {
		typ    reflect.Type
		prefix string
		rows   string
	}{{reflect.TypeFor[ExplainPod](), "", rows}, {reflect.TypeFor[ExplainPool](), "pool.", poolRow}} {
		for f := range c.typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !strings.Contains(c.rows, "`"+name+"`") && !strings.Contains(rows, "`"+c.prefix+name+"`") {
				t.Errorf("docs/explain.md's field table does not name `%s%s` (%s.%s)", c.prefix, name, c.typ.Name(), f.Name)
			}
		}
	}
}

func TestExplainErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"/nonexistent/metrics.prom"}, "reading /nonexistent/metrics.prom"},
		{[]string{"testdata/malformed.prom"}, "testdata/malformed.prom: parsing exposition"},
		{[]string{filepath.Join(samples, "sglang_v0.4-docs.prom"), "--kv-cache-usage-set-point", "1.5"}, "--kv-cache-usage-set-point=1.5"},
		// A pod's scrapes out of time order: the older one silently replaced
		// the newer, and explain showed one scrape.
		{[]string{"testdata/timestamped-10s.prom,testdata/timestamped-0s.prom"},
			"testdata/timestamped-0s.prom: its samples are from 2023-11-14T22:13:20Z, before those of testdata/timestamped-10s.prom (2023-11-14T22:13:30Z): give one pod's scrapes in time order"},
		// Timestamped and bare scrapes of one pod: the bare ones' times are
		// made up, so they cannot be ordered against the others.
		{[]string{"testdata/timestamped-0s.prom," + filepath.Join(samples, "sglang_v0.4-docs.prom")},
			"testdata/timestamped-0s.prom: its samples carry timestamps and those of " + filepath.Join(samples, "sglang_v0.4-docs.prom") + " do not"},
	} {
		cmd := newExplainCommand()
		cmd.SetOut(new(bytes.Buffer))
		cmd.SetErr(new(bytes.Buffer))
		cmd.SetArgs(tt.args)
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("explain %v: error %v, want it to contain %q", tt.args, err, tt.want)
		}
	}
}

// A pool with no known pod is what the server answers with an error: explain says
// so instead of printing the unknown-pod saturation as if it were a value.
func TestExplainUnknownPool(t *testing.T) {
	ex, err := Explain([]string{"-"}, NewScoringOptions(), ExplainOptions{}, strings.NewReader("vllm:num_requests_running 3\nvllm:num_requests_waiting NaN\n"))
	if err != nil {
		t.Fatal(err)
	}
	if ex.Pool.Saturation != nil || ex.Pool.DemandReplicas != nil || !strings.Contains(ex.Pool.Error, "503") {
		t.Errorf("pool = %+v, want null values and the server's error", ex.Pool)
	}
}

var update = flag.Bool("update", false, "rewrite the golden files of explain")

// golden compares got with testdata/explain/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "explain", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("explain output differs from %s (-want +got):\n%s", path, diff)
	}
}

// runExplain runs the explain command as a user does and returns its output,
// or its error's text.
func runExplain(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := newExplainCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(new(bytes.Buffer))
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		return []byte("error: " + err.Error() + "\n")
	}
	return out.Bytes()
}

// Golden explain output for every real sample and every hazard body, one pod
// each, and for the scrape sequences of the hazards that span several scrapes.
func TestExplainGolden(t *testing.T) {
	root := filepath.Join("..", "..", "..", "testdata")
	for _, dir := range []string{"samples", "hazards"} {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.prom"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no .prom files in %s: %v", dir, err)
		}
		for _, f := range files {
			name := dir + "_" + strings.TrimSuffix(filepath.Base(f), ".prom") + ".json"
			t.Run(name, func(t *testing.T) { golden(t, name, runExplain(t, f)) })
		}
	}
	// A real Prometheus's answer (a range selector's matrix: five scrapes of two
	// pods, one with two data-parallel engines).
	t.Run("prometheus_vllm-emulator_range.json", func(t *testing.T) {
		golden(t, "prometheus_vllm-emulator_range.json", runExplain(t, "--prometheus-scrape-interval=2s",
			"--prometheus-response", filepath.Join(root, "prometheus", "vllm-emulator_range.json")))
	})
	seqs := map[string][]string{
		"sequence_BC-12.json": {"hazards/BC-12-t0.prom", "hazards/BC-12-t1.prom"},
		"sequence_NC-02.json": {"hazards/NC-02-t0.prom", "hazards/NC-02-t1.prom"},
	}
	for name, files := range seqs {
		var paths []string
		for _, f := range files {
			paths = append(paths, filepath.Join(root, f))
		}
		t.Run(name, func(t *testing.T) {
			golden(t, name, runExplain(t, "--interval=15s", "--policy=llm_demand_replicas", strings.Join(paths, ",")))
		})
	}
}

// The states explain shows, as a table: a wedged pod (four scrapes 5 s apart
// with no progress while the queue grows) beside a sleeping one.
func TestExplainStatesTable(t *testing.T) {
	wedged := strings.Join([]string{"testdata/wedged-t0.prom", "testdata/wedged-t1.prom", "testdata/wedged-t2.prom", "testdata/wedged-t3.prom"}, ",")
	out := runExplain(t, "--interval=5s", "-o", "table", wedged, "testdata/sleeping.prom,testdata/sleeping.prom,testdata/sleeping.prom,testdata/sleeping.prom")
	golden(t, "states.txt", out)
	for _, want := range []string{"wedged", "sleeping", "counts at the unknown-pod saturation"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	golden(t, "states.json", runExplain(t, "--interval=5s", wedged, "testdata/sleeping.prom"))
}

// explain --prometheus-response on the Prometheus hazards: duplicates from
// three monitors count once (BC-05); answers without a pod's series or
// without engine metrics fail naming why (BC-01, BC-02, BC-03).
func TestExplainPrometheusResponse(t *testing.T) {
	hazards := "../../../testdata/hazards/"
	tests := []struct {
		file string
		want float64
		err  string
	}{
		{file: "BC-05.json", want: 12.0 / 5},
		{file: "BC-01.json", err: "no series with the labels namespace and pod"},
		{file: "BC-03.json", err: "no series with the labels namespace and pod"},
		{file: "BC-02.json", err: "pod llm/vllm-pod-a: no LLM engine saturation metrics found"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			ex, err := ExplainPrometheus([]string{hazards + tt.file}, NewScoringOptions(), NewPrometheusOptions(), ExplainOptions{}, nil)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), tt.file) {
					t.Fatalf("error = %v, want one naming the file and saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(ex.Pods) != 1 || ex.Pods[0].Source != "llm/vllm-pod-a" || ex.Pods[0].Scrapes != 1 {
				t.Fatalf("pods %+v, want llm/vllm-pod-a with one reading", ex.Pods)
			}
			if ex.Pool.Value == nil || math.Abs(*ex.Pool.Value-tt.want) > 1e-12 || *ex.Pods[0].QueueDepth != 12 {
				t.Errorf("pool %+v, queue %v; want %g from one queue of 12", ex.Pool, ex.Pods[0].QueueDepth, tt.want)
			}
		})
	}
	t.Run("through the command, as a table", func(t *testing.T) {
		cmd := newExplainCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetArgs([]string{"--prometheus-response", hazards + "BC-05.json", "-o", "table"})
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "llm/vllm-pod-a") || !strings.Contains(out.String(), "pool llm_saturation = 2.4 over 1 pods") {
			t.Errorf("table:\n%s", out.String())
		}
		cmd = newExplainCommand()
		cmd.SetArgs([]string{"--prometheus-response", hazards + "BC-05.json", samples + "vllm_v1-0.10-nvcr25.09_single-engine.prom"})
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "not both") {
			t.Errorf("files and --prometheus-response together: %v, want an error", err)
		}
	})
}

// explain reads a saved answer with the server's decoder: an answer the server
// refuses (a key given twice, whichever its letter case) fails explain with the
// same error, one with keys in another letter case reads as the server reads
// it, and Prometheus's own error answer is named as one.
func TestExplainPrometheusReadsAsTheServer(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bc05, err := os.ReadFile("../../../testdata/hazards/BC-05.json")
	if err != nil {
		t.Fatal(err)
	}
	upper := write("upper.json", strings.Replace(strings.Replace(string(bc05), `"resultType"`, `"ResultType"`, 1), `"result"`, `"RESULT"`, 1))
	ex, err := ExplainPrometheus([]string{upper}, NewScoringOptions(), NewPrometheusOptions(), ExplainOptions{}, nil)
	if err != nil || ex.Pool.Value == nil || math.Abs(*ex.Pool.Value-12.0/5) > 1e-12 {
		t.Fatalf("keys in capitals: pool %+v, error %v; want 2.4 as from BC-05.json", ex.Pool, err)
	}
	for _, tc := range []struct{ file, want string }{
		{write("twice.json", strings.Replace(string(bc05), `"result"`, `"result":[],"Result"`, 1)), `"result" given twice`},
		{write("error.json", `{"status":"error","errorType":"bad_data","error":"parse error at char 3"}`), "Prometheus's error answer: bad_data: parse error at char 3"},
	} {
		if _, err := ExplainPrometheus([]string{tc.file}, NewScoringOptions(), NewPrometheusOptions(), ExplainOptions{}, nil); err == nil ||
			!strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.file) {
			t.Errorf("%s: error %v; want one naming the file and saying %q", tc.file, err, tc.want)
		}
	}
}

// A label named as the adapter's own family label (saturation_adapter_metric)
// on an engine's series is the engine's label: explain reads a saved
// Prometheus answer holding it as it reads the /metrics body, the running
// gauge as running, not as the queue its label names.
func TestExplainPrometheusFamilyLabelOnEngineSeries(t *testing.T) {
	dir := t.TempDir()
	body := filepath.Join(dir, "pod.prom")
	if err := os.WriteFile(body, []byte("vllm:num_requests_waiting{engine=\"0\"} 0\n"+
		"vllm:num_requests_running{engine=\"0\",saturation_adapter_metric=\"vllm:num_requests_waiting\"} 40\n"+
		"vllm:kv_cache_usage_perc{engine=\"0\"} 0.5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	answer := filepath.Join(dir, "answer.json")
	series := func(name, value string, extra string) string {
		return `{"metric":{"__name__":"` + name + `","namespace":"llm","pod":"pod-a","engine":"0"` + extra + `},"values":[[1767225600,"` + value + `"]]}`
	}
	if err := os.WriteFile(answer, []byte(`{"status":"success","data":{"resultType":"matrix","result":[`+
		series("vllm:num_requests_waiting", "0", "")+","+
		series("vllm:num_requests_running", "40", `,"saturation_adapter_metric":"vllm:num_requests_waiting"`)+","+
		series("vllm:kv_cache_usage_perc", "0.5", "")+`]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	direct, err := Explain([]string{body}, NewScoringOptions(), ExplainOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := ExplainPrometheus([]string{answer}, NewScoringOptions(), NewPrometheusOptions(), ExplainOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(direct.Pods) != 1 || len(saved.Pods) != 1 {
		t.Fatalf("pods: body %d, saved answer %d; want 1", len(direct.Pods), len(saved.Pods))
	}
	d, p := direct.Pods[0], saved.Pods[0]
	str := func(v *float64) string {
		if v == nil {
			return "null"
		}
		return fmt.Sprint(*v)
	}
	for _, c := range []struct {
		name       string
		body, resp *float64
		want       string
	}{
		{"queue", d.QueueDepth, p.QueueDepth, "0"},
		{"running", d.Running, p.Running, "40"},
		{"KV", d.KVCacheUsage, p.KVCacheUsage, "0.5"},
		{"saturation", d.Saturation, p.Saturation, "0.625"},
		{"pool", direct.Pool.Value, saved.Pool.Value, "0.625"},
	} {
		if str(c.body) != c.want || str(c.resp) != c.want {
			t.Errorf("%s: body %s, saved answer %s; want %s", c.name, str(c.body), str(c.resp), c.want)
		}
	}
}

// explain --gateway (issue 8): a policy with a gateway input adds the gateway's
// queue as the server does (hazard NC-04's 380 held requests at set point 5 add
// 76 replicas), alone at zero pods; without the gateway's file its queue is
// unknown; a policy that does not count the held requests is warned about, and
// a mean policy read at zero Ready pods too (NC-08).
func TestExplainGateway(t *testing.T) {
	dir := t.TempDir()
	cfg := writePolicies(t, dir, `- name: qwen-demand
  kind: demand
  terms: [{kind: queueDepth, setPoint: 5}, {kind: kvCacheUsage, setPoint: 0.8}]
  gateway: {selector: app=qwen3-32b-epp, match: {inference_pool: qwen3-32b-pool}}
- name: qwen-mean
  kind: mean
  terms: [{kind: queueDepth, setPoint: 5}, {kind: kvCacheUsage, setPoint: 0.8}]
  gateway: {selector: app=qwen3-32b-epp, match: {inference_pool: qwen3-32b-pool}}
- name: other-pool
  kind: demand
  terms: [{kind: queueDepth, setPoint: 5}]
  gateway: {selector: app=qwen3-32b-epp, match: {inference_pool: llama-pool}}
`)
	a := filepath.Join(dir, "a.prom")
	b := filepath.Join(dir, "b.prom")
	for f, body := range map[string]string{
		a: "vllm:num_requests_waiting{engine=\"0\"} 4\nvllm:num_requests_running{engine=\"0\"} 8\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.78\n",
		b: "vllm:num_requests_waiting{engine=\"0\"} 5\nvllm:num_requests_running{engine=\"0\"} 8\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.79\n",
	} {
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	epp := filepath.Join("..", "..", "..", "testdata", "hazards", "NC-04-epp.prom")
	pool := func(args ...string) ExplainPool {
		t.Helper()
		var ex Explanation
		out := runExplain(t, append([]string{"--config=" + cfg}, args...)...)
		if err := json.Unmarshal(out, &ex); err != nil {
			t.Fatalf("explain %q: %s", args, out)
		}
		return ex.Pool
	}
	// Engines just under their set points (0.975 and 1.0) while 380 wait in the gateway.
	p := pool("--policy=qwen-demand", "--gateway="+epp, a, b)
	if p.Value == nil || math.Abs(*p.Value-77.975) > 1e-9 || p.GatewayQueue == nil || *p.GatewayQueue != 380 || len(p.Warnings) != 0 {
		t.Errorf("qwen-demand = %+v, want 77.975 with gateway queue 380 and no warning", p)
	}
	// Zero pods: the gateway's demand alone.
	if p := pool("--policy=qwen-demand", "--gateway="+epp); p.Value == nil || *p.Value != 76 || p.Pods != 0 {
		t.Errorf("zero pods: qwen-demand = %+v, want 76", p)
	}
	// A mean at zero pods: the value, and the NC-08 warning.
	if p := pool("--policy=qwen-mean", "--gateway="+epp); p.Value == nil || *p.Value != 76 || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "AverageValue") {
		t.Errorf("zero pods: qwen-mean = %+v, want 76 and a warning about Value targets", p)
	}
	// The built-in policy does not see the gateway: the held requests are warned about.
	p = pool("--gateway="+epp, a, b)
	if p.Value == nil || math.Abs(*p.Value-0.9875) > 1e-9 || len(p.Warnings) != 2 || !strings.Contains(p.Warnings[0], `the gateway holds 352 requests`) ||
		!strings.Contains(p.Warnings[0], `inference_pool="qwen3-32b-pool"`) || !strings.Contains(p.Warnings[0], "it has no gateway input") {
		t.Errorf("llm_saturation = %+v, want 0.9875 and a warning per held series", p)
	}
	// A gateway input for another pool: its series are not this pool's.
	if p := pool("--policy=other-pool", "--gateway="+epp, a); p.Value == nil || *p.Value != 0.8 || p.GatewayQueue == nil || *p.GatewayQueue != 0 ||
		len(p.Warnings) != 2 || !strings.Contains(p.Warnings[0], "does not select this series") {
		t.Errorf("other-pool = %+v, want 0.8, gateway queue 0 and two warnings", p)
	}
	// The gateway's queue unknown: no value, as the server's 503.
	if p := pool("--policy=qwen-demand", a, b); p.Value != nil || !strings.Contains(p.Error, "its queue is unknown without --gateway FILE") {
		t.Errorf("no --gateway: %+v, want no value and an error", p)
	}
	// Zero pods without a gateway input: the server's 404, and why.
	if p := pool("--gateway=" + epp); p.Value != nil || !strings.Contains(p.Error, "scale from zero needs a policy with a gateway input") {
		t.Errorf("zero pods, llm_saturation: %+v, want an error", p)
	}
	// A file that is no gateway's.
	if out := string(runExplain(t, "--config="+cfg, "--policy=qwen-demand", "--gateway="+a)); !strings.Contains(out, "no series of inference_extension_flow_control_queue_size") {
		t.Errorf("--gateway of an engine's body: %s", out)
	}
	// The table says it too.
	out := string(runExplain(t, "--config="+cfg, "--policy=qwen-demand", "--gateway="+epp, "-o", "table", a, b))
	for _, want := range []string{"pool qwen-demand: gateway queue 380", "pool qwen-demand = 77.97 over 2 pods"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// The explain page's flag table (explainDoc) names every flag of the command,
// with its default.
func TestExplainFlagsDocumented(t *testing.T) {
	section := docText(t, explainDoc)
	documented := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`--") {
			continue
		}
		names := strings.Split(cells[1], ",")
		defaults := strings.Split(cells[2], ",")
		for i, n := range names {
			n = strings.Trim(strings.TrimSpace(n), "`")
			if !strings.HasPrefix(n, "--") {
				continue
			}
			d := strings.Trim(strings.TrimSpace(defaults[min(i, len(defaults)-1)]), "`")
			documented[strings.TrimPrefix(n, "--")] = d
		}
	}
	newExplainCommand().Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden { // deprecated spellings
			return
		}
		d, ok := documented[f.Name]
		switch {
		case !ok:
			t.Errorf("explain flag --%s is not in %s's flag table", f.Name, explainDoc)
		case d == "the server's" || (d == "none" && f.DefValue == "[]"):
		case d != f.DefValue && !sameDuration(d, f.DefValue):
			t.Errorf("--%s: %s says default %q, the command %q", f.Name, explainDoc, d, f.DefValue)
		}
		delete(documented, f.Name)
	})
	for name := range documented {
		t.Errorf("%s documents explain flag --%s, which the command does not have", explainDoc, name)
	}
}

// explainEpoch is a fixed time for timestamped samples.
var explainEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func sameDuration(a, b string) bool {
	da, err1 := time.ParseDuration(a)
	db, err2 := time.ParseDuration(b)
	return err1 == nil && err2 == nil && da == db
}

// explain shows the controls that see ahead: the demand-rate term of each pod
// (over its scrapes, --interval apart), the pool's held peak and its trend, in
// the table and the JSON.
func TestExplainAhead(t *testing.T) {
	dir := t.TempDir()
	cfg := writePolicies(t, dir, `- name: chat-ahead
  kind: mean
  terms: [{kind: queueDepth, setPoint: 3}, {kind: demandRate, setPoint: 10, window: 30s}]
  peak: {window: 10m, headroom: 0.2}
  trend: {window: 2m, lookahead: 4m}
`)
	var scrapes []string
	for i, body := range []string{
		"vllm:num_requests_waiting 0\nvllm:num_requests_running 10\nvllm:request_success_total{finished_reason=\"stop\"} 100\n",
		"vllm:num_requests_waiting 0\nvllm:num_requests_running 20\nvllm:request_success_total{finished_reason=\"stop\"} 290\n",
	} {
		f := filepath.Join(dir, fmt.Sprintf("s%d.prom", i))
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		scrapes = append(scrapes, f)
	}
	pod := strings.Join(scrapes, ",")
	// 190 finished + 10 more running over 10 s: 20 requests/s, 2 replicas at 10
	// per replica; held with 20 % headroom: 2.4.
	table := string(runExplain(t, "--config="+cfg, "--policy=chat-ahead", "--interval=10s", "-o", "table", pod))
	// Two answers 10 s apart hold no rise: the trend is the demand itself.
	for _, want := range []string{"demandRate 20/10=2*", "pool chat-ahead: demand 2 replicas, held peak 2.4, with its trend 2 (no rise fitted: the fit needs 3 answers within the trend's window spanning at least 1m0s, half of it (one kept per 1/64 of it); it holds 2 spanning 10s)",
		"serves 2.4 replicas", "pool chat-ahead: peak and trend of these readings' 2 answers over 10s, one per reading time (the server keeps its own, one per request)",
		"pool chat-ahead = 2.4 over 1 pods"} {
		if !strings.Contains(table, want) {
			t.Errorf("table does not contain %q:\n%s", want, table)
		}
	}
	var ex Explanation
	if err := json.Unmarshal(runExplain(t, "--config="+cfg, "--policy=chat-ahead", "--interval=10s", pod), &ex); err != nil {
		t.Fatal(err)
	}
	if a := ex.Pool.Ahead; a == nil || a.Peak == nil || a.Trend == nil || *a.Trend != 2 || math.Abs(a.Served-2.4) > 1e-9 {
		t.Errorf("pool ahead = %+v, want a held peak, a trend of 2 and 2.4 served", a)
	}
}

// explain's peak hold and trend are the server's over the pool's answers at
// each reading time (as if the HPA had asked then), from the first time every
// pod has a reading: a peak that fell is still held, a rise over half the
// trend's window is extrapolated, and a reading before the pool is whole
// (another pod not yet read) is no answer.
func TestExplainAheadReplaysAnswers(t *testing.T) {
	dir := t.TempDir()
	cfg := writePolicies(t, dir, `- name: held
  kind: mean
  terms: [{kind: queueDepth, setPoint: 1}]
  peak: {window: 10m, headroom: 0}
- name: rising
  kind: mean
  terms: [{kind: queueDepth, setPoint: 1}]
  trend: {window: 1m, lookahead: 1m}
`)
	pod := func(name string, lines ...string) string {
		var files []string
		for i, l := range lines {
			f := filepath.Join(dir, fmt.Sprintf("%s%d.prom", name, i))
			if err := os.WriteFile(f, []byte(l+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		return strings.Join(files, ",")
	}
	queues := func(name string, qs ...int) string {
		var lines []string
		for _, q := range qs {
			lines = append(lines, fmt.Sprintf("vllm:num_requests_waiting %d", q))
		}
		return pod(name, lines...)
	}
	at := func(q, sec int) string {
		return fmt.Sprintf("vllm:num_requests_waiting %d %d", q, explainEpoch.Add(time.Duration(sec)*time.Second).UnixMilli())
	}
	for _, c := range []struct {
		name    string
		args    []string
		served  float64
		answers int
		span    string
		unfit   bool
	}{
		// The queue fell from 5 to 1: the held peak is the first answer's 5
		// (one answer would hold 1).
		{"a peak that fell", []string{"--policy=held", "--interval=10s", queues("fell", 5, 1)}, 5, 2, "10s", false},
		// 1 to 7 over 60 s: slope 0.1/s × 60 s ahead = 6 above the newest 7;
		// the answer at 0 s, a whole window before the newest, is forgotten.
		{"a rise over the window", []string{"--policy=rising", "--interval=10s", queues("rise", 1, 2, 3, 4, 5, 6, 7)}, 13, 6, "50s", false},
		// The same rise 1 s apart spans 6 s, under half the 1 m window.
		{"a rise too short to fit", []string{"--policy=rising", "--interval=1s", queues("short", 1, 2, 3, 4, 5, 6, 7)}, 7, 7, "6s", true},
		// Pod a alone at 0 s (9 waiting) is no answer: b's first reading is at
		// 10 s, so the pool's answers are at 10 s and 20 s: 2 replicas each.
		{"the pool is whole from its last pod's first reading", []string{"--policy=held", pod("a", at(9, 0), at(1, 10), at(1, 20)), pod("b", at(1, 10), at(1, 20))}, 2, 2, "10s", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var ex Explanation
			if err := json.Unmarshal(runExplain(t, append([]string{"--config=" + cfg}, c.args...)...), &ex); err != nil {
				t.Fatal(err)
			}
			a := ex.Pool.Ahead
			if a == nil || math.Abs(a.Served-c.served) > 1e-9 || ex.Pool.Answers != c.answers || ex.Pool.AnswersSpan != c.span || (ex.Pool.TrendUnfit != "") != c.unfit {
				t.Errorf("pool = %+v, ahead %+v; want %g served over %d answers in %s, trend unfit %v", ex.Pool, a, c.served, c.answers, c.span, c.unfit)
			}
		})
	}
}

// A saved Prometheus answer of pods scraped at staggered offsets is replayed
// once per round of scrapes (answers at least half the scrape interval apart),
// not once per pod's reading: 100 pods of 30 readings make 30 answers.
func TestExplainPrometheusReplaysRounds(t *testing.T) {
	dir := t.TempDir()
	cfg := writePolicies(t, dir, "- name: held\n  kind: mean\n  terms: [{kind: queueDepth, setPoint: 1}]\n  peak: {window: 10m, headroom: 0}\n")
	var series []string
	for p := range 100 {
		var values []string
		for k := range 30 {
			// Pod p is scraped p ms into each 2 s round; its queue is 5 in
			// round 10, else 1.
			q := 1
			if k == 10 {
				q = 5
			}
			values = append(values, fmt.Sprintf(`[%d.%03d,"%d"]`, 1767225600+2*k, p, q))
		}
		series = append(series, fmt.Sprintf(`{"metric":{"__name__":"vllm:num_requests_waiting","namespace":"llm","pod":"pod-%d"},"values":[%s]}`, p, strings.Join(values, ",")))
	}
	answer := filepath.Join(dir, "answer.json")
	if err := os.WriteFile(answer, []byte(`{"status":"success","data":{"resultType":"matrix","result":[`+strings.Join(series, ",")+`]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	scoring := NewScoringOptions()
	scoring.ConfigFile = cfg
	prom := NewPrometheusOptions()
	prom.ScrapeInterval = 2 * time.Second
	ex, err := ExplainPrometheus([]string{answer}, scoring, prom, ExplainOptions{Policy: "held"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The answers are at 0.099 s (every pod read once), then at each round's
	// first reading (2 s, 4 s, … 56 s) and at the newest (58.099 s): the
	// answer at 22 s sees pod-0's round 11 (1) and the others' round 10 (5),
	// 496 replicas, the peak held since.
	if a := ex.Pool.Ahead; ex.Pool.Answers != 30 || ex.Pool.AnswersSpan != "58s" || a == nil || a.Peak == nil || *a.Peak != 496 || a.Demand != 100 {
		t.Errorf("pool: %d answers over %s, ahead %+v; want 30 over 58s, a held peak of 496 over a demand of 100", ex.Pool.Answers, ex.Pool.AnswersSpan, a)
	}
}

// Explain's replay edge cases, each with its own policy: the answers are one
// per distinct reading time (50 pods read at one instant, at --interval=1ns
// under a 500 ns peak window, were 50 answers, each evaluating every pod);
// pool.trendUnfit judges the samples the trend holds, not the answers of the
// policy's whole memory (a peak's 10 m beside a 1 m trend) nor before its
// thinning (answers 0.5 s apart under a 64 s trend count as one); a demand
// too large to remember is said so in the table, which claimed a held peak.
func TestExplainReplayEdges(t *testing.T) {
	dir := t.TempDir()
	cfg := writePolicies(t, dir, `- {name: tiny, kind: demand, terms: [{kind: queueDepth, setPoint: 1}], peak: {window: 500ns, headroom: 0}}
- {name: both, kind: demand, terms: [{kind: queueDepth, setPoint: 1}], peak: {window: 10m, headroom: 0}, trend: {window: 1m, lookahead: 1m}}
- {name: t64, kind: demand, terms: [{kind: queueDepth, setPoint: 1}], trend: {window: 64s, lookahead: 1m}}
- {name: big, kind: demand, terms: [{kind: queueDepth, setPoint: 0.001}], peak: {window: 10m, headroom: 0.2}, trend: {window: 1m, lookahead: 1m}}
`)
	file := func(name, body string) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(body+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	one := file("one.prom", "vllm:num_requests_waiting 1")
	t.Run("one answer per reading time", func(t *testing.T) {
		pods := make([]string, 50)
		for i := range pods {
			pods[i] = one
		}
		var ex Explanation
		if err := json.Unmarshal(runExplain(t, append([]string{"--config=" + cfg, "--policy=tiny", "--interval=1ns"}, pods...)...), &ex); err != nil {
			t.Fatal(err)
		}
		if ex.Pool.Answers != 1 {
			t.Errorf("50 pods read at one instant: %d answers, want 1", ex.Pool.Answers)
		}
	})
	t.Run("the trend's own window", func(t *testing.T) {
		var files []string
		for i, q := range []int{1, 2, 5, 9} {
			files = append(files, file(fmt.Sprintf("q%d.prom", i), fmt.Sprintf("vllm:num_requests_waiting %d", q)))
		}
		var ex Explanation
		if err := json.Unmarshal(runExplain(t, "--config="+cfg, "--policy=both", "--interval=1m", strings.Join(files, ",")), &ex); err != nil {
			t.Fatal(err)
		}
		if ex.Pool.Answers != 4 || !strings.Contains(ex.Pool.TrendUnfit, "it holds 1 spanning 0s") {
			t.Errorf("4 answers a minute apart under a 1 m trend: %d answers, trendUnfit %q; want 4 and the trend's 1 sample named (the one a minute before is out of its window)", ex.Pool.Answers, ex.Pool.TrendUnfit)
		}
	})
	t.Run("after thinning", func(t *testing.T) {
		ms := explainEpoch.UnixMilli()
		files := []string{
			file("t0.prom", fmt.Sprintf("vllm:num_requests_waiting 1 %d", ms)),
			file("t1.prom", fmt.Sprintf("vllm:num_requests_waiting 2 %d", ms+500)),
			file("t2.prom", fmt.Sprintf("vllm:num_requests_waiting 10 %d", ms+32000)),
		}
		var ex Explanation
		if err := json.Unmarshal(runExplain(t, "--config="+cfg, "--policy=t64", "--interval=1s", strings.Join(files, ",")), &ex); err != nil {
			t.Fatal(err)
		}
		if a := ex.Pool.Ahead; a == nil || a.Trend == nil || *a.Trend != 10 || !strings.Contains(ex.Pool.TrendUnfit, "it holds 2 spanning 32s") {
			t.Errorf("answers at 0, 0.5 s and 32 s under a 64 s trend: ahead %+v, trendUnfit %q; want the trend 10 and its 2 samples named", a, ex.Pool.TrendUnfit)
		}
	})
	t.Run("a demand too large to remember", func(t *testing.T) {
		f := file("big.prom", "vllm:num_requests_waiting 10000000")
		var ex Explanation
		if err := json.Unmarshal(runExplain(t, "--config="+cfg, "--policy=big", f), &ex); err != nil {
			t.Fatal(err)
		}
		if a := ex.Pool.Ahead; a == nil || a.Peak != nil || a.Trend != nil || !a.Unremembered || ex.Pool.TrendUnfit != "" {
			t.Fatalf("ahead %+v, trendUnfit %q: want a demand of 1e10 unremembered, with no peak, trend or trendUnfit", a, ex.Pool.TrendUnfit)
		}
		table := string(runExplain(t, "--config="+cfg, "--policy=big", "-o", "table", f))
		if strings.Contains(table, "held peak") || !strings.Contains(table, "pool big: a demand above 2147483647 replicas is more than an HPA takes: served once, neither held nor fitted") {
			t.Errorf("table:\n%s", table)
		}
	})
}

// However short --prometheus-scrape-interval, a saved answer of many
// readings replays at most maxExplainAnswers answers over the policy's memory:
// of 3,000 readings 100 ms apart the decoder keeps the newest 1,024
// (pkg/prometheus's maxPointsPerSeries), 102.3 s, and the answers are at
// least 10m/1024 = 586 ms apart: one per 600 ms, 171 (1,024 without the bound).
func TestExplainReplayBounded(t *testing.T) {
	dir := t.TempDir()
	cfg := writePolicies(t, dir, "- name: held\n  kind: mean\n  terms: [{kind: queueDepth, setPoint: 1}]\n  peak: {window: 10m, headroom: 0}\n")
	values := make([]string, 3000)
	for k := range values {
		values[k] = fmt.Sprintf(`[%d.%d,"1"]`, 1767225600+k/10, k%10)
	}
	answer := filepath.Join(dir, "answer.json")
	if err := os.WriteFile(answer, []byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"vllm:num_requests_waiting","namespace":"llm","pod":"p"},"values":[`+strings.Join(values, ",")+`]}]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	scoring := NewScoringOptions()
	scoring.ConfigFile = cfg
	prom := NewPrometheusOptions()
	prom.ScrapeInterval = time.Nanosecond
	ex, err := ExplainPrometheus([]string{answer}, scoring, prom, ExplainOptions{Policy: "held"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Pool.Answers != 171 || ex.Pool.AnswersSpan != "1m42.3s" {
		t.Errorf("%d answers over %s; want 171 over 1m42.3s (one per 600 ms, the first reading after 586 ms)", ex.Pool.Answers, ex.Pool.AnswersSpan)
	}
}

// Issue 20: explain says what became of duplicate series (the duplicate
// rule, signals.DuplicateOutcome): disagreeing ones counted beside the
// warning that names them.
func TestExplainDuplicates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dup.prom")
	body := "vllm:num_requests_waiting{engine=\"0\"} 2\nvllm:num_requests_waiting{engine=\"0\"} 200\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.1\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	ex, err := Explain([]string{path}, NewScoringOptions(), ExplainOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := ex.Pods[0]
	if p.Duplicates["disagree"] != 1 || !strings.Contains(strings.Join(p.Warnings, "\n"), "disagree; using their maximum 200") {
		t.Errorf("duplicates %v, warnings %q: want one disagreement counted and named", p.Duplicates, p.Warnings)
	}
	out, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"duplicates":{"disagree":1}`) {
		t.Errorf("explain's JSON lacks the duplicates: %s", out)
	}
}

// TestExplainScrapesInTimeOrder: a pod's scrapes in time order are read, and
// two with the same sample time are the server's re-scrape of an engine that
// has not updated (the second replaces the first), not an error.
func TestExplainScrapesInTimeOrder(t *testing.T) {
	for _, pod := range []string{"testdata/timestamped-0s.prom,testdata/timestamped-10s.prom", "testdata/timestamped-0s.prom,testdata/timestamped-0s.prom"} {
		ex, err := Explain([]string{pod}, NewScoringOptions(), ExplainOptions{}, nil)
		if err != nil || len(ex.Pods) != 1 || ex.Pods[0].Scrapes != 2 {
			t.Errorf("explain %s = %+v, %v; want one pod of 2 scrapes", pod, ex.Pods, err)
		}
	}
}

// explain's own flags are checked like the server's, every bad one at once: a
// negative --starting, and an --interval whose 3 × (the maximum sample age)
// once overflowed into a negative age that made every pod stale.
func TestExplainFlagsValidated(t *testing.T) {
	_, _, err := runRoot("explain", "--starting=-3", "--interval=1000000h", "-o", "yaml", "testdata/sleeping.prom")
	for _, want := range []string{"--starting=-3: must be in [0, 2147483647]", "--interval=1000000h0m0s: must be > 0 and at most 1h0m0s", `-o="yaml": must be json or table`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to say %q", err, want)
		}
	}
	if _, _, err := runRoot("explain", "--starting=2", "--interval=1h", "testdata/sleeping.prom"); err != nil {
		t.Errorf("--starting=2 --interval=1h: %v", err)
	}
}

// writePolicies writes a policy configuration file of the given policies (a
// YAML list, the lines after "policies:") into dir and returns its path.
func writePolicies(t *testing.T, dir, policies string) string {
	t.Helper()
	cfg := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(cfg, []byte("apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies:\n"+policies), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}
