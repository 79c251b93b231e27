package policy

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/internal/testfixture"
	"github.com/saturation-adapter/saturation-adapter/pkg/history"
)

// Issue 19's engine states, per engine, on scrape sequences shaped as the
// engines write them (names and labels of vLLM V1's and SGLang's metrics
// code; values adapted), scraped every 2 s as the adapter does, with the
// default 10 s state window.

// vllmEngine is one vLLM V1 engine's series (data-parallel rank id, model m).
type vllmEngine struct {
	id                 string
	model              string
	waiting, running   float64
	kv                 float64
	prompt, gen, fin   float64
	sleeping, noSleeps bool
}

func (e vllmEngine) body() string {
	l := fmt.Sprintf(`engine="%s",model_name="%s"`, e.id, e.model)
	b := fmt.Sprintf("vllm:num_requests_waiting{%s} %g\nvllm:num_requests_running{%s} %g\nvllm:kv_cache_usage_perc{%s} %g\n"+
		"vllm:prompt_tokens_total{%s} %g\nvllm:generation_tokens_total{%s} %g\nvllm:request_success_total{%s,finished_reason=\"stop\"} %g\n",
		l, e.waiting, l, e.running, l, e.kv, l, e.prompt, l, e.gen, l, e.fin)
	if !e.noSleeps {
		awake := 1
		if e.sleeping {
			awake = 0
		}
		b += fmt.Sprintf("vllm:engine_sleep_state{%s,sleep_state=\"awake\"} %d\nvllm:engine_sleep_state{%s,sleep_state=\"weights_offloaded\"} %d\n", l, awake, l, 1-awake)
	}
	return b
}

// scrapes is a pod's history of the given bodies, 2 s apart.
func scrapes(t *testing.T, c *Catalog, bodies ...string) *history.History {
	t.Helper()
	var h *history.History
	for i, b := range bodies {
		h = h.Append(read(t, b, t0.Add(time.Duration(i)*2*time.Second)), history.HistoryOptions{Needs: c.Needs()})
	}
	return h
}

// evalAlone returns the pod's report and its one-pod pool's value.
func evalAlone(c *Catalog, name string, h *history.History) (PodReport, *float64) {
	now := h.Latest().At()
	rep := c.Lookup(name).ExplainPod(h, "", now, maxAge)
	b := c.Lookup(name).NewPool(now, maxAge)
	b.Add(h, "")
	return rep, b.Pool().Value
}

// TestLivelockIsWedged: requests wait, nothing finishes and the running
// requests generate next to nothing, while the prompt counter moves (the same
// prefixes prefilled over and over): wedged, although not every counter is
// flat.
func TestLivelockIsWedged(t *testing.T) {
	c := builtin(t, 1)
	var bodies []string
	for i := range 6 {
		e := vllmEngine{id: "0", model: "m", waiting: 40 + float64(i), running: 16, kv: 0.93 - 0.05*float64(i%2),
			prompt: 1e6 + 32768*float64(i), gen: 50000 + float64(i/3), fin: 900}
		bodies = append(bodies, e.body())
	}
	rep, v := evalAlone(c, MetricDemandReplicas, scrapes(t, c, bodies...))
	if rep.State != StateWedged || !strings.Contains(rep.Engines[0].Reason, "livelock") {
		t.Errorf("state %s (%+v), want wedged: a livelock", rep.State, rep.Engines)
	}
	if v != nil {
		t.Errorf("a one-pod pool of a wedged pod = %v, want no value (the HPA holds)", *v)
	}
	// The same engine generating 20 tokens/s per running request is busy, not wedged.
	bodies = bodies[:0]
	for i := range 6 {
		e := vllmEngine{id: "0", model: "m", waiting: 40 + float64(i), running: 16, kv: 0.93, prompt: 1e6 + 32768*float64(i), gen: 50000 + 640*float64(i), fin: 900}
		bodies = append(bodies, e.body())
	}
	if rep, _ := evalAlone(c, MetricDemandReplicas, scrapes(t, c, bodies...)); rep.State != StateOK {
		t.Errorf("decoding engine: state %s (%+v), want ok", rep.State, rep.Engines)
	}
}

// TestLongPrefillIsProgress: vLLM V1 counts a prompt's tokens when its
// prefill completes, so one 100k-token prompt in chunked prefill shows every
// counter flat for 10 s while its chunks fill the KV cache; the requests
// behind it wait. That is progress: the one-pod pool answers (it must scale
// up now), it does not answer "no data".
func TestLongPrefillIsProgress(t *testing.T) {
	c := builtin(t, 1)
	var bodies []string
	for i := range 6 {
		e := vllmEngine{id: "0", model: "m", waiting: 12, running: 1, kv: 0.21 + 0.08*float64(i), prompt: 4.2e6, gen: 1.9e6, fin: 3400}
		bodies = append(bodies, e.body())
	}
	rep, v := evalAlone(c, MetricDemandReplicas, scrapes(t, c, bodies...))
	if rep.State != StateOK {
		t.Errorf("state %s (%+v), want ok", rep.State, rep.Engines)
	}
	// 12 waiting / 5 per pod.
	if v == nil || !approx(*v, 12.0/5) {
		t.Errorf("pool value %v, want 2.4", deref(v))
	}
	// The KV cache standing still instead, as the queue grows: wedged.
	bodies = bodies[:0]
	for i := range 6 {
		bodies = append(bodies, vllmEngine{id: "0", model: "m", waiting: 12 + float64(i), running: 1, kv: 0.21, prompt: 4.2e6, gen: 1.9e6, fin: 3400}.body())
	}
	if rep, _ := evalAlone(c, MetricDemandReplicas, scrapes(t, c, bodies...)); rep.State != StateWedged {
		t.Errorf("KV standing still: state %s (%+v), want wedged", rep.State, rep.Engines)
	}
}

// sglangBody is an SGLang scheduler's series for one data-parallel rank, with
// the labels collector.py gives them (model_name, engine_type, tp_rank,
// pp_rank, dp_rank), and the tokenizer's counters, which carry model_name only
// and count a request's tokens when it finishes.
func sglangBody(dp string, queue, running, usage, decode, prefill float64) string {
	l := fmt.Sprintf(`model_name="Qwen/Qwen3-32B",engine_type="unified",tp_rank="0",pp_rank="0",dp_rank="%s"`, dp)
	return fmt.Sprintf("sglang:num_queue_reqs{%s} %g\nsglang:num_running_reqs{%s} %g\nsglang:token_usage{%s} %g\n"+
		"sglang:realtime_tokens_total{%s,mode=\"decode\"} %g\nsglang:realtime_tokens_total{%s,mode=\"prefill_compute\"} %g\n"+
		"sglang:realtime_tokens_total{%s,mode=\"prefill_cache\"} 0\n",
		l, queue, l, running, l, usage, l, decode, l, prefill, l)
}

// TestSGLangStallFromItsOwnCounters: SGLang's stalls are judged from the
// scheduler's realtime_tokens_total with the default window. A stuck
// scheduler (decode tokens flat, queue growing) is wedged; a healthy one
// decoding long outputs, whose tokenizer counters stand still because no
// request finished in the window, is not.
func TestSGLangStallFromItsOwnCounters(t *testing.T) {
	c := builtin(t, 1)
	tokenizer := "sglang:generation_tokens_total{model_name=\"Qwen/Qwen3-32B\"} 7.5e6\nsglang:prompt_tokens_total{model_name=\"Qwen/Qwen3-32B\"} 8.1e6\n"
	var stuck, decoding []string
	for i := range 6 {
		f := float64(i)
		stuck = append(stuck, sglangBody("0", 12+6*f, 48, 0.97, 2.2e6, 3.1e6)+tokenizer)
		decoding = append(decoding, sglangBody("0", 12, 48, 0.97, 2.2e6+48*25*2*f, 3.1e6)+tokenizer)
	}
	if rep, v := evalAlone(c, MetricDemandReplicas, scrapes(t, c, stuck...)); rep.State != StateWedged || v != nil {
		t.Errorf("stuck scheduler: state %s (%+v), value %v; want wedged, no value", rep.State, rep.Engines, deref(v))
	}
	if rep, v := evalAlone(c, MetricDemandReplicas, scrapes(t, c, decoding...)); rep.State != StateOK || v == nil {
		t.Errorf("decoding long outputs: state %s (%+v), value %v; want ok", rep.State, rep.Engines, deref(v))
	}
}

// TestPodIsNotItsWorstEngine: a data-parallel pod with one wedged rank and
// another holding 40 waiting counts max(40 / 5, the unknown 1) = 8, not 1; a
// sleeping engine of model B beside model A's queue does not void A's load in
// the built-in metrics; a pod whose every engine cannot serve still counts at
// the unknown-pod saturation and alone answers no data.
func TestPodIsNotItsWorstEngine(t *testing.T) {
	c := builtin(t, 1)
	var dp, multi, allWedged []string
	for i := range 6 {
		f := float64(i)
		wedged := vllmEngine{id: "0", model: "m", waiting: 20 + f, running: 8, kv: 0.5, prompt: 1e6, gen: 5e5, fin: 100}
		healthy := vllmEngine{id: "1", model: "m", waiting: 40, running: 8, kv: 0.6, prompt: 1e6 + 4096*f, gen: 5e5 + 320*f, fin: 100 + f}
		dp = append(dp, wedged.body()+healthy.body())
		a := vllmEngine{id: "0", model: "model-a", waiting: 40, running: 8, kv: 0.6, prompt: 1e6 + 4096*f, gen: 5e5 + 320*f, fin: 100 + f}
		b := vllmEngine{id: "1", model: "model-b", sleeping: true}
		multi = append(multi, a.body()+b.body())
		w1 := wedged
		w1.id = "1"
		allWedged = append(allWedged, wedged.body()+w1.body())
	}
	for _, tt := range []struct {
		name   string
		bodies []string
		state  EngineState
		want   *float64
	}{
		{"one rank wedged", dp, StateWedged, ptr(8)},
		{"model B asleep", multi, StateSleeping, ptr(8)},
		{"every rank wedged", allWedged, StateWedged, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rep, v := evalAlone(c, MetricDemandReplicas, scrapes(t, c, tt.bodies...))
			if rep.State != tt.state {
				t.Errorf("state %s (%+v), want %s", rep.State, rep.Engines, tt.state)
			}
			if (v == nil) != (tt.want == nil) || (v != nil && !approx(*v, *tt.want)) {
				t.Errorf("one-pod pool = %v, want %v (%s)", deref(v), deref(tt.want), rep.Why)
			}
			// Beside an idle pod, the pod counts what it counts alone (the
			// unknown saturation 1 when no engine can serve).
			now := t0.Add(10 * time.Second)
			b := c.Lookup(MetricDemandReplicas).NewPool(now, maxAge)
			b.Add(scrapes(t, c, tt.bodies...), "")
			b.Add(history.NewHistory(history.HistoryOptions{}, read(t, vllm(0, 1, 0), now)), "")
			want := 1.0
			if tt.want != nil {
				want = *tt.want
			}
			if p := b.Pool(); p.Value == nil || !approx(*p.Value, want) {
				t.Errorf("beside an idle pod: %v, want %g", deref(p.Value), want)
			}
		})
	}
}

func ptr(v float64) *float64 { return &v }

// TestStateNotJudged: with fewer scrapes than a state needs, explain says so
// instead of a silent ok.
func TestStateNotJudged(t *testing.T) {
	c := builtin(t, 1)
	e := vllmEngine{id: "0", model: "m", waiting: 3, running: 8, kv: 0.4, prompt: 1e6, gen: 5e5, fin: 100}
	for n, want := range map[int]string{1: "state not judged: 1 scrape, need 3", 2: "state not judged: 2 scrapes, need 3", 6: ""} {
		bodies := make([]string, n)
		for i := range bodies {
			x := e
			x.gen += 500 * float64(i)
			bodies[i] = x.body()
		}
		rep, _ := evalAlone(c, MetricSaturation, scrapes(t, c, bodies...))
		if len(rep.Engines) != 1 || rep.Engines[0].State != StateOK || rep.Engines[0].Reason != want {
			t.Errorf("%d scrapes: engines %+v, want ok with reason %q", n, rep.Engines, want)
		}
	}
}

// TestInconsistentHistogramDropsTheWindow (issue 19, item 4): a TTFT bucket
// that falls while the histogram's count rises is a broken exposition (an
// exporter that resets one series of a family, a relabelling that mixes two
// engines), not a restart: the latency term drops with a note, instead of
// counting the newer histogram whole as new observations.
func TestInconsistentHistogramDropsTheWindow(t *testing.T) {
	c, err := NewCatalog(Policy{Name: "chat", Kind: KindMean, UnknownSaturation: 1, Terms: []Term{
		{Kind: TermQueueDepth, SetPoint: 100},
		{Kind: TermTTFT, SetPoint: 2, Quantile: 0.9, Window: time.Minute},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// 1,000 requests were all under 0.5 s; 15 s later the 0.5 s bucket reads
	// 10 while the count rose to 1,010: counted as a restart, all 1,010 would
	// be new observations, most above 5 s, a p90 at the last bound: 2.5x the
	// SLO from a pod answering in 0.2 s.
	h := scrapes(t, c, ttftBody(1, [4]float64{1000, 1000, 1000, 1000}, 1000), ttftBody(1, [4]float64{10, 10, 10, 1010}, 1010))
	w := h.Window(history.WindowKey{Window: time.Minute})
	if !w.Inconsistent[0] || w.Histograms[0] != nil || w.Resets != 0 {
		t.Fatalf("window %+v: want TTFT inconsistent, no observations, no reset", w)
	}
	now := h.Latest().At()
	rep := c.Lookup("chat").ExplainPod(h, "", now, maxAge)
	var ttft *TermValue
	for i := range rep.Terms {
		if rep.Terms[i].Term == TermTTFT {
			ttft = &rep.Terms[i]
		}
	}
	if ttft == nil || !ttft.Dropped || !strings.Contains(ttft.Note, "fell while its count rose") || rep.Dominant != TermQueueDepth {
		t.Errorf("terms %+v (dominant %s): want the TTFT term dropped with its note, the queue dominant", rep.Terms, rep.Dominant)
	}
	b := c.Lookup("chat").NewPool(now, maxAge)
	b.Add(h, "")
	if p := b.Pool(); p.Value == nil || !approx(*p.Value, 0.01) || len(p.Latency) != 0 {
		t.Errorf("pool %v %+v: want 0.01 (queue 1 of 100), no latency term", deref(p.Value), p.Latency)
	}
}

// TestTRTLLMDeadGauges (hazard NC-17): trtllm-serve with iteration stats off
// keeps its queue and running gauges at 0 while requests complete (+412 in
// 30 s between NC-17-v1.3-t0 and t1; the scrapes in between, every 2 s, are
// those two bodies' counters interpolated). Its 0 is not idle: the engine is
// frozen (unknown), and says why; a one-pod pool has no value.
func TestTRTLLMDeadGauges(t *testing.T) {
	c := builtin(t, 1)
	t0body := string(testfixture.Read(t, "testdata/hazards/NC-17-v1.3-t0.prom"))
	var bodies []string
	for i := range 6 {
		done := 18211 + float64(412*2*i)/30
		bodies = append(bodies, strings.Replace(t0body, "} 18211.0\n", fmt.Sprintf("} %g\n", math.Round(done)), 1))
	}
	rep, v := evalAlone(c, MetricDemandReplicas, scrapes(t, c, bodies...))
	if rep.State != StateFrozen || !strings.Contains(rep.Engines[0].Reason, "enable_iter_perf_stats") || v != nil {
		t.Errorf("state %s (%+v), value %v; want frozen naming enable_iter_perf_stats, no value", rep.State, rep.Engines, deref(v))
	}
	// Idle for real: nothing completes either.
	idle := []string{t0body, t0body, t0body, t0body, t0body, t0body}
	if rep, v := evalAlone(c, MetricDemandReplicas, scrapes(t, c, idle...)); rep.State != StateOK || v == nil || *v != 0 {
		t.Errorf("idle: state %s (%+v), value %v; want ok, 0", rep.State, rep.Engines, deref(v))
	}
}

// TestScaleFromZeroInFlightPool: a demand policy with starting pods serves at
// least the pods counted and starting, and says why; a mean policy does not
// change (its Value target multiplies by Ready pods).
func TestScaleFromZeroInFlightPool(t *testing.T) {
	gw := &GatewayInput{Selector: "app=epp", Match: map[string]string{"inference_pool": "p"}}
	c, err := NewCatalog(
		Policy{Name: "demand", Kind: KindDemand, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(), Gateway: gw},
		Policy{Name: "mean", Kind: KindMean, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(), Gateway: gw})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{"demand": 1, "mean": 0} {
		b := c.Lookup(name).NewPool(t0, maxAge)
		b.AddGateway(0) // the requests that woke the pool timed out
		b.AddStarting(1)
		p := b.Pool()
		if p.Value == nil || *p.Value != want || (name == "demand") != strings.HasPrefix(p.InFlight, "scale-from-zero in flight") {
			t.Errorf("%s: %v %q, want %g", name, deref(p.Value), p.InFlight, want)
		}
	}
}
