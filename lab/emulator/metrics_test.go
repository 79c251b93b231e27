package emulator

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// scrapeSim runs a loaded simulation of engines engines and returns the body of
// /metrics as a scrape gets it (text format 0.0.4), plus the engines' snapshots
// at scrape time.
func scrapeSim(t *testing.T, dialect MetricNames, engines int, maxModelLen int) ([]byte, []Snapshot) {
	t.Helper()
	cfg := shortConfig()
	cfg.MaxModelLen = maxModelLen
	sims := make([]*Simulator, engines)
	var m *Metrics
	for i := range sims {
		sim, err := NewSimulator(cfg, t0, func(r *StepResult) { m.Observe(i, r) })
		if err != nil {
			t.Fatal(err)
		}
		sims[i] = sim
	}
	m, err := NewMetrics(MetricsOptions{ModelName: "Qwen/Qwen3-4B-Instruct-2507-FP8", Names: dialect, Engines: engines,
		MaxModelLen: maxModelLen, CreatedAt: t0, BlockSize: cfg.BlockSize, NumGPUBlocks: cfg.NumBlocks}, func(i int) Snapshot { return sims[i].Engine().Snapshot() })
	if err != nil {
		t.Fatal(err)
	}
	// Enough load to fill every histogram and leave a queue: short requests past
	// saturation plus a few long ones that stop early.
	for i, sim := range sims {
		arr := poisson(150, 20*time.Second, 200, 100, uint64(10+i))
		for j := range arr[:50] {
			arr[j].Request.PromptTokens, arr[j].Request.MaxTokens, arr[j].Request.StopAfter = 3000, 1000, 20
		}
		sim.Schedule(arr...)
		sim.RunUntil(t0.Add(20 * time.Second))
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v\n%s", resp.StatusCode, err, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type = %q, want text format 0.0.4", ct)
	}
	snaps := make([]Snapshot, engines)
	for i, sim := range sims {
		snaps[i] = sim.Engine().Snapshot()
	}
	return body, snaps
}

func parseExposition(t *testing.T, body []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	// Real dumps may lack the final newline.
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(append(bytes.TrimRight(body, "\n"), '\n')))
	if err != nil {
		t.Fatalf("parsing exposition: %v", err)
	}
	return mfs
}

func parseFile(t *testing.T, path string) map[string]*dto.MetricFamily {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseExposition(t, b)
}

// familyShape is what the golden test compares: type, HELP, the label names of
// every series (le excluded) and the bucket bounds.
type familyShape struct {
	Type    string
	Help    string
	Labels  []string
	Buckets []float64
}

func shapeOf(mf *dto.MetricFamily) familyShape {
	s := familyShape{Type: mf.GetType().String(), Help: mf.GetHelp()}
	names := map[string]bool{}
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			names[l.GetName()] = true
		}
		if h := m.GetHistogram(); h != nil && s.Buckets == nil {
			for _, b := range h.GetBucket() {
				s.Buckets = append(s.Buckets, b.GetUpperBound())
			}
		}
	}
	for n := range names {
		s.Labels = append(s.Labels, n)
	}
	sort.Strings(s.Labels)
	return s
}

// notInV010Dump are families vLLM added after the 0.10 dump, each with the
// family of that dump it must look like (the ITL histogram replaced
// time_per_output_token_seconds and has its buckets; vllm/v1/metrics/loggers.py).
var notInV010Dump = map[string]string{
	"vllm:inter_token_latency_seconds":         "vllm:time_per_output_token_seconds",
	"vllm:inter_token_latency_seconds_created": "vllm:time_per_output_token_seconds_created",
}

func TestMetricsGoldenAgainstRealVLLMV1Dump(t *testing.T) {
	real := parseFile(t, "../../testdata/samples/vllm_v1-0.10-nvcr25.09_single-engine.prom")
	for _, dialect := range []MetricNames{NamesV1, NamesV1RenameWindow} {
		t.Run(string(dialect), func(t *testing.T) {
			// The dump's token histograms stop at 5000: its max_model_len is in
			// [5000, 10000); 8192 gives the same build_1_2_5_buckets.
			body, _ := scrapeSim(t, dialect, 1, 8192)
			got := parseExposition(t, body)
			for name, mf := range got {
				ref, help := name, ""
				if alias, ok := notInV010Dump[name]; ok {
					ref = alias
					help = "Histogram of inter-token latency in seconds."
				}
				want, ok := real[ref]
				if !ok {
					t.Errorf("family %s is not in the real dump", name)
					continue
				}
				ws, gs := shapeOf(want), shapeOf(mf)
				if help != "" {
					ws.Help = help
				}
				if diff := cmp.Diff(ws, gs); diff != "" {
					t.Errorf("family %s differs from the real dump (-want +got):\n%s", name, diff)
				}
			}
			// The families the adapter and the issue need must be there.
			for _, name := range []string{
				"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
				"vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
				"vllm:request_success_total", "vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
				"vllm:inter_token_latency_seconds", "vllm:request_queue_time_seconds", "vllm:num_preemptions_created",
				"vllm:cache_config_info",
			} {
				if _, ok := got[name]; !ok {
					t.Errorf("family %s missing", name)
				}
			}
			_, gpu := got["vllm:gpu_cache_usage_perc"]
			_, tpot := got["vllm:time_per_output_token_seconds"]
			if want := dialect == NamesV1RenameWindow; gpu != want || tpot != want {
				t.Errorf("deprecated names served: gpu_cache_usage_perc %v, time_per_output_token_seconds %v; want %v", gpu, tpot, want)
			}
			// finished_reason values as in the dump.
			var reasons []string
			for _, m := range got["vllm:request_success_total"].GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "finished_reason" {
						reasons = append(reasons, l.GetValue())
					}
				}
			}
			slices.Sort(reasons)
			if diff := cmp.Diff([]string{"abort", "length", "stop"}, reasons); diff != "" {
				t.Errorf("finished_reason values (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMetricsGoldenAgainstRealVLLMV0Dump(t *testing.T) {
	real := parseFile(t, "../../testdata/samples/vllm_v0-0.6-qwenvl-issue55_excerpt.prom")
	body, _ := scrapeSim(t, NamesV0, 1, 8192)
	got := parseExposition(t, body)
	compared := 0
	for name, mf := range got {
		if strings.HasSuffix(name, "_created") {
			t.Errorf("V0 serves %s; V0 disabled _created series", name)
		}
		want, ok := real[name]
		if !ok {
			continue // the V0 excerpt is partial
		}
		compared++
		if diff := cmp.Diff(shapeOf(want), shapeOf(mf)); diff != "" {
			t.Errorf("family %s differs from the real V0 dump (-want +got):\n%s", name, diff)
		}
	}
	if compared < 5 {
		t.Errorf("compared %d families with the V0 excerpt, want its 4 scheduler gauges and vllm:cache_config_info", compared)
	}
	if _, ok := got["vllm:cache_config_info"]; !ok {
		t.Error("V0 does not serve vllm:cache_config_info")
	}
	if _, ok := got["vllm:kv_cache_usage_perc"]; ok {
		t.Error("V0 serves vllm:kv_cache_usage_perc")
	}
}

func TestMetricsDataParallelEngines(t *testing.T) {
	body, snaps := scrapeSim(t, NamesV1, 3, 8192)
	got := parseExposition(t, body)
	for _, name := range []string{"vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds"} {
		var engines []string
		for _, m := range got[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "engine" {
					engines = append(engines, l.GetValue())
				}
			}
		}
		slices.Sort(engines)
		if diff := cmp.Diff([]string{"0", "1", "2"}, engines); diff != "" {
			t.Errorf("%s engine labels (-want +got):\n%s", name, diff)
		}
	}
	for _, m := range got["vllm:num_requests_waiting"].GetMetric() {
		i := int(m.GetLabel()[0].GetValue()[0] - '0')
		if v := m.GetGauge().GetValue(); v != float64(snaps[i].Waiting) {
			t.Errorf("engine %d waiting = %v, want %d", i, v, snaps[i].Waiting)
		}
	}
}

func TestNewMetricsRejects(t *testing.T) {
	snap := func(int) Snapshot { return Snapshot{} }
	tests := []struct {
		name string
		opts MetricsOptions
	}{
		{"unknown dialect", MetricsOptions{Names: "v2", MaxModelLen: 10}},
		{"v0 with two engines", MetricsOptions{Names: NamesV0, Engines: 2, MaxModelLen: 10}},
		{"negative engines", MetricsOptions{Engines: -1, MaxModelLen: 10}},
		{"no max model len", MetricsOptions{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewMetrics(tt.opts, snap); err == nil {
				t.Error("NewMetrics() = nil error")
			}
		})
	}
}

func TestBuild125Buckets(t *testing.T) {
	if diff := cmp.Diff([]float64{1, 2, 5, 10, 20, 50, 100}, build125Buckets(100)); diff != "" {
		t.Error(diff)
	}
}

// TestSignalsReadsEmulatorLikeVLLM feeds the emulator's /metrics to the adapter's
// own parser, pkg/signals, which must recognise vLLM V1 and read the model's state.
func TestSignalsReadsEmulatorLikeVLLM(t *testing.T) {
	tests := []struct {
		dialect     MetricNames
		engines     int
		wantDialect string
		wantKVName  string
	}{
		{NamesV1, 1, "vllm-v1", "vllm:kv_cache_usage_perc"},
		{NamesV1, 2, "vllm-v1", "vllm:kv_cache_usage_perc"},
		{NamesV1RenameWindow, 1, "vllm-v1", "vllm:kv_cache_usage_perc"},
		{NamesV0, 1, "vllm-v0", "vllm:gpu_cache_usage_perc"},
	}
	for _, tt := range tests {
		t.Run(string(tt.dialect)+"/"+string(rune('0'+tt.engines)), func(t *testing.T) {
			body, snaps := scrapeSim(t, tt.dialect, tt.engines, 8192)
			r, err := signals.NewExtractor().Extract(body)
			if err != nil {
				t.Fatal(err)
			}
			if r.Dialect != tt.wantDialect {
				t.Errorf("Dialect = %q, want %q", r.Dialect, tt.wantDialect)
			}
			var waiting, running, kv, preempt float64
			for _, s := range snaps {
				waiting += float64(s.Waiting)
				running += float64(s.Running)
				kv += s.KVCacheUsage / float64(len(snaps))
				preempt += float64(s.Preemptions)
			}
			if waiting == 0 || running == 0 {
				t.Fatalf("the load left no queue: %+v", snaps)
			}
			check := func(name string, got *float64, want float64) {
				t.Helper()
				if got == nil {
					t.Errorf("%s = nil, want %v", name, want)
				} else if d := *got - want; d > 1e-9 || d < -1e-9 {
					t.Errorf("%s = %v, want %v", name, *got, want)
				}
			}
			check("QueueDepth", r.Ptr(signals.QueueDepth), waiting)
			check("Running", r.Ptr(signals.Running), running)
			check("KVCacheUsage", r.Ptr(signals.KVCacheUsage), kv)
			check("Preemptions", r.Ptr(signals.Preemptions), preempt)
			if got := r.Sources["kvCacheUsage"]; got != tt.wantKVName {
				t.Errorf("KV source = %q, want %q", got, tt.wantKVName)
			}
			if len(r.Engines) != tt.engines {
				t.Errorf("%d engines read, want %d", len(r.Engines), tt.engines)
			}
		})
	}
}
