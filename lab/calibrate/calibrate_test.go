package calibrate

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
	"github.com/saturation-adapter/saturation-adapter/lab/simulate"
	"github.com/saturation-adapter/saturation-adapter/lab/trace"
)

func ptr(v float64) *float64 { return &v }

func sec(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

func TestParseCacheConfig(t *testing.T) {
	tests := []struct {
		file string
		want cacheConfig
		ok   bool
	}{
		{"llm-d-inference-sim_v0.10.2_load.prom", cacheConfig{blockSize: 16, numGPUBlocks: 64}, true},
		{"vllm_v1-0.10-nvcr25.09_single-engine.prom", cacheConfig{blockSize: 16, numGPUBlocks: 850}, true},
		{"vllm_v0-0.6-qwenvl-issue55_excerpt.prom", cacheConfig{blockSize: 16, numGPUBlocks: 2048}, true},
		{"sglang_v0.4-docs.prom", cacheConfig{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			body, err := os.ReadFile("../../testdata/samples/" + tt.file)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := parseCacheConfig(body)
			if got != tt.want || ok != tt.ok {
				t.Errorf("parseCacheConfig = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
	if _, ok := parseCacheConfig([]byte("vllm:cache_config_info{block_size=\"x\",num_gpu_blocks=\"9\"} 1\n")); ok {
		t.Error("a non-integer block_size was accepted")
	}
}

// TestPromptText: the prompt is as many tokens as asked by the emulator's
// estimate (ceil(characters / 4)), and its prefix is unique per request.
func TestPromptText(t *testing.T) {
	for _, n := range []int{1, 2, 3, 200, 1000} {
		p := promptText(n, 42)
		if got := (len(p) + 3) / 4; got != n {
			t.Errorf("promptText(%d) is %d tokens at 4 characters each: %q", n, got, p[:min(len(p), 20)])
		}
	}
	if promptText(10, 1)[:8] == promptText(10, 2)[:8] {
		t.Error("two requests share their first block")
	}
}

func TestNearestRankAndInterpolate(t *testing.T) {
	vs := []float64{0.1, 0.2, 0.3, 0.4, math.Inf(1)}
	if got := nearestRank(vs, 0.5); got == nil || *got != 0.3 {
		t.Errorf("p50 = %v, want 0.3", got)
	}
	if got := nearestRank(vs, 0.8); got == nil || *got != 0.4 {
		t.Errorf("p80 = %v, want 0.4 (rank 4 of 5)", got)
	}
	if got := nearestRank(vs, 0.95); got != nil {
		t.Errorf("p95 = %v, want nil: it falls on the request without a first token", *got)
	}
	pts := [][2]float64{{0, 0}, {2, 0.2}, {4, 0.6}}
	for _, c := range []struct{ x, want float64 }{{-1, 0}, {1, 0.1}, {3, 0.4}, {5, 0.6}} {
		if got := interpolate(pts, c.x); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("interpolate(%g) = %g, want %g", c.x, got, c.want)
		}
	}
	if a, b := lineFit([][2]float64{{1, 3}, {2, 5}, {3, 7}}); math.Abs(a-1) > 1e-12 || math.Abs(b-2) > 1e-12 {
		t.Errorf("lineFit = %g + %g x, want 1 + 2 x", a, b)
	}
	if a, b := lineFit([][2]float64{{2, 3}, {2, 5}}); a != 4 || b != 0 {
		t.Errorf("lineFit of one x = %g + %g x, want the mean 4 and slope 0", a, b)
	}
}

// TestJudgeStep checks the verdict rules on a 10 s step at 1 request/s.
func TestJudgeStep(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TTFTSLO = time.Second
	w := window{start: sec(10), end: sec(20), rate: 1}
	reqs := func(ttft float64) []record {
		var out []record
		for i := range 10 {
			s := sec(10 + float64(i))
			out = append(out, record{step: 0, sent: s, first: s + sec(ttft), last: s + sec(ttft+1.9), done: s + sec(ttft+1.9), prompt: 100, tokens: 20})
		}
		return out
	}
	queue := func(first, second float64) []sample {
		var out []sample
		for i := range 20 {
			v := first
			if i >= 10 {
				v = second
			}
			out = append(out, sample{at: sec(10 + float64(i)/2), queue: ptr(v), running: ptr(3), kv: ptr(0.25)})
		}
		return out
	}
	t.Run("pass", func(t *testing.T) {
		st := judgeStep(cfg, w, 0, reqs(0.2), queue(0, 1))
		if !st.Pass || st.Sent != 10 || *st.TTFTQuantileSeconds != 0.2 || st.QueueDepth.Mean != 1 || st.Readings != 20 {
			t.Errorf("step %+v, want a pass: 10 sent, TTFT p95 0.2 s, queue 1 (at the limit)", st)
		}
		// 100 ms between the tokens of every request.
		if st.InterTokenLatencySeconds == nil || math.Abs(*st.InterTokenLatencySeconds-0.1) > 1e-9 {
			t.Errorf("ITL = %v, want 0.1 s", st.InterTokenLatencySeconds)
		}
		// Requests sent at 10..19 s finish 2.1 s later: 8 of them within the step.
		if st.ThroughputRequestsPerSecond != 0.8 || st.PrefillTokensPerSecond != 100 {
			t.Errorf("throughput %g/s, prefill %g tokens/s; want 0.8 and 100", st.ThroughputRequestsPerSecond, st.PrefillTokensPerSecond)
		}
	})
	t.Run("the second half's queue counts", func(t *testing.T) {
		st := judgeStep(cfg, w, 0, reqs(0.2), queue(0, 2))
		if st.Pass || !cmp.Equal(st.Reasons, []string{"queue 2 > 1"}) || st.QueueDepth.Max != 2 {
			t.Errorf("step %+v, want a queue failure", st)
		}
		if st := judgeStep(cfg, w, 0, reqs(0.2), queue(5, 0)); !st.Pass {
			t.Errorf("a queue left from the previous step and drained in the first half failed the step: %v", st.Reasons)
		}
	})
	t.Run("TTFT", func(t *testing.T) {
		st := judgeStep(cfg, w, 0, reqs(1.5), queue(0, 0))
		if st.Pass || len(st.Reasons) != 1 || !strings.Contains(st.Reasons[0], "TTFT p95 1.5s > SLO 1s") {
			t.Errorf("reasons %q, want the TTFT failure", st.Reasons)
		}
	})
	t.Run("errors and requests without a token", func(t *testing.T) {
		rs := reqs(0.2)
		rs[3].err = errNoToken
		rs[3].first = -1
		st := judgeStep(cfg, w, 0, rs, queue(0, 0))
		if st.Pass || st.Errors != 1 || st.TTFTQuantileSeconds != nil || len(st.Reasons) != 2 {
			t.Errorf("step %+v, want a failure for the error and a TTFT p95 of never", st)
		}
	})
	t.Run("no reading", func(t *testing.T) {
		st := judgeStep(cfg, w, 0, reqs(0.2), nil)
		if st.Pass || st.QueueDepth != nil || !cmp.Equal(st.Reasons, []string{"no queue depth read in the step's second half"}) {
			t.Errorf("step %+v, want a failure: nothing to judge the queue by", st)
		}
	})
}

func TestSaturationIndex(t *testing.T) {
	p, f, cut := StepReport{Pass: true}, StepReport{}, StepReport{Pass: true, Truncated: true}
	tests := []struct {
		steps   []StepReport
		want    int
		reached bool
	}{
		{[]StepReport{p, p, f, f}, 1, true},
		{[]StepReport{p, p, p}, 2, false},
		{[]StepReport{f, p}, -1, true},
		{[]StepReport{p, f, p, f}, 0, true},
		{[]StepReport{p, cut}, 0, false},
		{nil, -1, false},
	}
	for i, tt := range tests {
		if got, reached := saturationIndex(tt.steps); got != tt.want || reached != tt.reached {
			t.Errorf("case %d: saturationIndex = %d, %v; want %d, %v", i, got, reached, tt.want, tt.reached)
		}
	}
}

// testEngine is the engine of the simulated calibration: capacity 6.25
// requests/s for 200 + 20 tokens (see capacity in cmd/adapter/app's test).
func testEngine() emulator.Config {
	c := emulator.DefaultConfig()
	c.MaxNumSeqs, c.NumBlocks, c.MaxModelLen = 8, 2000, 4096
	c.StepTime = emulator.StepTimeModel{Base: 20 * time.Millisecond, PerSeq: 5 * time.Millisecond, PerPrefillToken: 50 * time.Microsecond}
	return c
}

// probeGap is the time between two groups of the simulated context probe:
// more than a group takes on the test engines (at most 16 s).
const probeGap = 30 * time.Second

// simulatedRun builds what a calibration of engine would record, on the
// emulator's simulator in virtual time: warm-up requests 2 s apart (each alone),
// then the steps' evenly spaced requests, and a reading every 250 ms (at a phase
// of 0.1 s against the arrivals).
func simulatedRun(t *testing.T, cfg Config, engine emulator.Config) (*runner, []window, time.Duration) {
	t.Helper()
	return replayedRun(t, cfg, engine, 2*time.Second, time.Minute, func() Shape { return cfg.Shapes[0] })
}

// replayedRun builds what a calibration of engine would record with request
// sizes from draw, on the emulator's simulator in virtual time: warm-up
// requests warmupGap apart, the context probe's groups (cfg.ContextProbe
// requests sent at once, a group every probeGap), then the steps' evenly spaced requests, a reading
// every MetricsInterval (at a phase of 0.1 s against the arrivals), and drain
// after the last step for the requests to end. It returns the runner holding
// the records and readings, the steps' windows and the end of the warm-up.
func replayedRun(t *testing.T, cfg Config, engine emulator.Config, warmupGap, drain time.Duration, draw func() Shape) (*runner, []window, time.Duration) {
	t.Helper()
	var reqs []record
	at := time.Duration(0)
	for range cfg.Warmup {
		s := draw()
		reqs = append(reqs, record{step: -1, sent: at, shape: s, prompt: s.PromptTokens, tokens: s.OutputTokens})
		at += warmupGap
	}
	// The engine publishes its cache size, as vLLM does (vllm:cache_config_info).
	cache := &cacheConfig{blockSize: engine.BlockSize, numGPUBlocks: engine.NumBlocks}
	if short, long, ok, _ := probePrompts(cfg.ContextProbe, engine.MaxModelLen, cache); cfg.ContextProbe > 0 && ok {
		for round := range ProbeRounds {
			for _, p := range []int{short, long} {
				for range cfg.ContextProbe {
					reqs = append(reqs, record{step: stepProbe, round: round, sent: at, shape: Shape{PromptTokens: p, OutputTokens: probeOutput}, prompt: p, tokens: probeOutput})
				}
				at += probeGap
			}
		}
	}
	warmupEnd := at
	var windows []window
	for i, rate := range cfg.Rates {
		w := window{start: at, end: at + cfg.StepDuration, rate: rate}
		for a := time.Duration(0); a < cfg.StepDuration; a += time.Duration(float64(time.Second) / rate) {
			s := draw()
			reqs = append(reqs, record{step: i, sent: w.start + a, shape: s, prompt: s.PromptTokens, tokens: s.OutputTokens})
		}
		windows = append(windows, w)
		at = w.end
	}
	var times []time.Duration
	for s := 100 * time.Millisecond; s < at; s += cfg.MetricsInterval {
		times = append(times, s)
	}
	recs, samples, err := replay(engine, reqs, times, at+drain)
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{cfg: cfg, model: "m", maxModelLen: engine.MaxModelLen, samples: samples}
	for i := range recs {
		r.records = append(r.records, &recs[i])
	}
	return r, windows, warmupEnd
}

// TestAnalyseSimulatedEngine runs the analysis on a calibration of a known
// engine in virtual time: the fit recovers the step-time model, the batch limit
// and the maxModelLen, the saturation point is the last rate below the
// capacity of 6.25 requests/s, and the set points follow their definitions.
func TestAnalyseSimulatedEngine(t *testing.T) {
	cfg := DefaultConfig()
	cfg.URL, cfg.Warmup, cfg.StepDuration, cfg.MetricsInterval, cfg.TTFTSLO = "http://127.0.0.1:8000", 5, 10*time.Second, 250*time.Millisecond, time.Second
	cfg.Rates = []float64{4, 4.5, 5, 5.5, 6, 6.5, 7}
	cfg.Shapes = []Shape{{PromptTokens: 200, OutputTokens: 20}}
	engine := testEngine()
	r, windows, warmupEnd := simulatedRun(t, cfg, engine)
	rep := r.analyse(windows, warmupEnd)
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table.String())

	if rep.Saturation == nil || rep.Saturation.RateRequestsPerSecond != 6 || !rep.Saturation.Reached {
		t.Fatalf("saturation %+v, want 6 requests/s (the last step below 6.25), reached", rep.Saturation)
	}
	if c := rep.CapacityRequestsPerSecond; math.Abs(c-6.25)/6.25 > 0.05 {
		t.Errorf("measured capacity %g, want 6.25 within 5 %%", c)
	}
	p := rep.Profile
	near := func(name string, got, want time.Duration, tol float64) {
		t.Helper()
		if math.Abs(float64(got-want))/float64(want) > tol {
			t.Errorf("%s = %v, want %v within %.0f %%", name, got, want, 100*tol)
		}
	}
	// Alone on the engine: exact. Under load: the fit's averages (running over
	// time, latency over tokens) differ by a few percent.
	near("perPrefillToken", p.StepTime.PerPrefillToken.Duration, engine.StepTime.PerPrefillToken, 0.01)
	near("base", p.StepTime.Base.Duration, engine.StepTime.Base, 0.1)
	near("perSeq", p.StepTime.PerSeq.Duration, engine.StepTime.PerSeq, 0.1)
	if p.MaxNumSeqs != 8 || p.MaxModelLen != 4096 || rep.Fit.MaxNumSeqsFrom != "observed" || rep.Fit.KVCacheFrom != "estimated" {
		t.Errorf("profile %+v, fit %+v; want maxNumSeqs 8 observed, maxModelLen 4096, KV estimated", p, rep.Fit)
	}
	if math.Abs(float64(p.NumGPUBlocks-engine.NumBlocks))/float64(engine.NumBlocks) > 0.15 {
		t.Errorf("numGPUBlocks = %d, want %d within 15 %%", p.NumGPUBlocks, engine.NumBlocks)
	}
	if c := rep.ProfileCheck; c == nil || c.SaturationRateRequestsPerSecond == nil || *c.SaturationRateRequestsPerSecond != 6 {
		t.Errorf("profile check %+v, want the fitted profile to saturate at 6 requests/s too", c)
	}

	// Set points at 90 % of 6 requests/s = 5.4: KV interpolated between the 5
	// and 5.5 requests/s steps (0.8 of the way); the queue one above the
	// measured noise (its 95th percentile, rounded up), within the SLO bound.
	sp := rep.Recommended
	s5, s55 := rep.Steps[2], rep.Steps[3]
	wantKV := math.Round(1000*(s5.KVCacheUsage.Mean+(s55.KVCacheUsage.Mean-s5.KVCacheUsage.Mean)*0.8)) / 1000 // below 0.1: 3 decimals
	wantQ := math.Min(math.Max(1, math.Ceil(sp.QueueNoise)+1), math.Floor(sp.QueueSLOBound))
	if sp == nil || sp.TargetRateRequestsPerSecond != 5.4 || !sp.KVMeasured || math.Abs(sp.SetPoints.KVCacheUsage-wantKV) > 1e-9 ||
		sp.SetPoints.QueueDepth != wantQ || sp.QueueSLOBound <= 1 {
		t.Errorf("recommended %+v, want target 5.4, KV %g, queue %g", sp, wantKV, wantQ)
	}
	if want := "--queue-depth-set-point " + strconv.FormatFloat(wantQ, 'f', -1, 64) + " --kv-cache-usage-set-point " + strconv.FormatFloat(wantKV, 'f', -1, 64); sp.Flags != want {
		t.Errorf("flags %q, want %q", sp.Flags, want)
	}
}

// TestRunErrors: an endpoint that cannot be calibrated is an error naming why.
func TestRunErrors(t *testing.T) {
	metrics := "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
	tests := []struct {
		name    string
		model   string
		handler http.HandlerFunc
		want    string
	}{
		{"no model list", "", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, "finding the model to request"},
		{"metrics fail", "m", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "boom", http.StatusInternalServerError)
		}, "reading the engine's metrics: GET"},
		{"no engine metrics", "m", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte("# TYPE up gauge\nup 1\n"))
		}, "no LLM engine saturation metrics found"},
		{"completions refused", "m", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/metrics" {
				w.Write([]byte(metrics))
				return
			}
			http.Error(w, `{"message":"The model does not exist."}`, http.StatusNotFound)
		}, "warm-up request 1 of 2 failed: POST"},
		{"too long for the model", "", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"data":[{"id":"m","max_model_len":512}]}`))
		}, "longer than the model's max_model_len 512"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			cfg := DefaultConfig()
			cfg.URL, cfg.Model, cfg.Warmup, cfg.Rates = srv.URL, tt.model, 2, []float64{1}
			_, err := Run(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.URL = "localhost:8000"
	cfg.Rates = []float64{1, 0.01}
	cfg.StepDuration = time.Second
	cfg.Shapes = []Shape{{PromptTokens: 0, OutputTokens: 5}}
	cfg.MaxQueue = math.NaN()
	err := cfg.Validate()
	for _, want := range []string{`URL "localhost:8000": want an http or https URL`, "rates must increase: 0.01 follows 1",
		"step 2 sends no request: 0.01/s for 1s", "request shape 0 prompt + 5 output tokens", "max queue must be a finite number >= 0, got NaN",
		"metrics interval 1s gives fewer than 4 readings per 1s step"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want it to contain %q", err, want)
		}
	}
	// A --start-rate past the bound: one error, not one per step.
	cfg = DefaultConfig()
	cfg.URL = "http://127.0.0.1:8000"
	cfg.Rates, _ = StepRates(1e300, 1, 10)
	err = cfg.Validate()
	if err == nil || strings.Count(err.Error(), "rate 1e+300: want a number in (0, 1e+06]") != 1 || strings.Contains(err.Error(), "must increase") {
		t.Errorf("Validate of 10 rates of 1e300 = %v, want one error naming the bound", err)
	}
	// A NaN rate is one error: the next rate is not compared with it.
	cfg.Rates = []float64{5, math.NaN(), 3}
	if err := cfg.Validate(); err == nil || strings.Contains(err.Error(), "follows NaN") || !strings.Contains(err.Error(), "rate NaN") {
		t.Errorf("Validate of 5, NaN, 3 = %v, want the NaN named and nothing compared with it", err)
	}
	if _, err := StepRates(1, 1, 100_000_000); err == nil || !strings.Contains(err.Error(), "step count must be in [1, 1000]") {
		t.Errorf("StepRates of 10^8 steps = %v, want it refused before allocating", err)
	}
	if _, err := StepRates(1, 0, 3); err == nil {
		t.Error("StepRates accepted a step of 0")
	}
	if got, _ := StepRates(2, 0.5, 3); !cmp.Equal(got, []float64{2, 2.5, 3}) {
		t.Errorf("StepRates = %v, want [2 2.5 3]", got)
	}
}

func TestShapesFromTrace(t *testing.T) {
	tr, err := trace.Read(strings.NewReader("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.0,4000,200\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ShapesFromTrace(tr, 1024)
	if err != nil || !cmp.Equal(got, []Shape{{374, 44}}) {
		t.Errorf("ShapesFromTrace = %v, %v; want the row that fits in 1024 tokens", got, err)
	}
	if _, err := ShapesFromTrace(tr, 100); err == nil || !strings.Contains(err.Error(), "fits in 100 tokens") {
		t.Errorf("ShapesFromTrace with nothing fitting = %v, want an error", err)
	}
}

// TestRunFollowsNoRedirect: an endpoint that redirects does not move the load
// elsewhere; the redirect is the answer, and the run fails naming it.
func TestRunFollowsNoRedirect(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.URL, cfg.Model, cfg.Warmup, cfg.Rates = srv.URL, "m", 2, []float64{1}
	_, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "307") || elsewhere.Load() != 0 {
		t.Errorf("Run = %v with %d requests elsewhere; want an error naming the redirect and none", err, elsewhere.Load())
	}
}

// traceRun is simulatedRun with request sizes drawn (seeded) from the Azure
// conversation trace, as `lab calibrate --trace` sends them: each warm-up
// request alone (3 s apart), then the steps.
func traceRun(t *testing.T, cfg Config, engine emulator.Config) (*runner, []window, time.Duration) {
	t.Helper()
	tr, err := trace.ReadFile("../../data/azure-llm-trace-2023/AzureLLMInferenceTrace_conv.csv")
	if err != nil {
		t.Fatal(err)
	}
	shapes, err := ShapesFromTrace(tr, engine.MaxModelLen)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	return replayedRun(t, cfg, engine, 3*time.Second, 2*time.Minute, func() Shape { return shapes[rng.IntN(len(shapes))] })
}

// TestCalibrateRecoversDefaultEngine: calibrating the emulator's default
// engine (its known parameters) with requests sized like the conversation
// trace recovers every step-time coefficient within 10 %, including the cost
// per token of context, and measures the queue set point.
func TestCalibrateRecoversDefaultEngine(t *testing.T) {
	cfg := DefaultConfig()
	cfg.URL, cfg.Warmup, cfg.StepDuration, cfg.MetricsInterval = "http://127.0.0.1:8000", 20, 30*time.Second, 250*time.Millisecond
	cfg.Rates = []float64{4, 6, 8, 10, 12, 14, 16, 18, 20}
	engine := emulator.DefaultConfig()
	r, windows, warmupEnd := traceRun(t, cfg, engine)
	rep := r.analyse(windows, warmupEnd)
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table.String())
	if sp := rep.Recommended; sp == nil || sp.SetPoints.QueueDepth < 1 || sp.SetPoints.QueueDepth > sp.QueueSLOBound || sp.QueueNoise <= 0 {
		t.Errorf("recommended %+v: want a queue set point measured above the noise and within the SLO bound", sp)
	}
	within(t, rep.Profile.StepTime, engine.StepTime, 0.1)
}

// TestCalibrateWithNoisyWarmup: when the warm-up's timings overstate the cost
// of context (as a shared CPU makes them: measured against `lab emulator`'s
// default engine, 134–222 ns per token against 40), the profile must still
// saturate where the engine did. The warm-up here is the simulated one with
// each request's decode stretched by 150 ns per token of context it holds (its
// inter-token latency then grows about 190 ns per token, a line the warm-up
// alone takes for the context cost, leaving the steps a negative perSeq).
//
// With the context probe (the default), the probe's groups measure the
// context cost instead, and every coefficient comes back within 10 %. Without
// it, the three coefficients are fitted together over the warm-up and the
// steps, the report says so, and what the steps measure, perSeq +
// perContextToken × the context held, stays within 10 %.
func TestCalibrateWithNoisyWarmup(t *testing.T) {
	for _, probe := range []int{8, 0} {
		t.Run(fmt.Sprintf("probe=%d", probe), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.URL, cfg.Warmup, cfg.StepDuration, cfg.MetricsInterval = "http://127.0.0.1:8000", 20, 30*time.Second, 250*time.Millisecond
			cfg.Rates = []float64{4, 6, 8, 10, 12, 14, 16, 18, 20}
			cfg.ContextProbe = probe
			r, windows, warmupEnd := traceRun(t, cfg, emulator.DefaultConfig())
			for _, rec := range r.records {
				if rec.step == stepWarmup && rec.tokens >= 2 {
					ctx := float64(rec.prompt) + float64(rec.tokens)/2
					rec.last += time.Duration(150e-9 * ctx * float64(rec.tokens-1) * float64(time.Second))
				}
			}
			rep := r.analyse(windows, warmupEnd)
			var table strings.Builder
			if err := rep.WriteTable(&table); err != nil {
				t.Fatal(err)
			}
			t.Log("\n" + table.String())
			if rep.Saturation == nil || rep.Saturation.RateRequestsPerSecond != 16 {
				t.Fatalf("saturation %+v, want 16 requests/s (the noise is in the warm-up only)", rep.Saturation)
			}
			if c := rep.ProfileCheck; c == nil || !c.Agrees || c.SaturationRateRequestsPerSecond == nil || *c.SaturationRateRequestsPerSecond != 16 {
				t.Errorf("profile check: %v; want the fitted profile to saturate at 16 requests/s too", c.Disagreement)
			}
			st, want := rep.Profile.StepTime, emulator.DefaultConfig().StepTime
			jointNote := slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "fitted together over the warm-up and the steps") })
			if probe > 0 {
				if jointNote || rep.Fit.ContextProbe == nil || len(rep.Fit.ContextProbe.Groups) != 2*ProbeRounds {
					t.Errorf("notes %q, probe %+v: want the probe's %d groups measured and no joint fit", rep.Notes, rep.Fit.ContextProbe, 2*ProbeRounds)
				}
				within(t, st, want, 0.1)
				return
			}
			if !jointNote || rep.Fit.ContextProbe != nil {
				t.Errorf("notes %q, probe %+v: want no probe and a note saying the step-time coefficients were fitted together", rep.Notes, rep.Fit.ContextProbe)
			}
			// What the steps measure, perSeq + perContextToken × the context
			// held, stays within 10 % of the engine's at the conversation
			// trace's mean context (about 1,300 tokens).
			const held = 1300
			got := st.PerSeq.Seconds() + held*st.PerContextToken.Seconds()
			truth := want.PerSeq.Seconds() + held*want.PerContextToken.Seconds()
			if e := math.Abs(got-truth) / truth; e > 0.1 {
				t.Errorf("perSeq + %d × perContextToken = %.3gs, want %.3gs within 10 %% (off by %.0f %%)", held, got, truth, 100*e)
			}
		})
	}
}

// within checks each step-time coefficient of got against want within tol
// (a fraction).
func within(t *testing.T, got simulate.StepTimeProfile, want emulator.StepTimeModel, tol float64) {
	t.Helper()
	for _, c := range []struct {
		name      string
		got, want time.Duration
	}{
		{"base", got.Base.Duration, want.Base},
		{"perSeq", got.PerSeq.Duration, want.PerSeq},
		{"perPrefillToken", got.PerPrefillToken.Duration, want.PerPrefillToken},
		{"perContextToken", got.PerContextToken.Duration, want.PerContextToken},
	} {
		if e := math.Abs(float64(c.got-c.want)) / float64(c.want); e > tol {
			t.Errorf("%s = %v, want %v within %.0f %% (off by %.0f %%)", c.name, c.got, c.want, 100*tol, 100*e)
		} else {
			t.Logf("%s = %v (true %v, %+.1f %%)", c.name, c.got, c.want, 100*float64(c.got-c.want)/float64(c.want))
		}
	}
}

// TestProfileCheckJudge: the fitted profile reproduces the engine when their
// saturation points are within 10 % of the measured one; without a measured
// one nothing checks it.
func TestProfileCheckJudge(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tt := range []struct {
		name     string
		measured *Saturation
		replay   *float64
		agrees   bool
		want     string
	}{
		{"same", &Saturation{RateRequestsPerSecond: 16}, f(16), true, ""},
		{"within 10 %", &Saturation{RateRequestsPerSecond: 10}, f(11), true, ""},
		{"one step below", &Saturation{RateRequestsPerSecond: 16}, f(14), false, "the profile saturates at 14 requests/s, the engine at 16 (more than 10 % apart)"},
		{"one step above", &Saturation{RateRequestsPerSecond: 16}, f(18), false, "the profile saturates at 18 requests/s, the engine at 16"},
		{"neither: nothing checks the profile", nil, nil, false, "the engine failed the first step, so no saturation point checks the profile"},
		{"profile fails at once", &Saturation{RateRequestsPerSecond: 4}, nil, false, "the profile fails the first step, the engine saturated at 4 requests/s"},
		{"engine failed at once", nil, f(4), false, "the profile saturates at 4 requests/s, the engine failed the first step"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &ProfileCheck{SaturationRateRequestsPerSecond: tt.replay}
			c.judge(tt.measured)
			if c.Agrees != tt.agrees || !strings.Contains(c.Disagreement, tt.want) || (tt.agrees && c.Disagreement != "") {
				t.Errorf("judge = %v %q, want %v %q", c.Agrees, c.Disagreement, tt.agrees, tt.want)
			}
		})
	}
}

// TestFitStepModel: the non-negative least-squares fit recovers an exact
// model, and holds at 0 a coefficient whose free value would be negative,
// fitting the others as well as they can.
func TestFitStepModel(t *testing.T) {
	model := func(b, c float64) float64 { return 0.006 + 25e-6*b + 40e-9*c }
	var pts []stepPoint
	for _, p := range [][2]float64{{1, 100}, {1, 8000}, {20, 25000}, {50, 60000}, {90, 120000}, {150, 150000}} {
		pts = append(pts, stepPoint{running: p[0], context: p[1], seconds: model(p[0], p[1])})
	}
	c, held := fitStepModel(pts)
	for i, want := range []float64{0.006, 25e-6, 40e-9} {
		if math.Abs(c[i]-want)/want > 1e-6 || held[i] {
			t.Errorf("coefficient %d = %g (held %v), want %g free", i, c[i], held[i], want)
		}
	}
	// Step time falling with the batch: perSeq held at 0, the rest fitted.
	pts = []stepPoint{{1, 0, 0.010}, {10, 0, 0.009}, {20, 0, 0.008}, {1, 1000, 0.011}}
	c, held = fitStepModel(pts)
	if !held[1] || c[1] != 0 || held[0] || c[0] <= 0 || c[2] < 0 {
		t.Errorf("fit = %v held %v, want perSeq held at 0 and base > 0", c, held)
	}
	if c, held := fitStepModel(nil); c != [3]float64{} || held != [3]bool{true, true, true} {
		t.Errorf("fit of no point = %v held %v, want zeros, all held", c, held)
	}
}

// TestRoundDuration: 4 significant digits, at least 1 ns when positive, and
// an engine's absurd timings saturate instead of wrapping to a negative step
// time (which the profile's bounds then refuse by name).
func TestRoundDuration(t *testing.T) {
	for _, tt := range []struct {
		sec  float64
		want time.Duration
	}{
		{0.0061234, 6123 * time.Microsecond},
		{1e-12, time.Nanosecond},
		{0, 0},
		{-1, 0},
		{math.NaN(), 0},
		{1e300, time.Duration(math.MaxInt64)},
		{math.Inf(1), time.Duration(math.MaxInt64)},
	} {
		if got := roundDuration(tt.sec); got != tt.want {
			t.Errorf("roundDuration(%g) = %v, want %v", tt.sec, got, tt.want)
		}
	}
}

// TestProbeWindow: a probe group measures the step time and the context held
// while all its requests decode together; a failed, stalled (preempted) or
// too short request spoils the group; a chunk carrying two tokens counts both.
func TestProbeWindow(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	// req decodes n tokens one every step ms from start, each chunk carrying per tokens.
	req := func(prompt int, start, step float64, n, per int) *record {
		rec := &record{step: stepProbe, prompt: prompt, tokens: n * per}
		for i := range n {
			rec.times = append(rec.times, ms(start+float64(i)*step))
		}
		return rec
	}
	g, ok := probeWindow([]*record{req(100, 0, 10, 100, 1), req(100, 50, 10, 100, 1)})
	// Window 50–990 ms: the first request's tokens 5–99, the second's 0–94.
	if !ok || math.Abs(g.StepSeconds-0.010) > 1e-9 || math.Abs(g.ContextTokens-(100+(6+99)/2.0+100+(1+94)/2.0)) > 1e-9 {
		t.Errorf("two requests 10 ms per token: %+v, %v; want 10 ms and the contexts held in the window", g, ok)
	}
	if g, ok := probeWindow([]*record{req(100, 0, 20, 50, 2)}); !ok || math.Abs(g.StepSeconds-0.010) > 1e-9 {
		t.Errorf("two tokens per chunk every 20 ms: %+v, %v; want 10 ms per token", g, ok)
	}
	failed := req(100, 0, 10, 100, 1)
	failed.err = errNoToken
	stalled := req(100, 0, 10, 100, 1)
	for i := 40; i < len(stalled.times); i++ {
		stalled.times[i] += ms(200) // preempted for 200 ms after its 40th token
	}
	for name, recs := range map[string][]*record{
		"failed":    {req(100, 0, 10, 100, 1), failed},
		"preempted": {req(100, 0, 10, 100, 1), stalled},
		"too short": {req(100, 0, 10, 100, 1), req(100, 900, 10, 100, 1)},
		"none":      nil,
	} {
		if g, ok := probeWindow(recs); ok {
			t.Errorf("%s: %+v measured, want the group refused", name, g)
		}
	}
}

// TestProbePrompts: the long prompt fits max_model_len and the KV cache the
// engine publishes, and a probe that would tell too little is skipped.
func TestProbePrompts(t *testing.T) {
	for _, c := range []struct {
		batch, maxModelLen int
		cache              *cacheConfig
		long               int
		ok                 bool
	}{
		{8, 0, nil, probePromptLong, true},
		{8, 131072, &cacheConfig{blockSize: 16, numGPUBlocks: 27621}, probePromptLong, true},
		{8, 4096, nil, 4096 - probeOutput, true},
		{8, 4096, &cacheConfig{blockSize: 16, numGPUBlocks: 2000}, 28800/8 - probeOutput, true},
		{8, 1024, nil, 0, false},
		{256, 0, &cacheConfig{blockSize: 16, numGPUBlocks: 2000}, 0, false},
	} {
		short, long, ok, why := probePrompts(c.batch, c.maxModelLen, c.cache)
		if ok != c.ok || (ok && (short != probePromptShort || long != c.long)) || (!ok && !strings.Contains(why, "skipped")) {
			t.Errorf("probePrompts(%d, %d, %+v) = %d, %d, %v, %q; want long %d, ok %v", c.batch, c.maxModelLen, c.cache, short, long, ok, why, c.long, c.ok)
		}
	}
}
