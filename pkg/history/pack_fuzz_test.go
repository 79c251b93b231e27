package history

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// FuzzCompactHistory: a compact History (histograms of older readings held
// as packs) and a plain one, appended the same readings, agree after every
// append: the same readings (the compact one's histograms rebuilt bit for
// bit), smooth flags (each equal to smoothPair of its pair), engine facts,
// window aggregates (every field, floats bit for bit) and Window of a key
// neither precomputes. The readings: up to three engines that come and go
// and change model, counters that grow and reset, histograms that grow,
// restart, change layout, stand still, hold counts that are not whole or
// not below maxWhole; scrape times that are irregular, repeat (the newest
// is replaced) or jump (the history is pruned); MaxReadings from 8 to 31
// (older readings thinned); and, one append in reload, the policies
// reloaded without any window (a compact History unpacks) or back.
func FuzzCompactHistory(f *testing.F) {
	f.Add(uint64(1), uint8(30), uint8(25), uint8(10), uint8(3), uint8(0), uint8(0), uint8(0), uint8(24), uint16(300))
	f.Add(uint64(2), uint8(0), uint8(0), uint8(0), uint8(3), uint8(0), uint8(0), uint8(0), uint8(8), uint16(300))
	f.Add(uint64(3), uint8(0), uint8(0), uint8(0), uint8(0), uint8(7), uint8(5), uint8(0), uint8(12), uint16(200))
	f.Add(uint64(4), uint8(40), uint8(0), uint8(20), uint8(2), uint8(9), uint8(11), uint8(0), uint8(10), uint16(400))
	f.Add(uint64(5), uint8(0), uint8(0), uint8(0), uint8(3), uint8(0), uint8(0), uint8(15), uint8(24), uint16(400))
	f.Fuzz(func(t *testing.T, seed uint64, restart, relayout, miss, idle, odd, repeat, reload, maxReadings uint8, n uint16) {
		rng := rand.New(rand.NewPCG(seed, 22))
		one := func(n uint8) bool { return n > 0 && rng.IntN(int(n)) == 0 }
		needs := Needs{Histograms: true, Windows: []WindowKey{
			{Window: 20 * time.Second}, {Window: time.Minute, Model: "a"}, {Window: 2 * time.Minute},
		}}
		compact := HistoryOptions{Needs: needs, MaxReadings: 8 + int(maxReadings%24)}
		plain := compact
		plain.plain = true
		extra := WindowKey{Window: 45 * time.Second, Model: "b"}
		type engineState struct {
			counters [signals.NumSignals]float64
			hist     [signals.NumHistos]*signals.Histogram
			model    string
		}
		states := map[string]*engineState{"0": {model: "a"}, "1": {model: "b"}, "2": {model: "a"}}
		at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
		var hc, hp *History
		for i := range int(n % 600) {
			if one(reload) {
				if len(compact.Needs.Windows) > 0 {
					compact.Needs = Needs{}
				} else {
					compact.Needs = needs
				}
				plain.Needs = compact.Needs
			}
			switch {
			case one(repeat):
				// Not newer: replaces the newest reading.
			case one(repeat):
				at = at.Add(3 * time.Minute)
			default:
				at = at.Add(time.Duration(500+rng.IntN(4000)) * time.Millisecond)
			}
			r := &signals.Reading{Dialect: "vllm-v1", Time: at}
			for _, id := range []string{"0", "1", "2"} {
				if one(miss) || (id == "2" && rng.IntN(2) == 0 && miss > 0) {
					continue
				}
				st := states[id]
				if one(miss) {
					st.model = []string{"a", "b"}[rng.IntN(2)]
				}
				e := signals.EngineSignals{ID: id, Model: st.model}
				e.Set(signals.QueueDepth, float64(rng.IntN(5)))
				e.Set(signals.Running, float64(rng.IntN(5)))
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
					next := nextHistogram(rng, func(n int) bool { return n > 0 && rng.IntN(n) == 0 }, st.hist[hk], int(restart), int(relayout), int(idle))
					if one(odd) {
						next = oddHistogram(rng, next)
					}
					st.hist[hk] = next
					if !one(miss) {
						e.Hist[hk] = next
					}
				}
				r.Engines = append(r.Engines, e)
			}
			r.Fold = signals.FoldEngines(r.Engines, nil)
			hc, hp = hc.Append(r, compact), hp.Append(r, plain)
			compareHistories(t, i, hc, hp, extra)
		}
	})
}

// oddHistogram returns a copy of h whose counts are not whole (half an
// observation more in each) or, one time in two, not below maxWhole.
func oddHistogram(rng *rand.Rand, h *signals.Histogram) *signals.Histogram {
	o := h.Clone()
	add := 0.5
	if rng.IntN(2) == 0 {
		add = maxWhole
	}
	for b := range o.Counts {
		o.Counts[b] += add
	}
	o.Count += add
	return o
}

// compareHistories fails unless compact (a compact History) and plain (a
// plain one, appended the same readings) agree: see FuzzCompactHistory.
func compareHistories(t *testing.T, i int, compact, plain *History, extra WindowKey) {
	t.Helper()
	if compact.opts.Needs.Windows == nil && compact.packs != nil {
		t.Fatalf("append %d: packs kept without any window", i)
	}
	full := fullReadings(compact)
	if len(full) != len(plain.readings) {
		t.Fatalf("append %d: %d readings, plain %d", i, len(full), len(plain.readings))
	}
	for k := range full {
		if !sameReading(full[k], plain.readings[k]) {
			t.Fatalf("append %d: reading %d rebuilt differs from the plain one", i, k)
		}
		if k > 0 && compact.smooth != nil && compact.smooth[k] != smoothPair(full[k-1], full[k]) {
			t.Fatalf("append %d: smooth[%d] = %v, smoothPair says otherwise", i, k, compact.smooth[k])
		}
	}
	if !slices.Equal(compact.smooth, plain.smooth) {
		t.Fatalf("append %d: smooth %v, plain %v", i, compact.smooth, plain.smooth)
	}
	if !reflect.DeepEqual(compact.facts, plain.facts) {
		t.Fatalf("append %d: facts %+v, plain %+v", i, compact.facts, plain.facts)
	}
	if compact.packs != nil && compact.PackedBytes() == 0 && slices.ContainsFunc(compact.packs, isPack) {
		t.Fatalf("append %d: packs held but PackedBytes is 0", i)
	}
	for k := range plain.windows {
		if !sameWindowAll(compact.windows[k], plain.windows[k]) {
			t.Fatalf("append %d, window %+v:\ncompact %+v\nplain   %+v", i, plain.windows[k].Key, compact.windows[k], plain.windows[k])
		}
	}
	if c, p := compact.Window(extra), plain.Window(extra); !sameWindowAll(c, p) {
		t.Fatalf("append %d, window %+v:\ncompact %+v\nplain   %+v", i, extra, c, p)
	}
}

// sameWindowAll is sameWindow with the fields it leaves out: Inconsistent,
// HeldChange (bit for bit) and HeldKnown.
func sameWindowAll(a, b Window) bool {
	return sameWindow(a, b) && a.Inconsistent == b.Inconsistent && a.HeldKnown == b.HeldKnown &&
		math.Float64bits(a.HeldChange) == math.Float64bits(b.HeldChange)
}

// sameReading reports whether a rebuilt reading equals the plain one: the
// same time, engines, values and engine histograms (floats bit for bit).
func sameReading(a, b *signals.Reading) bool {
	if !a.Time.Equal(b.Time) || len(a.Engines) != len(b.Engines) || a.Values != b.Values {
		return false
	}
	for i := range a.Engines {
		x, y := &a.Engines[i], &b.Engines[i]
		if x.ID != y.ID || x.Model != y.Model || x.Backend != y.Backend || x.Values != y.Values {
			return false
		}
		for hk := range signals.NumHistos {
			if !sameBits(x.Hist[hk], y.Hist[hk]) {
				return false
			}
		}
	}
	return true
}
