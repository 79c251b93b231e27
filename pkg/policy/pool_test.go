package policy

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/internal/testfixture"

	"github.com/google/go-cmp/cmp"
	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

const maxAge = 6 * time.Second

// read extracts body and stamps it at.
func read(t testing.TB, body string, at time.Time) *signals.Reading {
	t.Helper()
	r, err := signals.NewExtractor().Extract([]byte(body))
	if err != nil {
		t.Fatalf("Extract(%q): %v", body, err)
	}
	r.Time = at
	return &r
}

// vllm renders a one-engine vLLM body with queue depth q, running n and KV usage kv.
func vllm(q, n, kv float64) string {
	return "vllm:num_requests_waiting{engine=\"0\"} " + ftoa(q) + "\nvllm:num_requests_running{engine=\"0\"} " + ftoa(n) +
		"\nvllm:kv_cache_usage_perc{engine=\"0\"} " + ftoa(kv) + "\n"
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func builtin(t testing.TB, unknown float64) *Catalog {
	t.Helper()
	c, err := BuiltinCatalog(DefaultSetPoints(), unknown)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pod is one pod of a pool test: its readings (oldest first) and why its
// newest scrape failed, if it did.
type pod struct {
	readings []*signals.Reading
	why      string
}

func (p pod) history() *history.History {
	return history.NewHistory(history.HistoryOptions{}, p.readings...)
}

func poolOf(t testing.TB, c *Catalog, name string, now time.Time, pods ...pod) Pool {
	t.Helper()
	b := c.Lookup(name).NewPool(now, maxAge)
	for _, p := range pods {
		b.Add(p.history(), p.why)
	}
	return b.Pool()
}

func deref(p *float64) any {
	if p == nil {
		return "nil"
	}
	return *p
}

func approx(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestPool pins each built-in policy's pool value: means and sums, unknown pods
// at the unknown saturation, and "no data" as nil, never 0.
func TestPool(t *testing.T) {
	known := func(q, kv float64) pod { return pod{readings: []*signals.Reading{read(t, vllm(q, 1, kv), t0)}} }
	dark := pod{why: "not scraped yet"}
	type values map[string]float64 // policy name → pool value
	tests := []struct {
		name    string
		pods    []pod
		unknown float64
		want    values
	}{
		{
			name: "mean and sum", pods: []pod{known(10, 0.4), known(0, 0.4)}, unknown: 1,
			want: values{MetricSaturation: 1.25, MetricDemandReplicas: 2.5, MetricQueueDepth: 10, MetricRunning: 2, MetricKVCacheUsage: 0.4},
		},
		{
			// A pod never scraped counts at the unknown saturation; a raw signal
			// has no set point to count it at, so it has no value (issue 20: at
			// the known pods' mean, 3 of 4 dark pods drove an HPA 4 → 1).
			name: "unknown pod counts as saturated", pods: []pod{known(0, 0), dark}, unknown: 1,
			want: values{MetricSaturation: 0.5, MetricDemandReplicas: 1},
		},
		{
			// No known pod: every policy's value is nil ("no data"), whatever the
			// unknown saturation, so the server answers an error and the HPA holds.
			name: "pod with a reading but no term is unknown",
			pods: []pod{{readings: []*signals.Reading{read(t, "vllm:num_requests_running 4\nvllm:num_requests_waiting NaN\n", t0)}}}, unknown: 2,
			want: values{MetricRunning: 4},
		},
		{name: "empty", want: values{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := builtin(t, tt.unknown)
			got := values{}
			for _, name := range c.Names() {
				if p := poolOf(t, c, name, t0, tt.pods...); p.Value != nil {
					got[name] = *p.Value
				}
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(approx)); diff != "" {
				t.Errorf("pool values (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPartialOutageNeverScalesDown (issue 12, "partial data scales the HPA
// down"): pods that stop answering count at their last good value while it is
// higher, for HoldLastGood, on every kind of metric; the HPA's desired replicas
// computed from the answer never fall because pods went dark.
func TestPartialOutageNeverScalesDown(t *testing.T) {
	c := builtin(t, DefaultUnknownSaturation)
	// Four pods, each with 10 waiting (saturation 2.0) at t0. At t0+10s three of
	// them fail (their newest reading is now stale); the fourth reads nearly idle
	// (one request running).
	saturated := func() []*signals.Reading { return []*signals.Reading{read(t, vllm(10, 4, 0.5), t0)} }
	now := t0.Add(10 * time.Second)
	pods := []pod{
		{readings: saturated(), why: "scrape failing: HTTP 500"},
		{readings: saturated(), why: "scrape failing: HTTP 500"},
		{readings: saturated(), why: "scrape failing: timed out"},
		{readings: append(saturated(), read(t, vllm(0, 1, 0.1), now))},
	}
	before := map[string]float64{MetricSaturation: 2, MetricDemandReplicas: 8, MetricQueueDepth: 40, MetricRunning: 16, MetricKVCacheUsage: 0.5}
	const idle = 0.1 / 0.8 // the answering pod: KV 0.1 of a 0.8 set point, one running
	after := map[string]float64{
		// (3 × 2.0 + 0.125) / 4: the dark pods keep their saturation 2.0.
		MetricSaturation:     (3*2 + idle) / 4,
		MetricDemandReplicas: 3*2 + idle,
		// Sums keep the dark pods' last values.
		MetricQueueDepth: 30, MetricRunning: 12 + 1, MetricKVCacheUsage: (3*0.5 + 0.1) / 4,
	}
	for name, want := range after {
		p := poolOf(t, c, name, now, pods...)
		if p.Value == nil || !approx(*p.Value, want) {
			t.Errorf("%s = %v, want %g", name, deref(p.Value), want)
			continue
		}
		if p.Known != 1 || p.Held != 3 {
			t.Errorf("%s: known %d held %d, want 1 and 3", name, p.Known, p.Held)
		}
		if *p.Value > before[name] {
			t.Errorf("%s rose from %g to %g on missing data alone", name, before[name], *p.Value)
		}
	}
	// Past HoldLastGood the dark pods count at the unknown saturation, and raw
	// signals have no value (the HPA holds).
	later := t0.Add(DefaultHoldLastGood + time.Second)
	pods[3].readings = append(pods[3].readings, read(t, vllm(0, 1, 0.1), later))
	if p := poolOf(t, c, MetricSaturation, later, pods...); p.Value == nil || !approx(*p.Value, (3*1+idle)/4) || p.Held != 0 {
		t.Errorf("after the hold: llm_saturation = %v (held %d), want %g", deref(p.Value), p.Held, (3*1+idle)/4)
	}
	for _, name := range []string{MetricQueueDepth, MetricRunning, MetricKVCacheUsage} {
		if p := poolOf(t, c, name, later, pods...); p.Value != nil {
			t.Errorf("after the hold: %s = %g, want no value while pods have none", name, *p.Value)
		}
	}
	// A scale-up on the known pods still happens: the known pod fills up.
	pods[3].readings = []*signals.Reading{read(t, vllm(50, 8, 0.9), now)}
	if p := poolOf(t, c, MetricDemandReplicas, now, pods...); p.Value == nil || !approx(*p.Value, 3*2+10) {
		t.Errorf("known pod saturated: llm_demand_replicas = %v, want %g", p.Value, 3*2.0+10)
	}
}

// Issue 20: three of four pods failing from the start (never reported) and
// the fourth idle: a raw-signal pool (llm_num_requests_waiting, a sum with
// target AverageValue 5) counted them at the known pod's 0 and its HPA went
// 4 → 1. It has no value now (503: the HPA holds), while the saturation and
// demand metrics count them at the unknown saturation, the HPA's own rule.
func TestRawSignalWithPodsThatNeverReported(t *testing.T) {
	c := builtin(t, DefaultUnknownSaturation)
	pods := []pod{
		{why: "scrape failing: connection refused"}, {why: "scrape failing: connection refused"}, {why: "scrape failing: timed out"},
		{readings: []*signals.Reading{read(t, vllm(0, 0, 0), t0)}},
	}
	for _, name := range []string{MetricQueueDepth, MetricRunning, MetricKVCacheUsage} {
		p := poolOf(t, c, name, t0, pods...)
		if p.Value != nil {
			t.Errorf("%s = %g with 3 of 4 pods never reported, want no value (the HPA holds)", name, *p.Value)
		}
		if p.Known != 1 || p.Pods != 4 {
			t.Errorf("%s: known %d of %d pods, want 1 of 4", name, p.Known, p.Pods)
		}
	}
	if p := poolOf(t, c, MetricDemandReplicas, t0, pods...); p.Value == nil || *p.Value != 3 {
		t.Errorf("llm_demand_replicas = %v, want 3 (the dark pods at the unknown saturation)", deref(p.Value))
	}
	// A fresh pod whose series of the signal are rejected is not dark: it
	// counts at the known pods' mean (hazard BC-02), the pool has a value.
	nan := []pod{pods[3], {readings: []*signals.Reading{read(t, "vllm:num_requests_waiting NaN\nvllm:kv_cache_usage_perc 0.5\n", t0)}}}
	if p := poolOf(t, c, MetricQueueDepth, t0, nan...); p.Value == nil || *p.Value != 0 {
		t.Errorf("a fresh pod with a rejected queue: llm_num_requests_waiting = %v, want 0 (the known pod's mean)", deref(p.Value))
	}
	// Once they report, the sum is theirs.
	for i := range 3 {
		pods[i] = pod{readings: []*signals.Reading{read(t, vllm(2, 0, 0), t0)}}
	}
	if p := poolOf(t, c, MetricQueueDepth, t0, pods...); p.Value == nil || *p.Value != 6 {
		t.Errorf("every pod reporting: llm_num_requests_waiting = %v, want 6", deref(p.Value))
	}
}

// Two saturated pods (2.0 each) drive an HPA to 4; one engine dies: the
// answer must still say 4 replicas, not 3 (the case).
func TestOneOfTwoSaturatedPodsDies(t *testing.T) {
	c := builtin(t, DefaultUnknownSaturation)
	now := t0.Add(8 * time.Second)
	pods := []pod{
		{readings: []*signals.Reading{read(t, vllm(10, 4, 0.5), t0)}, why: "scrape failing: connection refused"},
		{readings: []*signals.Reading{read(t, vllm(10, 4, 0.5), t0), read(t, vllm(10, 4, 0.5), now)}},
	}
	p := poolOf(t, c, MetricDemandReplicas, now, pods...)
	if p.Value == nil || math.Ceil(*p.Value) != 4 {
		t.Errorf("llm_demand_replicas = %v, want 4 replicas' worth", p.Value)
	}
}

// Terms beyond queue and KV: batch slots (with the engine's own limit or the
// term's), the preemption rate over a window, per-pod caps.
func TestTerms(t *testing.T) {
	pol := func(terms ...Term) *Catalog {
		c, err := NewCatalog(Policy{Name: "p", Kind: KindDemand, Terms: terms, UnknownSaturation: 1})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	t.Run("batch slots", func(t *testing.T) {
		c := pol(Term{Kind: TermBatchSlots, SetPoint: 0.8, MaxNumSeqs: 64})
		// 48 running of 64 slots at 20 % KV: 0.75 / 0.8.
		p := poolOf(t, c, "p", t0, pod{readings: []*signals.Reading{read(t, vllm(0, 48, 0.2), t0)}})
		if p.Value == nil || !approx(*p.Value, 0.75/0.8) {
			t.Errorf("batch slots = %v, want %g", p.Value, 0.75/0.8)
		}
		// Triton exposes its own limit (request_type="max", 512).
		tri := read(t, string(testfixture.Read(t, "testdata/samples/triton-trtllm_readme.prom")), t0)
		if p := poolOf(t, pol(Term{Kind: TermBatchSlots, SetPoint: 0.5}), "p", t0, pod{readings: []*signals.Reading{tri}}); p.Value == nil || *p.Value != 0 {
			t.Errorf("triton batch slots = %v, want 0 (0 active of 512)", p.Value)
		}
	})
	t.Run("preemption rate across a reset", func(t *testing.T) {
		c := pol(Term{Kind: TermPreemptionRate, SetPoint: 0.05, Window: time.Minute})
		// BC-12: 50 preemptions, then the container restarts and the counter
		// reads 2 fifteen seconds later: 2 new preemptions, never a negative rate.
		a := read(t, string(testfixture.Read(t, "testdata/hazards/BC-12-t0.prom"))+"vllm:num_requests_waiting{engine=\"0\"} 0\n", t0)
		b := read(t, string(testfixture.Read(t, "testdata/hazards/BC-12-t1.prom"))+"vllm:num_requests_waiting{engine=\"0\"} 0\n", t0.Add(15*time.Second))
		pl := poolOf(t, c, "p", t0.Add(15*time.Second), pod{readings: []*signals.Reading{a, b}})
		want := (2.0 / 15) / 0.05
		if pl.Value == nil || !approx(*pl.Value, want) {
			t.Errorf("preemption rate ratio = %v, want %g", pl.Value, want)
		}
		// One reading has no rate: the term drops out and, alone, the pod is unknown.
		if pl := poolOf(t, c, "p", t0, pod{readings: []*signals.Reading{a}}); pl.Value != nil {
			t.Errorf("a single reading gave a rate: %v", *pl.Value)
		}
	})
	t.Run("per-pod cap", func(t *testing.T) {
		c := pol(Term{Kind: TermQueueDepth, SetPoint: 5, MaxRatio: 4})
		p := poolOf(t, c, "p", t0, pod{readings: []*signals.Reading{read(t, vllm(1000, 8, 0.5), t0)}}, pod{readings: []*signals.Reading{read(t, vllm(5, 8, 0.5), t0)}})
		if p.Value == nil || *p.Value != 5 {
			t.Errorf("capped demand = %v, want 4 + 1", p.Value)
		}
	})
}

// ttftBody renders a vLLM body with a TTFT histogram (bounds 0.5, 1, 2.5, 5)
// and queue depth q.
func ttftBody(q float64, counts [4]float64, total float64) string {
	var b strings.Builder
	b.WriteString("vllm:num_requests_waiting{engine=\"0\"} " + ftoa(q) + "\n")
	b.WriteString("vllm:num_requests_running{engine=\"0\"} 1\n")
	for i, le := range []string{"0.5", "1.0", "2.5", "5.0"} {
		b.WriteString(`vllm:time_to_first_token_seconds_bucket{engine="0",le="` + le + `"} ` + ftoa(counts[i]) + "\n")
	}
	b.WriteString(`vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf"} ` + ftoa(total) + "\n")
	b.WriteString(`vllm:time_to_first_token_seconds_count{engine="0"} ` + ftoa(total) + "\n")
	return b.String()
}

// The TTFT guardrail: the quantile of the window's new observations pooled over
// the pods, against the SLO; an idle window drops the term; a window without
// observations while requests wait counts at the SLO, never NaN, never the
// last (low) value.
func TestLatencyGuardrail(t *testing.T) {
	c, err := NewCatalog(Policy{Name: "chat", Kind: KindMean, UnknownSaturation: 1, Terms: []Term{
		{Kind: TermQueueDepth, SetPoint: 100},
		{Kind: TermTTFT, SetPoint: 2, Quantile: 0.9, Window: time.Minute},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := history.HistoryOptions{Needs: c.Needs()}
	add := func(bodies ...string) *history.History {
		var out *history.History
		for i, b := range bodies {
			out = out.Append(read(t, b, t0.Add(time.Duration(i)*15*time.Second)), h)
		}
		return out
	}
	now := t0.Add(15 * time.Second)
	eval := func(hs ...*history.History) Pool {
		b := c.Lookup("chat").NewPool(now, maxAge)
		for _, x := range hs {
			b.Add(x, "")
		}
		return b.Pool()
	}
	// Pod a: 10 new observations, all in (2.5, 5]; pod b: 10 new, all ≤ 0.5.
	// Pooled: 20, p90 rank 18 in (2.5, 5] holding ranks 10..20: 2.5 + 2.5 × 8/10 = 4.5.
	a := add(ttftBody(1, [4]float64{0, 0, 0, 0}, 0), ttftBody(1, [4]float64{0, 0, 0, 10}, 10))
	b := add(ttftBody(1, [4]float64{5, 5, 5, 5}, 5), ttftBody(1, [4]float64{15, 15, 15, 15}, 15))
	p := eval(a, b)
	if p.Value == nil || !approx(*p.Value, 4.5/2) || len(p.Latency) != 1 || !approx(p.Latency[0].Value, 4.5) {
		t.Errorf("pooled TTFT guardrail = %v %+v, want %g (p90 4.5 s / 2 s)", p.Value, p.Latency, 4.5/2)
	}
	// Idle: no observations and nothing waiting or running: the term drops and
	// the queue term (0) decides.
	idle := strings.ReplaceAll(ttftBody(0, [4]float64{5, 5, 5, 5}, 5), "vllm:num_requests_running{engine=\"0\"} 1", "vllm:num_requests_running{engine=\"0\"} 0")
	if p := eval(add(idle, idle)); p.Value == nil || *p.Value != 0 || len(p.Latency) != 0 {
		t.Errorf("idle window = %v %+v, want 0 with no latency term", p.Value, p.Latency)
	}
	// Requests wait but none got a first token in the window: at least the SLO.
	stuck := ttftBody(30, [4]float64{5, 5, 5, 5}, 5)
	if p := eval(add(stuck, stuck)); p.Value == nil || *p.Value != 1 || len(p.Latency) != 1 {
		t.Errorf("stuck window = %v %+v, want 1 (the SLO)", p.Value, p.Latency)
	}
}

// Engine states from crafted scrape sequences, and their effect: a wedged,
// frozen or sleeping pod counts at the unknown-pod saturation, a clipped one at
// least at it.
func TestEngineStates(t *testing.T) {
	c, err := NewCatalog(Policy{Name: "sat", Kind: KindDemand, UnknownSaturation: 1, QueueCap: 166, Terms: DefaultSetPoints().Terms()})
	if err != nil {
		t.Fatal(err)
	}
	seq := func(bodies ...string) *history.History {
		var h *history.History
		for i, b := range bodies {
			h = h.Append(read(t, b, t0.Add(time.Duration(i)*5*time.Second)), history.HistoryOptions{Needs: c.Needs()})
		}
		return h
	}
	counters := func(gen, fin float64) string {
		return "vllm:generation_tokens_total{engine=\"0\"} " + ftoa(gen) + "\nvllm:request_success_total{engine=\"0\",finished_reason=\"stop\"} " + ftoa(fin) + "\n"
	}
	tests := []struct {
		name  string
		h     *history.History
		state EngineState
		value float64
	}{
		{"ok", seq(vllm(40, 8, 0.5)+counters(100, 1), vllm(42, 8, 0.5)+counters(150, 2), vllm(41, 8, 0.5)+counters(200, 3)), StateOK, 41.0 / 5},
		// Requests wait, no token and nothing finished for three scrapes, yet the
		// queue moves: wedged, so it counts at 1.0 instead of pinning the pool at 60/5.
		{"wedged", seq(vllm(20, 8, 0.2)+counters(100, 5), vllm(40, 8, 0.2)+counters(100, 5), vllm(60, 7, 0.2)+counters(100, 5)), StateWedged, 1},
		// Everything identical, counters flat, requests "running": frozen.
		{"frozen", seq(vllm(3, 8, 0.5)+counters(100, 5), vllm(3, 8, 0.5)+counters(100, 5), vllm(3, 8, 0.5)+counters(100, 5)), StateFrozen, 1},
		{"sleeping", seq(vllm(0, 0, 0) + "vllm:engine_sleep_state{engine=\"0\",sleep_state=\"awake\"} 0\nvllm:engine_sleep_state{engine=\"0\",sleep_state=\"weights_offloaded\"} 1\n"), StateSleeping, 1},
		// NC-02: waiting + running = 150 + 16 = the 166 cap: clipped, counted at
		// least saturated; the queue term (30) already is.
		{"clipped at the cap", seq(string(testfixture.Read(t, "testdata/hazards/NC-02-t0.prom")), string(testfixture.Read(t, "testdata/hazards/NC-02-t1.prom"))), StateClipped, 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.h.Latest().At()
			rep := c.Lookup("sat").ExplainPod(tt.h, "", now, maxAge)
			if rep.State != tt.state {
				t.Errorf("state = %s (%+v), want %s", rep.State, rep.Engines, tt.state)
			}
			// With an idle, healthy pod beside it (saturation 0), the pool's demand
			// is what the pod counts for.
			b := c.Lookup("sat").NewPool(now, maxAge)
			v := b.Add(tt.h, "")
			b.Add(history.NewHistory(history.HistoryOptions{}, read(t, vllm(0, 1, 0), now)), "")
			if p := b.Pool(); p.Value == nil || !approx(*p.Value, tt.value) {
				t.Errorf("pool value = %v (pod %+v), want %g", deref(p.Value), v, tt.value)
			}
			// Alone, a pod that cannot serve is no data: the HPA holds.
			alone := c.Lookup("sat").NewPool(now, maxAge)
			alone.Add(tt.h, "")
			if p := alone.Pool(); tt.state.cannotServe() != (p.Value == nil) {
				t.Errorf("alone: value %v, want nil exactly when the pod cannot serve", deref(p.Value))
			}
		})
	}
	// Two scrapes are not "several": no state yet.
	h := seq(vllm(20, 8, 0.2)+counters(100, 5), vllm(40, 8, 0.2)+counters(100, 5))
	if rep := c.Lookup("sat").ExplainPod(h, "", h.Latest().At(), maxAge); rep.State != StateOK {
		t.Errorf("after two scrapes the state is %s, want ok", rep.State)
	}
}

// A clipped pod with rejections counts the demand it turned away:
// (finished + rejected) / finished, when both counters move.
func TestClippedLostDemand(t *testing.T) {
	c, err := NewCatalog(Policy{Name: "sat", Kind: KindDemand, UnknownSaturation: 1, Terms: []Term{{Kind: TermQueueDepth, SetPoint: 500}}})
	if err != nil {
		t.Fatal(err)
	}
	body := func(fin, rej float64) string {
		return vllm(150, 16, 0.4) + "vllm:request_success_total{engine=\"0\",finished_reason=\"stop\"} " + ftoa(fin) +
			"\nvllm:admission_rejections_total{model_name=\"m\",reason=\"max_num_queued_reqs\"} " + ftoa(rej) + "\n"
	}
	var h *history.History
	for i, x := range [][2]float64{{100, 0}, {110, 30}, {120, 60}} {
		h = h.Append(read(t, body(x[0], x[1]), t0.Add(time.Duration(i)*5*time.Second)), history.HistoryOptions{})
	}
	now := h.Latest().At()
	b := c.Lookup("sat").NewPool(now, maxAge)
	v := b.Add(h, "")
	// 20 finished and 60 rejected in the window: (20 + 60) / 20 = 4.
	if p := b.Pool(); v.State != StateClipped || p.Value == nil || !approx(*p.Value, 4) {
		t.Errorf("clipped pod = %v (%+v), want 4", p.Value, v)
	}
}

// A snapshot of aggregates computed elsewhere pools exactly as the scraped
// history with the same numbers does.
func TestSnapshotPoolsLikeHistory(t *testing.T) {
	c, err := NewCatalog(Policy{Name: "p", Kind: KindDemand, UnknownSaturation: 1, Terms: []Term{
		{Kind: TermQueueDepth, SetPoint: 5}, {Kind: TermPreemptionRate, SetPoint: 0.1, Window: time.Minute},
		{Kind: TermTTFT, SetPoint: 1, Quantile: 0.9, Window: time.Minute},
	}})
	if err != nil {
		t.Fatal(err)
	}
	o := history.HistoryOptions{Needs: c.Needs()}
	a := read(t, ttftBody(3, [4]float64{0, 0, 0, 0}, 0)+"vllm:num_preemptions_total{engine=\"0\"} 10\n", t0)
	b := read(t, ttftBody(3, [4]float64{2, 6, 10, 10}, 10)+"vllm:num_preemptions_total{engine=\"0\"} 16\n", t0.Add(30*time.Second))
	scraped := history.NewHistory(o, a, b)
	w := scraped.Window(history.WindowKey{Window: time.Minute})
	snap := history.NewSnapshot(b, []history.Window{{Key: history.WindowKey{Window: time.Minute}, Span: 30 * time.Second,
		Increases: increases(signals.Preemptions, 6), Histograms: w.Histograms}}, nil, o)
	now := b.At()
	for _, h := range []*history.History{scraped, snap} {
		pb := c.Lookup("p").NewPool(now, maxAge)
		pb.Add(h, "")
		p := pb.Pool()
		// Preemptions: 6 in 30 s = 0.2/s, 2 × the set point. TTFT p90 of 10 new
		// observations (cumulative 2, 6, 10 at 0.5, 1, 2.5 s): rank 9 lies in
		// (1, 2.5] holding ranks 6..10, so 1 + 1.5 × 3/4 = 2.125 s, 2.125 × the SLO,
		// which decides.
		if p.Value == nil || !approx(*p.Value, 2.125) {
			t.Errorf("pool = %v, want 2.125 (the TTFT guardrail over 1 pod)", deref(p.Value))
		}
	}
}

// NC-04: with flow control the backlog waits in the gateway. Two engines sit
// just under their set points (0.975 and 1.0) while the endpoint picker holds
// 352 + 28 requests for this pool: the gateway input adds 380 / 5 = 76
// replicas' worth of demand, and the mean reflects the same total.
func TestGatewayDemand(t *testing.T) {
	gw := &GatewayInput{Namespace: "llm", Selector: "app=epp", Match: map[string]string{"inference_pool": "qwen3-32b-pool"}}
	c, err := NewCatalog(
		Policy{Name: "gw-demand", Kind: KindDemand, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(), Gateway: gw},
		Policy{Name: "gw-mean", Kind: KindMean, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(), Gateway: gw},
	)
	if err != nil {
		t.Fatal(err)
	}
	if n := c.Needs(); len(n.GatewayMetrics) != 1 || n.GatewayMetrics[0] != signals.DefaultGatewayQueueMetric {
		t.Fatalf("needs %+v, want the default gateway metric", n)
	}
	e := signals.NewExtractorWith(signals.ExtractOptions{GatewayMetrics: c.Needs().GatewayMetrics})
	epp, err := e.Extract(testfixture.Read(t, "testdata/hazards/NC-04-epp.prom"))
	if err != nil || epp.Dialect != signals.DialectGateway {
		t.Fatalf("EPP body: %v %+v", err, epp)
	}
	pol := c.Lookup("gw-demand")
	q, err := pol.Gateway.Queue(&epp)
	if err != nil || q != 380 {
		t.Fatalf("gateway queue %g %v, want 380", q, err)
	}
	// Another pool's series are not this pool's.
	other := GatewayInput{Metric: signals.DefaultGatewayQueueMetric, Match: map[string]string{"inference_pool": "other"}}
	if q, err := other.Queue(&epp); err != nil || q != 0 {
		t.Errorf("another pool's queue = %g %v, want 0 (series exist, none match)", q, err)
	}
	// No series of the metric at all is no data, never 0.
	if _, err := pol.Gateway.Queue(read(t, vllm(1, 1, 0.1), t0)); err == nil {
		t.Error("a body without the gateway metric gave a queue")
	}
	pods := []*history.History{
		history.NewHistory(history.HistoryOptions{}, read(t, vllm(4, 8, 0.78), t0)),
		history.NewHistory(history.HistoryOptions{}, read(t, vllm(5, 8, 0.79), t0)),
	}
	eval := func(name string, pods []*history.History, gateway *float64) *float64 {
		b := c.Lookup(name).NewPool(t0, maxAge)
		for _, h := range pods {
			b.Add(h, "")
		}
		if gateway != nil {
			b.AddGateway(*gateway)
		}
		return b.Pool().Value
	}
	engines := 0.975 + 1.0
	if v := eval("gw-demand", pods, &q); v == nil || !approx(*v, engines+76) {
		t.Errorf("demand = %v, want %g", deref(v), engines+76)
	}
	if v := eval("gw-mean", pods, &q); v == nil || !approx(*v, (engines+76)/2) {
		t.Errorf("mean = %v, want %g", deref(v), (engines+76)/2)
	}
	// Zero pods: the gateway demand alone, so the HPA (ceil(value / target) at
	// zero replicas) wakes the pool on the first waiting request; no waiting
	// request is a legitimate 0.
	one, zero := 1.0, 0.0
	if v := eval("gw-demand", nil, &one); v == nil || *v != 0.2 {
		t.Errorf("zero pods, 1 waiting: demand %v, want 0.2", deref(v))
	}
	if v := eval("gw-mean", nil, &one); v == nil || *v != 0.2 {
		t.Errorf("zero pods, 1 waiting: mean %v, want 0.2", deref(v))
	}
	if v := eval("gw-demand", nil, &zero); v == nil || *v != 0 {
		t.Errorf("zero pods, nothing waiting: %v, want 0", deref(v))
	}
	// Zero pods without gateway data is no data.
	if v := eval("gw-demand", nil, nil); v != nil {
		t.Errorf("zero pods, no gateway reading: %g, want no value", *v)
	}
}

// TestIdleKVResidueIsNotDemand: an idle engine that still reports a few KV blocks
// in use (vLLM v1 up to 0.10 counts its null block: 1/76 on the emulator's 76
// blocks, 0.00118 on the nvcr 25.09 sample) serves exactly 0, so that an HPA
// with minReplicas 0 can scale to zero (ceil(0.016) would be 1 forever); one
// request running makes the same KV count again, and an engine that does not
// report running keeps its KV term.
func TestIdleKVResidueIsNotDemand(t *testing.T) {
	c := builtin(t, DefaultUnknownSaturation)
	idle := pod{readings: []*signals.Reading{read(t, vllm(0, 0, 1.0/76), t0)}}
	for _, name := range []string{MetricSaturation, MetricDemandReplicas} {
		if p := poolOf(t, c, name, t0, idle, idle); p.Value == nil || *p.Value != 0 {
			t.Errorf("%s of two idle pods = %v, want exactly 0", name, deref(p.Value))
		}
	}
	// The raw signal is still served as reported.
	if p := poolOf(t, c, MetricKVCacheUsage, t0, idle); p.Value == nil || !approx(*p.Value, 1.0/76) {
		t.Errorf("%s = %v, want the reported 1/76", MetricKVCacheUsage, deref(p.Value))
	}
	rep := c.Lookup(MetricSaturation).ExplainPod(idle.history(), "", t0, maxAge)
	var kv *TermValue
	for i := range rep.Terms {
		if rep.Terms[i].Term == TermKVCacheUsage {
			kv = &rep.Terms[i]
		}
	}
	if kv == nil || kv.Value != 0 || !strings.Contains(kv.Note, "not demand") {
		t.Errorf("explain's kvCacheUsage term = %+v, want 0 with a note saying why", kv)
	}
	busy := pod{readings: []*signals.Reading{read(t, vllm(0, 1, 1.0/76), t0)}}
	if p := poolOf(t, c, MetricSaturation, t0, busy); p.Value == nil || !approx(*p.Value, 1.0/76/DefaultSetPoints().KVCacheUsage) {
		t.Errorf("one running: %s = %v, want KV / set point", MetricSaturation, deref(p.Value))
	}
	waiting := pod{readings: []*signals.Reading{read(t, vllm(1, 0, 0.5), t0)}}
	if p := poolOf(t, c, MetricSaturation, t0, waiting); p.Value == nil || !approx(*p.Value, 0.5/DefaultSetPoints().KVCacheUsage) {
		t.Errorf("one waiting: %s = %v, want KV / set point", MetricSaturation, deref(p.Value))
	}
	noRunning := pod{readings: []*signals.Reading{read(t, "vllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.4\n", t0)}}
	if p := poolOf(t, c, MetricSaturation, t0, noRunning); p.Value == nil || !approx(*p.Value, 0.4/DefaultSetPoints().KVCacheUsage) {
		t.Errorf("running not reported: %s = %v, want KV / set point", MetricSaturation, deref(p.Value))
	}
}

// increases returns Values holding one counter increase.
func increases(s signals.Signal, v float64) signals.Values {
	var x signals.Values
	x.Set(s, v)
	return x
}

// everyTermCatalog is the built-in policies beside one with every term kind,
// as hack/benchscale's "every" runs.
func everyTermCatalog(tb testing.TB) *Catalog {
	tb.Helper()
	policies := append(BuiltinPolicies(DefaultSetPoints(), DefaultUnknownSaturation, DefaultHoldLastGood), Policy{
		Name: "every-term", Kind: KindMean, UnknownSaturation: 1, QueueCap: 1024, Terms: []Term{
			{Kind: TermQueueDepth, SetPoint: 4, MaxRatio: 10},
			{Kind: TermKVCacheUsage, SetPoint: 0.8},
			{Kind: TermBatchSlots, SetPoint: 0.9, MaxNumSeqs: 64},
			{Kind: TermPreemptionRate, SetPoint: 1, Window: 2 * time.Minute},
			{Kind: TermTTFT, SetPoint: 1.5, Quantile: 0.95, Window: time.Minute},
			{Kind: TermE2ELatency, SetPoint: 60, Quantile: 0.9, Window: 5 * time.Minute},
			{Kind: TermInterTokenLatency, SetPoint: 0.1, Quantile: 0.95, Window: time.Minute},
		}})
	c, err := NewCatalog(policies...)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// pkg/history's footprint benchmarks keep what everyTermCatalog needs as a
// literal (history cannot import policy): it must stay that catalog's Needs.
func TestEveryTermNeeds(t *testing.T) {
	want := history.Needs{Histograms: true, Windows: []history.WindowKey{{Window: 2 * time.Minute}, {Window: time.Minute}, {Window: 5 * time.Minute}}}
	if diff := cmp.Diff(want, everyTermCatalog(t).Needs()); diff != "" {
		t.Errorf("Needs (-pkg/history's everyTermNeeds +catalog):\n%s", diff)
	}
}
