package history

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// computeWindowReference is the window aggregate with each pair's histogram
// difference built by Since, then cloned or added (as History did before
// addSince): the reference computeWindow is held to, bit for bit. A pair
// whose bucket fell while its count did not (same layout) is inconsistent
// (issue 19): that histogram's window is dropped, not counted as a reset.
func computeWindowReference(rs []*signals.Reading, k WindowKey) Window {
	a := Window{Key: k}
	last := rs[len(rs)-1]
	start := last.At().Add(-k.Window)
	i0 := len(rs) - 1
	for i := len(rs) - 2; i >= 0 && !rs[i].At().Before(start); i-- {
		i0 = i
	}
	if i0 == len(rs)-1 {
		return a
	}
	a.OK, a.Span = true, last.At().Sub(rs[i0].At())
	for j := i0 + 1; j < len(rs); j++ {
		cur, prev := rs[j], rs[j-1]
		keep := signals.EngineFilter(cur, k.Model)
		for ei := range cur.Engines {
			e := &cur.Engines[ei]
			if keep != nil && !keep(e) {
				continue
			}
			pe := signals.FindEngine(prev, e.ID)
			if pe == nil {
				continue
			}
			for s := range signals.NumSignals {
				if !s.IsCounter() {
					continue
				}
				v, ok := e.Value(s)
				pv, pok := pe.Value(s)
				if !ok || !pok {
					continue
				}
				d := v - pv
				if d < 0 {
					d = v
					a.Resets++
				}
				a.Increases.Add(s, d)
			}
			for hk := range signals.NumHistos {
				if e.Hist[hk] == nil || pe.Hist[hk] == nil {
					continue
				}
				if h, o := e.Hist[hk], pe.Hist[hk]; h.Count >= o.Count && signals.SameLayout(h, o) {
					fell := false
					for i := range h.Counts {
						fell = fell || h.Counts[i] < o.Counts[i]
					}
					if fell {
						a.Inconsistent[hk] = true
						continue
					}
				}
				d, reset, approx := e.Hist[hk].Since(pe.Hist[hk])
				if reset {
					a.Resets++
				}
				a.Approx = a.Approx || approx
				switch {
				case a.Histograms[hk] == nil:
					a.Histograms[hk] = d.Clone()
				case !a.Histograms[hk].AddInPlace(d):
					a.Histograms[hk] = a.Histograms[hk].Add(d)
				}
			}
		}
	}
	for hk := range signals.NumHistos {
		if a.Inconsistent[hk] {
			a.Histograms[hk] = nil
		}
	}
	return a
}

// TestComputeWindowMatchesReference appends 400 random readings (two engines
// that come and go, two models, counters that grow and reset, histograms that
// grow, reset and change layout, irregular scrape times) and compares every
// History's window aggregates, for windows of several lengths and models, with
// the reference; then the same for a steady engine whose windows are smooth
// (the telescoped fast path), and checks the smooth flags History carries over
// against smoothPair.
func TestComputeWindowMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		name                          string
		restart, relayout, miss, idle int // one in n readings; 0: never
		wantFast                      bool
	}{
		{name: "churn", restart: 30, relayout: 25, miss: 10},
		{name: "steady", idle: 3, wantFast: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resets, approx, hists, fast := checkWindows(t, tc.restart, tc.relayout, tc.miss, tc.idle)
			if tc.wantFast && fast == 0 {
				t.Errorf("no smooth window: the fast path was not exercised")
			}
			if !tc.wantFast && (resets == 0 || approx == 0 || hists == 0) {
				t.Errorf("the sequence exercised %d windows with resets, %d with layout changes, %d with histograms; want each", resets, approx, hists)
			}
		})
	}
}

// checkWindows appends random readings (see TestComputeWindowMatchesReference;
// one in restart readings restarts an engine's counters, one in relayout
// changes a histogram's layout, one in miss drops an engine or a series, one
// in idle repeats the previous histogram) and counts the windows seen with
// resets, with interpolated layouts, with histograms and smooth throughout.
func checkWindows(t *testing.T, restart, relayout, miss, idle int) (resets, approx, hists, fast int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(13, 2026))
	one := func(n int) bool { return n > 0 && rng.IntN(n) == 0 }
	o := HistoryOptions{Needs: Needs{Histograms: true, Windows: []WindowKey{
		{Window: 30 * time.Second}, {Window: time.Minute}, {Window: time.Minute, Model: "a"}, {Window: 5 * time.Minute}, {Window: 5 * time.Minute, Model: "b"},
	}}}
	type engineState struct {
		counters [signals.NumSignals]float64
		hist     [signals.NumHistos]*signals.Histogram
		model    string
	}
	states := map[string]*engineState{"0": {model: "a"}, "1": {model: "b"}}
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var h *History
	for i := range 400 {
		at = at.Add(time.Duration(500+rng.IntN(3000)) * time.Millisecond)
		r := &signals.Reading{Dialect: "vllm-v1", Time: at}
		for _, id := range []string{"0", "1"} {
			if one(miss) {
				continue // the engine is missing from this scrape
			}
			st := states[id]
			if miss > 0 {
				st.model = []string{"a", "b"}[rng.IntN(2)]
			}
			e := signals.EngineSignals{ID: id, Model: st.model}
			for s := range signals.NumSignals {
				if !s.IsCounter() {
					continue
				}
				if one(restart) {
					st.counters[s] = 0
				}
				st.counters[s] += math.Floor(rng.Float64() * 50)
				if !one(miss) {
					e.Set(s, st.counters[s])
				}
			}
			for hk := range signals.NumHistos {
				next := nextHistogram(rng, one, st.hist[hk], restart, relayout, idle)
				st.hist[hk] = next
				if !one(miss) {
					e.Hist[hk] = next
				}
			}
			r.Engines = append(r.Engines, e)
		}
		h = h.Append(r, o)
		full := fullReadings(h)
		for k := 1; k < len(full); k++ {
			if want := smoothPair(full[k-1], full[k]); h.smooth[k] != want {
				t.Fatalf("reading %d: smooth[%d] = %v, smoothPair says %v", i, k, h.smooth[k], want)
			}
		}
		for k, key := range o.Needs.Windows {
			want := computeWindowReference(full, key)
			if got := h.windows[k]; !sameWindow(got, want) {
				t.Fatalf("reading %d, window %+v: computeWindow %+v, reference %+v", i, key, got, want)
			}
			if want.Resets > 0 {
				resets++
			}
			if want.Approx {
				approx++
			}
			if want.Histograms[signals.TTFT] != nil {
				hists++
				if want.Span > 0 && allSmooth(h, key) {
					fast++
				}
			}
		}
	}
	return resets, approx, hists, fast
}

// nextHistogram returns an engine's next cumulative histogram after prev (nil:
// none yet) for checkWindows: prev itself one in idle readings, else prev
// grown by random whole observations, on the other layout one in relayout
// readings and restarted from zero one in restart (one(n) draws those odds).
func nextHistogram(rng *rand.Rand, one func(int) bool, prev *signals.Histogram, restart, relayout, idle int) *signals.Histogram {
	if prev != nil && one(idle) {
		return prev
	}
	layouts := [][]float64{{0.1, 0.5, 1, 5}, {0.1, 0.25, 0.5, 1, 5}}
	bounds := layouts[0]
	if prev != nil && !one(relayout) {
		bounds = prev.Bounds
	} else if relayout > 0 && rng.IntN(2) == 0 {
		bounds = layouts[1]
	}
	next := &signals.Histogram{Bounds: bounds, Counts: make([]float64, len(bounds))}
	if prev != nil && !one(restart) {
		copy(next.Counts, prev.Onto(bounds))
		next.Count, next.Sum = prev.Count, prev.Sum
	}
	run := 0.0
	for b := range next.Counts {
		run += math.Floor(rng.Float64() * 4)
		next.Counts[b] += run
		if b > 0 {
			next.Counts[b] = math.Max(next.Counts[b], next.Counts[b-1])
		}
	}
	next.Count = math.Max(next.Count+run+math.Floor(rng.Float64()*3), next.Counts[len(next.Counts)-1])
	next.Sum += rng.Float64() * 0.37
	return next
}

// fullReadings returns h's readings, the packed ones with their histograms
// rebuilt.
func fullReadings(h *History) []*signals.Reading {
	if h.packs == nil {
		return h.readings
	}
	return materialize(h.readings, h.packs, 0)
}

// allSmooth reports whether every pair in key's window of h is smooth.
func allSmooth(h *History, key WindowKey) bool {
	last := h.readings[len(h.readings)-1]
	for j := len(h.readings) - 1; j > 0 && !h.readings[j-1].At().Before(last.At().Add(-key.Window)); j-- {
		if !h.smooth[j] {
			return false
		}
	}
	return true
}

// sameWindow reports whether two aggregates are equal, floats bit for bit.
func sameWindow(a, b Window) bool {
	if a.Key != b.Key || a.OK != b.OK || a.Span != b.Span || a.Resets != b.Resets || a.Approx != b.Approx {
		return false
	}
	for s := range signals.NumSignals {
		av, aok := a.Increases.Value(s)
		bv, bok := b.Increases.Value(s)
		if aok != bok || math.Float64bits(av) != math.Float64bits(bv) {
			return false
		}
	}
	for hk := range signals.NumHistos {
		if !sameBits(a.Histograms[hk], b.Histograms[hk]) {
			return false
		}
	}
	return true
}

// TestSmoothPairBounds checks the readings whose sums of counts could leave
// float64's whole numbers, or whose engines pair ambiguously, are never smooth.
func TestSmoothPairBounds(t *testing.T) {
	hist := func() *signals.Histogram {
		return &signals.Histogram{Bounds: []float64{1, 2}, Counts: []float64{1, 2}, Count: 2}
	}
	reading := func(ids ...string) *signals.Reading {
		r := &signals.Reading{}
		for _, id := range ids {
			e := signals.EngineSignals{ID: id}
			e.Hist[signals.TTFT] = hist()
			r.Engines = append(r.Engines, e)
		}
		return r
	}
	many := make([]string, maxSmoothEngines+1)
	for i := range many {
		many[i] = fmt.Sprintf("%04d", i)
	}
	big := reading("0")
	big.Engines[0].Hist[signals.TTFT].Counts[1] = maxWhole
	for _, tc := range []struct {
		name      string
		prev, cur *signals.Reading
		want      bool
	}{
		{"steady", reading("0", "1"), reading("0", "1"), true},
		{"too many engines", reading(many...), reading(many...), false},
		{"count at maxWhole", reading("0"), big, false},
		{"duplicate IDs", reading("0", "0"), reading("0", "0"), false},
		{"engine gone", reading("0", "1"), reading("0"), false},
	} {
		if got := smoothPair(tc.prev, tc.cur); got != tc.want {
			t.Errorf("%s: smoothPair = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A reading of increases becomes the window aggregate of the engines its model
// selects; counters only, histograms as observed.
func TestWindowOf(t *testing.T) {
	e := signals.NewExtractor()
	l := func(kv ...string) labels.Labels { return labels.FromStrings(kv...) }
	r, err := e.ExtractSamples([]signals.Sample{
		{Labels: l("__name__", "vllm:num_requests_waiting", "engine", "0", "model_name", "a"), Value: 3},
		{Labels: l("__name__", "vllm:num_requests_waiting", "engine", "1", "model_name", "b"), Value: 3},
		{Labels: l("__name__", "vllm:num_preemptions_total", "engine", "0", "model_name", "a"), Value: 6},
		{Labels: l("__name__", "vllm:num_preemptions_total", "engine", "1", "model_name", "b"), Value: 4},
		{Labels: l("__name__", "vllm:time_to_first_token_seconds_bucket", "engine", "0", "model_name", "a", "le", "1"), Value: 2},
		{Labels: l("__name__", "vllm:time_to_first_token_seconds_bucket", "engine", "0", "model_name", "a", "le", "+Inf"), Value: 5},
	})
	if err != nil {
		t.Fatal(err)
	}
	all := WindowOf(WindowKey{Window: time.Minute}, time.Minute, &r)
	if all.Span != time.Minute || !hasOnly(all.Increases, signals.Preemptions, 10) {
		t.Errorf("all engines: %+v, want 10 preemptions over 1m and no gauge", all)
	}
	if h := all.Histograms[signals.TTFT]; h == nil || h.Count != 5 || h.Counts[0] != 2 {
		t.Errorf("TTFT observations %+v, want 5 with 2 at or below 1s", h)
	}
	b := WindowOf(WindowKey{Window: time.Minute, Model: "b"}, time.Minute, &r)
	if !hasOnly(b.Increases, signals.Preemptions, 4) || b.Histograms[signals.TTFT] != nil {
		t.Errorf("model b: %+v, want 4 preemptions and no TTFT", b)
	}
	none := WindowOf(WindowKey{Window: time.Minute, Model: "c"}, time.Minute, &r)
	if none.Span != 0 {
		t.Errorf("no engine of model c: span %s, want 0 (no data)", none.Span)
	}
}

// addSince must aggregate a window exactly as Since, clone and addInPlace (or
// Add) did, bit for bit, whichever path it takes: in place, or through Since
// on a reset, a count that went down, a layout change between the scrapes or
// an aggregate of another layout.
func TestAddSinceMatchesSince(t *testing.T) {
	a := []float64{0.1, 0.5, 1}
	b := []float64{0.1, 0.25, 0.5, 1}
	seqs := map[string][]*signals.Histogram{
		"steady":           {hist(a, []float64{1, 2, 3}, 4, 0.7), hist(a, []float64{1.5, 2.5, 3.25}, 4.5, 0.9), hist(a, []float64{2, 4, 5}, 7, 1.3)},
		"bucket went down": {hist(a, []float64{1, 2, 3}, 4, 0.7), hist(a, []float64{1, 1, 3}, 5, 0.9), hist(a, []float64{2, 2, 4}, 6, 1.1)},
		"count went down":  {hist(a, []float64{1, 2, 3}, 4, 0.7), hist(a, []float64{0, 1, 1}, 2, 0.2), hist(a, []float64{1, 1, 2}, 3, 0.3)},
		"sum went down":    {hist(a, []float64{1, 2, 3}, 4, 0.7), hist(a, []float64{1, 2, 4}, 5, 0.1)},
		"layout changed":   {hist(a, []float64{1, 2, 3}, 4, 0.7), hist(b, []float64{1, 2, 3, 4}, 5, 0.9), hist(b, []float64{2, 3, 4, 6}, 7, 1.2)},
		"layout changed back": {hist(a, []float64{1, 2, 3}, 4, 0.7), hist(a, []float64{2, 3, 4}, 5, 0.8), hist(b, []float64{2, 3, 4, 5}, 6, 0.9),
			hist(b, []float64{3, 4, 5, 6}, 7, 1.0), hist(a, []float64{4, 5, 6}, 8, 1.1)},
		"negative zero": {hist(a, []float64{math.Copysign(0, -1), 1, 2}, 2, 0.5), hist(a, []float64{0, 1, 2}, 2, 0.5)},
	}
	for name, seq := range seqs {
		t.Run(name, func(t *testing.T) {
			var want, got *signals.Histogram
			var wantResets, gotResets int
			var wantApprox, gotApprox bool
			for i := 1; i < len(seq); i++ {
				d, reset, approx := seq[i].Since(seq[i-1])
				switch {
				case want == nil:
					want = d.Clone()
				case !want.AddInPlace(d):
					want = want.Add(d)
				}
				if reset {
					wantResets++
				}
				wantApprox = wantApprox || approx
				reset, approx = addSince(&got, seq[i], seq[i-1])
				if reset {
					gotResets++
				}
				gotApprox = gotApprox || approx
			}
			if !sameBits(want, got) || wantResets != gotResets || wantApprox != gotApprox {
				t.Errorf("addSince: %+v, %d resets, approx %v; Since, clone, addInPlace: %+v, %d resets, approx %v",
					got, gotResets, gotApprox, want, wantResets, wantApprox)
			}
			for _, h := range seq {
				checkHistogram(t, h) // the inputs are not modified: still cumulative
			}
		})
	}
}

// sameBits reports whether two histograms hold the same floats, bit for bit.
func sameBits(a, b *signals.Histogram) bool {
	if a == nil || b == nil {
		return a == b
	}
	eq := func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) }
	if !eq(a.Count, b.Count) || !eq(a.Sum, b.Sum) || len(a.Bounds) != len(b.Bounds) || len(a.Counts) != len(b.Counts) {
		return false
	}
	for i := range a.Counts {
		if !eq(a.Counts[i], b.Counts[i]) || !eq(a.Bounds[i], b.Bounds[i]) {
			return false
		}
	}
	return true
}

// hasOnly reports whether v holds exactly one signal, s, with value want.
func hasOnly(v signals.Values, s signals.Signal, want float64) bool {
	for x := range signals.NumSignals {
		got, ok := v.Value(x)
		if ok != (x == s) || (ok && got != want) {
			return false
		}
	}
	return true
}

func hist(bounds []float64, counts []float64, count, sum float64) *signals.Histogram {
	return &signals.Histogram{Bounds: bounds, Counts: counts, Count: count, Sum: sum}
}

// checkHistogram asserts that h is cumulative with finite ascending bounds.
func checkHistogram(t *testing.T, h *signals.Histogram) {
	t.Helper()
	prev := 0.0
	for i, c := range h.Counts {
		if math.IsNaN(c) || c < prev || c > h.Count || math.IsInf(h.Bounds[i], 0) || (i > 0 && h.Bounds[i] <= h.Bounds[i-1]) {
			t.Fatalf("histogram %+v is not cumulative with finite ascending bounds", h)
		}
		prev = c
	}
}
