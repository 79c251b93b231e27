package signals

import (
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
// the reference.
func TestComputeWindowMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 2026))
	layouts := [][]float64{{0.1, 0.5, 1, 5}, {0.1, 0.25, 0.5, 1, 5}}
	o := HistoryOptions{Needs: Needs{Histograms: true, Windows: []WindowKey{
		{Window: 30 * time.Second}, {Window: time.Minute}, {Window: time.Minute, Model: "a"}, {Window: 5 * time.Minute}, {Window: 5 * time.Minute, Model: "b"},
	}}}
	type engineState struct {
		counters [numSignals]float64
		hist     [numHistos]*Histogram
	}
	states := map[string]*engineState{"0": {}, "1": {}}
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var h *History
	var resets, approx, hists int
	for i := range 400 {
		at = at.Add(time.Duration(500+rng.IntN(3000)) * time.Millisecond)
		r := &Reading{Dialect: "vllm-v1", Time: at}
		for _, id := range []string{"0", "1"} {
			if rng.IntN(10) == 0 {
				continue // the engine is missing from this scrape
			}
			st := states[id]
			e := EngineSignals{ID: id, Model: []string{"a", "b"}[rng.IntN(2)]}
			for s := range numSignals {
				if !s.IsCounter() {
					continue
				}
				if rng.IntN(30) == 0 {
					st.counters[s] = 0 // a restart
				}
				st.counters[s] += math.Floor(rng.Float64() * 50)
				if rng.IntN(8) != 0 {
					e.set(s, st.counters[s])
				}
			}
			for hk := range numHistos {
				prev := st.hist[hk]
				bounds := layouts[0]
				if prev != nil && rng.IntN(25) != 0 {
					bounds = prev.Bounds
				} else if rng.IntN(2) == 0 {
					bounds = layouts[1]
				}
				next := &Histogram{Bounds: bounds, Counts: make([]float64, len(bounds))}
				if prev != nil && rng.IntN(30) != 0 {
					base := prev.onto(bounds)
					copy(next.Counts, base)
					next.Count, next.Sum = prev.Count, prev.Sum
				}
				run := 0.0
				for b := range next.Counts {
					run += math.Floor(rng.Float64() * 4)
					next.Counts[b] = math.Max(next.Counts[b], 0) + run
					if b > 0 {
						next.Counts[b] = math.Max(next.Counts[b], next.Counts[b-1])
					}
				}
				next.Count = math.Max(next.Count+run+math.Floor(rng.Float64()*3), next.Counts[len(next.Counts)-1])
				next.Sum += rng.Float64() * 0.37
				st.hist[hk] = next
				if rng.IntN(10) != 0 {
					e.Hist[hk] = next
				}
			}
			r.Engines = append(r.Engines, e)
		}
		h = h.Append(r, o)
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
			}
		}
	}
	if resets == 0 || approx == 0 || hists == 0 {
		t.Errorf("the sequence exercised %d windows with resets, %d with layout changes, %d with histograms; want each", resets, approx, hists)
	}
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
