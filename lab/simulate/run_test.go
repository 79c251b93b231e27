package simulate

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/saturation-adapter/saturation-adapter/lab/hpa"
	"github.com/saturation-adapter/saturation-adapter/lab/trace"
)

const azureConv = "../../data/azure-llm-trace-2023/AzureLLMInferenceTrace_conv.csv"

// azureWindow returns a window of the Azure conversation trace (CC-BY 4.0,
// Splitwise, ISCA 2024; see data/azure-llm-trace-2023/README.md).
func azureWindow(tb testing.TB, o WorkloadOptions) Workload {
	tb.Helper()
	tr, err := trace.ReadFile(azureConv)
	if err != nil {
		tb.Fatal(err)
	}
	w, err := NewWorkload(tr, o)
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

func builtins(t *testing.T, names ...string) []Autoscaler {
	t.Helper()
	ps, err := BuiltinAutoscalers(DefaultTargets(), 1, names...)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func reportJSON(t *testing.T, rep *Report) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestRunIsDeterministic runs every built-in policy on three minutes of the Azure
// trace at twice its rate, twice with one seed and once with another.
func TestRunIsDeterministic(t *testing.T) {
	o := DefaultWorkloadOptions()
	o.Start, o.Length, o.RateScale, o.Seed = 20*time.Minute, 3*time.Minute, 2, 7
	w := azureWindow(t, o)
	cfg := DefaultConfig()
	cfg.ColdStart = 60 * time.Second
	a := reportJSON(t, mustRun(t, cfg, w, builtins(t)))
	b := reportJSON(t, mustRun(t, cfg, w, builtins(t)))
	if !bytes.Equal(a, b) {
		t.Fatalf("two runs with seed %d differ:\n%s", cfg.Seed, cmp.Diff(string(a), string(b)))
	}
	cfg.Seed = 2
	c := mustRun(t, cfg, w, builtins(t))
	if bytes.Equal(a, reportJSON(t, c)) {
		t.Error("seeds 1 and 2 gave identical reports; the seed must move the clocks' phases")
	}
	if got := len(c.Autoscalers); got != 2+len(BuiltinAutoscalerNames()) {
		t.Errorf("%d policies in the report, want the oracle, static and %d built-ins", got, len(BuiltinAutoscalerNames()))
	}
}

// TestLazyScrapesChangeNothing: scraping only before a read must give exactly the
// results of scraping at every tick, for the adapter's gauge-only signals.
func TestLazyScrapesChangeNothing(t *testing.T) {
	o := DefaultWorkloadOptions()
	o.Start, o.Length, o.RateScale = 30*time.Minute, 3*time.Minute, 2
	w := azureWindow(t, o)
	cfg := DefaultConfig()
	cfg.ColdStart = 30 * time.Second
	ps := builtins(t, "keda-queue-cached", "saturation")
	lazy := mustRun(t, cfg, w, ps)
	cfg.ScrapeEveryTick = true
	every := mustRun(t, cfg, w, ps)
	for i := range lazy.Autoscalers {
		l, e := lazy.Autoscalers[i], every.Autoscalers[i]
		if l.Name != "oracle" && l.Name != "static" && !(l.Scrapes < e.Scrapes) {
			t.Errorf("%s: %d lazy scrapes, %d at every tick; want fewer", l.Name, l.Scrapes, e.Scrapes)
		}
		l.Scrapes, e.Scrapes = 0, 0
		if diff := cmp.Diff(e, l); diff != "" {
			t.Errorf("%s: lazy scrapes changed the outcome (-every tick +lazy):\n%s", l.Name, diff)
		}
	}
}

// TestHPAReactsToALoadStep: on slowEngine (one request at a time), a step from 1
// to 3 requests per second makes the queue grow by 2 per second on one pod. The
// adapter scrapes every 2 s and the HPA syncs every 15 s: the first sync after the
// queue passes the tolerance (about 3 s after the step) proposes more replicas;
// the recommended behavior's 30 s scale-up window keeps only recommendations
// strictly younger than 30 s, so the next sync, 15 s later, scales: 18–40 s after
// the step. The KEDA-style trigger (Prometheus every 15 s, KEDA every 30 s) can
// only be later.
func TestHPAReactsToALoadStep(t *testing.T) {
	reqs := append(every(0, sec(60), sec(1), 10), every(sec(60), sec(240), time.Second/3, 10)...)
	cfg := testConfig(sec(20))
	cfg.OracleInterval = 30 * time.Second
	rep := mustRun(t, cfg, Workload{Requests: reqs, Duration: sec(240)}, builtins(t, "saturation", "keda-queue"))
	firstUp := func(name string) float64 {
		for _, s := range result(t, rep, name).Series {
			if s.T > 60 && s.Replicas > 1 {
				return s.T - 60
			}
		}
		t.Fatalf("%s never scaled up", name)
		return 0
	}
	sat, keda := firstUp("saturation"), firstUp("keda-queue")
	t.Logf("first scale-up after the step: saturation %gs, keda-queue %gs", sat, keda)
	if sat < 18 || sat > 40 {
		t.Errorf("saturation scaled up %gs after the step, want 18-40 s", sat)
	}
	if keda < sat {
		t.Errorf("the KEDA-style trigger scaled up %gs after the step, before the direct path (%gs)", keda, sat)
	}
	for _, p := range rep.Autoscalers {
		if p.PeakReplicas < 3 {
			t.Errorf("%s peaked at %d replicas, want at least the 3 the load needs", p.Name, p.PeakReplicas)
		}
	}
	if s := result(t, rep, "saturation").LoadSteps; s.Steps != 1 || s.Reacted != 1 {
		t.Errorf("saturation load steps = %+v, want one step, reacted", s)
	}
}

// TestGPUUtilizationSaturatesEarly: a batching engine with requests always in
// flight is busy 100 % of the time however many pods share the load, so the
// GPU-utilization HPA scales to its maximum on a load one pod serves within the
// SLO, and stays there.
func TestGPUUtilizationSaturatesEarly(t *testing.T) {
	cfg := testConfig(sec(20))
	cfg.Engine.MaxNumSeqs = 256 // 100 ms steps whatever the batch
	cfg.MaxReplicas = 4
	reqs := every(0, sec(600), sec(0.5), 100) // 10 s each: about 20 in flight
	rep := mustRun(t, cfg, Workload{Requests: reqs, Duration: sec(600)}, builtins(t, "gpu-util", "saturation"))
	if got := result(t, rep, "oracle").PeakReplicas; got != 1 {
		t.Fatalf("oracle peak %d, want 1", got)
	}
	gpu := result(t, rep, "gpu-util")
	if gpu.PeakReplicas != 4 || gpu.Series[len(gpu.Series)-1].Replicas != 4 {
		t.Errorf("gpu-util peaked at %d replicas and ended at %d, want its maximum 4 throughout", gpu.PeakReplicas, gpu.Series[len(gpu.Series)-1].Replicas)
	}
	if got := result(t, rep, "saturation").PeakReplicas; got != 1 {
		t.Errorf("saturation peaked at %d replicas, want 1", got)
	}
}

func TestRunRejectsPoliciesItCannotSimulate(t *testing.T) {
	h, err := hpa.Parse([]byte(`apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: mine}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: vllm}
  maxReplicas: 4
  metrics:
  - type: External
    external:
      metric: {name: vllm_queue}
      target: {type: AverageValue, averageValue: "5"}
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 60}}
`))
	if err != nil {
		t.Fatal(err)
	}
	w := Workload{Requests: every(0, sec(10), sec(1), 10), Duration: sec(10)}
	_, err = Run(testConfig(0), w, []Autoscaler{{Name: "mine", HPA: h, Path: PathAdapter}})
	for _, want := range []string{`External metric "vllm_queue" is not one the simulated adapter serves`, `resource "cpu" is not simulated`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Run error = %v, want one containing %q", err, want)
		}
	}
	if _, err := Run(testConfig(0), w, []Autoscaler{{Name: "oracle", HPA: h}}); err == nil {
		t.Error("Run accepted a policy named oracle")
	}
	big := h.DeepCopy()
	big.Spec.MaxReplicas = 100000
	if _, err := Run(testConfig(0), w, []Autoscaler{{Name: "big", HPA: big}}); err == nil || !strings.Contains(err.Error(), "maxReplicas 100000: the simulated fleet runs at most 1024 replicas") {
		t.Errorf("Run with maxReplicas 100000 = %v, want it refused", err)
	}
	bad := testConfig(0)
	bad.TTFTSLO, bad.SLOTarget, bad.MinReplicas = 0, 2, 0
	_, err = Run(bad, w, nil)
	for _, want := range []string{"TTFT SLO must be in [1ms, 1h0m0s], got 0s", "SLO target must be in (0, 1]", "min replicas must be in [1, 1024], got 0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Run error = %v, want one containing %q", err, want)
		}
	}
	// Clocks that would multiply a replay's events past any memory (an oracle
	// interval of 1 ns asked for 6e10 intervals), time arithmetic that would
	// overflow (a TPOT SLO of 100,000 h scored worse than one of 1 h), and
	// fleets past the oracle's cap are refused before anything runs.
	bad = testConfig(0)
	bad.OracleInterval, bad.ScrapeInterval, bad.SampleInterval, bad.HPA.SyncPeriod = time.Nanosecond, time.Nanosecond, time.Nanosecond, time.Nanosecond
	bad.TPOTSLO, bad.MinReplicas, bad.MaxReplicas = 100000*time.Hour, 5000, 6000
	_, err = Run(bad, w, nil)
	for _, want := range []string{"oracle interval must be in [1s, 1h0m0s], got 1ns", "scrape interval must be in [100ms, 1h0m0s]",
		"sample interval must be in [100ms", "HPA sync period must be in [100ms", "TPOT SLO must be in [0s, 1m0s]",
		"min replicas must be in [1, 1024], got 5000", "max replicas must be in [0, 1024] (0: twice the oracle's peak), got 6000"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Run error = %v, want one containing %q", err, want)
		}
	}
}

// TestAdapterFeed: a pod Ready since the last scrape is unknown (its scrape
// failed while it started); a Ready pod never attempted is scraped on the spot.
func TestAdapterFeed(t *testing.T) {
	f := newFleet(slowEngine(), ColdStart{Mean: sec(5)}, epoch(), nil, nopRecorder{}, time.Hour)
	if err := f.addReady(1); err != nil {
		t.Fatal(err)
	}
	f.setReplicas(2) // pod-1 Ready at 5 s
	a := &adapterFeed{src: defaultAdapterSource()(), tick: ticker{0, sec(2)}, consumer: ticker{0, sec(1)}, maxAge: sec(6), state: map[int]*scrapeState{}}
	f.advance(sec(4))
	if err := a.scrapeTick(sec(4), f); err != nil {
		t.Fatal(err)
	}
	f.advance(sec(5.5))
	fresh, unknown, err := a.pool(sec(5.5), f)
	if err != nil || !cmp.Equal(fresh, []int{0}) || unknown != 1 {
		t.Errorf("pool = %v, %d, %v; want pod 0 fresh and the just-Ready pod 1 unknown", fresh, unknown, err)
	}
	f.setReplicas(3)
	f.pods[2].readyAt = f.now // Ready at once, never scraped
	f.advance(sec(5.5))
	fresh, unknown, err = a.pool(sec(5.5), f)
	if err != nil || !cmp.Equal(fresh, []int{0, 2}) || unknown != 1 || a.renders != 2 {
		t.Errorf("pool = %v, %d, %v after %d renders; want the never-scraped pod 2 scraped on the spot", fresh, unknown, err, a.renders)
	}
	fresh, unknown, _ = a.pool(sec(12), f)
	if len(fresh) != 0 || unknown != 3 {
		t.Errorf("pool 6.5 s after the last scrape = %v, %d; want every reading stale", fresh, unknown)
	}
}

// TestWarmUpIsServedButNotScored: a load step during the warm-up costs the
// HPA misses there; the window after it (and the warm-up's last 80 s) is light. The report covers the window
// only: its requests, its share within the SLO, and GPU time from the end of
// the warm-up (the static fleet: its size × the window). The same replay
// scored whole counts the warm-up's misses.
func TestWarmUpIsServedButNotScored(t *testing.T) {
	reqs := append(every(0, sec(20), sec(1), 5), every(sec(20), sec(40), time.Second/4, 10)...)
	reqs = append(reqs, every(sec(40), sec(180), sec(1), 5)...)
	cfg := testConfig(sec(20))
	policies := builtins(t, "saturation")
	whole := mustRun(t, cfg, Workload{Requests: reqs, Duration: sec(180)}, policies)
	warm := mustRun(t, cfg, Workload{Requests: reqs, Duration: sec(180), ScoreFrom: sec(120)}, policies)

	if w := warm.Workload; w.Requests != 60 || w.DurationSeconds != 60 || w.WarmUpSeconds != 120 || w.MeanRate != 1 {
		t.Errorf("workload = %+v, want the window's 60 requests over 60 s after a 120 s warm-up", w)
	}
	if got := result(t, whole, "saturation").TTFTWithinSLO; got >= 1 {
		t.Fatalf("scored whole, saturation keeps %g within the SLO: the warm-up's step should cost it misses", got)
	}
	sat := result(t, warm, "saturation")
	if sat.Requests != 60 || sat.TTFTWithinSLO != 1 {
		t.Errorf("after the warm-up, saturation scores %d requests at %g within the SLO, want 60 at 1", sat.Requests, sat.TTFTWithinSLO)
	}
	static := result(t, warm, "static")
	if want := float64(static.PeakReplicas) * 60 / 3600; math.Abs(static.GPUHours-want) > 1e-5 {
		t.Errorf("static fleet of %d: %g GPU-h after the warm-up, want %g (the window only)", static.PeakReplicas, static.GPUHours, want)
	}
	if wholeStatic := result(t, whole, "static"); math.Abs(wholeStatic.GPUHours-3*static.GPUHours) > 1e-5 {
		t.Errorf("static fleet: %g GPU-h scored whole, %g after a warm-up of two thirds of the replay; want three times", wholeStatic.GPUHours, static.GPUHours)
	}
}
