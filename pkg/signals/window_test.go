package signals

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// computeWindowReference is the window aggregate with each pair's histogram
// difference built by Since, then cloned or added (as History did before
// addSince): the reference computeWindow is held to, bit for bit.
func computeWindowReference(rs []*Reading, k WindowKey) windowAgg {
	a := windowAgg{key: k}
	last := rs[len(rs)-1]
	start := last.At().Add(-k.Window)
	i0 := len(rs) - 1
	for i := len(rs) - 2; i >= 0 && !rs[i].At().Before(start); i-- {
		i0 = i
	}
	if i0 == len(rs)-1 {
		return a
	}
	a.ok, a.span = true, last.At().Sub(rs[i0].At())
	for j := i0 + 1; j < len(rs); j++ {
		cur, prev := rs[j], rs[j-1]
		keep := engineFilter(cur, k.Model)
		for ei := range cur.Engines {
			e := &cur.Engines[ei]
			if keep != nil && !keep(e) {
				continue
			}
			pe := findEngine(prev, e.ID)
			if pe == nil {
				continue
			}
			for s := range numSignals {
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
					a.resets++
				}
				a.inc.v[s] += d
				a.inc.has |= 1 << s
			}
			for hk := range numHistos {
				if e.Hist[hk] == nil || pe.Hist[hk] == nil {
					continue
				}
				d, reset, approx := e.Hist[hk].Since(pe.Hist[hk])
				if reset {
					a.resets++
				}
				a.approx = a.approx || approx
				switch {
				case a.hist[hk] == nil:
					a.hist[hk] = d.clone()
				case !a.hist[hk].addInPlace(d):
					a.hist[hk] = a.hist[hk].Add(d)
				}
			}
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
		counters [numSignals]float64
		hist     [numHistos]*Histogram
		model    string
	}
	states := map[string]*engineState{"0": {model: "a"}, "1": {model: "b"}}
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var h *History
	for i := range 400 {
		at = at.Add(time.Duration(500+rng.IntN(3000)) * time.Millisecond)
		r := &Reading{Dialect: "vllm-v1", Time: at}
		for _, id := range []string{"0", "1"} {
			if one(miss) {
				continue // the engine is missing from this scrape
			}
			st := states[id]
			if miss > 0 {
				st.model = []string{"a", "b"}[rng.IntN(2)]
			}
			e := EngineSignals{ID: id, Model: st.model}
			for s := range numSignals {
				if !s.IsCounter() {
					continue
				}
				if one(restart) {
					st.counters[s] = 0
				}
				st.counters[s] += math.Floor(rng.Float64() * 50)
				if !one(miss) {
					e.set(s, st.counters[s])
				}
			}
			for hk := range numHistos {
				next := nextHistogram(rng, one, st.hist[hk], restart, relayout, idle)
				st.hist[hk] = next
				if !one(miss) {
					e.Hist[hk] = next
				}
			}
			r.Engines = append(r.Engines, e)
		}
		h = h.Append(r, o)
		for k := 1; k < len(h.readings); k++ {
			if want := smoothPair(h.readings[k-1], h.readings[k]); h.smooth[k] != want {
				t.Fatalf("reading %d: smooth[%d] = %v, smoothPair says %v", i, k, h.smooth[k], want)
			}
		}
		for k, key := range o.Needs.Windows {
			want := computeWindowReference(h.readings, key)
			if got := h.windows[k]; !sameWindow(got, want) {
				t.Fatalf("reading %d, window %+v: computeWindow %+v, reference %+v", i, key, got, want)
			}
			if want.resets > 0 {
				resets++
			}
			if want.approx {
				approx++
			}
			if want.hist[TTFT] != nil {
				hists++
				if want.span > 0 && allSmooth(h, key) {
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
func nextHistogram(rng *rand.Rand, one func(int) bool, prev *Histogram, restart, relayout, idle int) *Histogram {
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
	next := &Histogram{Bounds: bounds, Counts: make([]float64, len(bounds))}
	if prev != nil && !one(restart) {
		copy(next.Counts, prev.onto(bounds))
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
func sameWindow(a, b windowAgg) bool {
	if a.key != b.key || a.ok != b.ok || a.span != b.span || a.resets != b.resets || a.approx != b.approx || a.inc.has != b.inc.has {
		return false
	}
	for s := range numSignals {
		if math.Float64bits(a.inc.v[s]) != math.Float64bits(b.inc.v[s]) {
			return false
		}
	}
	for hk := range numHistos {
		if !sameBits(a.hist[hk], b.hist[hk]) {
			return false
		}
	}
	return true
}

// TestSmoothPairBounds checks the readings whose sums of counts could leave
// float64's whole numbers, or whose engines pair ambiguously, are never smooth.
func TestSmoothPairBounds(t *testing.T) {
	hist := func() *Histogram { return &Histogram{Bounds: []float64{1, 2}, Counts: []float64{1, 2}, Count: 2} }
	reading := func(ids ...string) *Reading {
		r := &Reading{}
		for _, id := range ids {
			e := EngineSignals{ID: id}
			e.Hist[TTFT] = hist()
			r.Engines = append(r.Engines, e)
		}
		return r
	}
	many := make([]string, maxSmoothEngines+1)
	for i := range many {
		many[i] = fmt.Sprintf("%04d", i)
	}
	big := reading("0")
	big.Engines[0].Hist[TTFT].Counts[1] = maxWhole
	for _, tc := range []struct {
		name      string
		prev, cur *Reading
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
