package policy

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/internal/testfixture"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// FuzzPool: whatever the bodies, every policy's pool value is nil (no data) or
// a finite number >= 0; a pool with no known pod is nil, never 0.
func FuzzPool(f *testing.F) {
	for _, b := range testfixture.Bodies(f) {
		f.Add(b, "")
	}
	e := signals.NewExtractor()
	c, err := NewCatalog(append(BuiltinPolicies(DefaultSetPoints(), 1, time.Minute),
		Policy{Name: "all", Kind: KindDemand, UnknownSaturation: 1, QueueCap: 100, Terms: []Term{
			{Kind: TermQueueDepth, SetPoint: 0.001, MaxRatio: 1e6}, {Kind: TermKVCacheUsage, SetPoint: 0.001},
			{Kind: TermBatchSlots, SetPoint: 0.5, MaxNumSeqs: 4}, {Kind: TermPreemptionRate, SetPoint: 0.001},
			{Kind: TermTTFT, SetPoint: 0.001}, {Kind: TermE2ELatency, SetPoint: 1}, {Kind: TermInterTokenLatency, SetPoint: 1},
		}})...)
	if err != nil {
		f.Fatal(err)
	}
	opts := history.HistoryOptions{Needs: c.Needs()}
	f.Fuzz(func(t *testing.T, body []byte, _ string) {
		// The body split in two scrapes of one pod, 2 s apart, beside a dark pod.
		half := strings.SplitAfterN(string(body), "\n", 2)
		var h *history.History
		for i, part := range half {
			r, err := e.Extract([]byte(part))
			if err != nil {
				continue
			}
			r.Time = t0.Add(time.Duration(i) * 2 * time.Second)
			h = h.Append(&r, opts)
		}
		now := t0.Add(2 * time.Second)
		for _, p := range c.Policies() {
			b := p.NewPool(now, maxAge)
			b.Add(h, "")
			b.Add(nil, "not scraped yet")
			pool := b.Pool()
			if pool.Value == nil {
				continue
			}
			if v := *pool.Value; math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Fatalf("%s = %g", p.Name, v)
			}
			if pool.Known == 0 {
				t.Fatalf("%s = %g with no known pod", p.Name, *pool.Value)
			}
		}
	})
}

// FuzzTrend: whatever the sequence of requests (times may repeat or go
// backwards, demands jump), the trend's addition is finite, >= 0 and at
// most MaxHeadroom × the largest demand of its window, the held peak (with a
// half-life or without) finite, >= 0 and at most the largest demand seen, and
// each keeps a bounded number of samples.
func FuzzTrend(f *testing.F) {
	f.Add([]byte{15, 1, 15, 2, 15, 3, 15, 4, 15, 5}, uint16(120), uint16(240))
	f.Add([]byte{0, 255, 0, 0, 1, 255, 200, 0}, uint16(1), uint16(3600))
	f.Fuzz(func(t *testing.T, steps []byte, window, lookahead uint16) {
		tr := &Trend{Window: time.Duration(max(window, 1)) * time.Second, Lookahead: time.Duration(min(max(lookahead, 1), 3600)) * time.Second}
		h := &PeakHold{Window: tr.Window, HalfLife: time.Duration(lookahead%3) * tr.Window / 4}
		var st, peak PoolState
		var all []demandSample // every request, at the time the hold records it
		now := t0
		seen := 0.0
		for i := 0; i+1 < len(steps); i += 2 {
			// Steps of -8 to +247 deciseconds; demands 0 to 255 squared.
			now = now.Add(time.Duration(int(steps[i])-8) * 100 * time.Millisecond)
			d := float64(steps[i+1]) * float64(steps[i+1])
			seen = max(seen, d)
			held := peak.observe(now, d, h)
			if math.IsNaN(held) || held < d || held > seen {
				t.Fatalf("step %d: held peak %g (demand %g, largest demand seen %g)", i/2, held, d, seen)
			}
			// Against every sample kept: never more than the peak of the
			// window, never less than that of the window cut by 1/64.
			at := now
			if n := len(all); n > 0 && at.Before(all[n-1].at) {
				at = all[n-1].at
			}
			all = append(all, demandSample{at: at, demand: d})
			full, short := 0.0, 0.0
			for _, p := range all {
				if p.at.After(at.Add(-h.Window)) {
					full = max(full, p.weighed(at, h))
				}
				if p.at.After(at.Add(-h.Window + h.Window/trendSamples)) {
					short = max(short, p.weighed(at, h))
				}
			}
			if held > full*(1+1e-12) || held < short*(1-1e-12) {
				t.Fatalf("step %d: held peak %g, want it in [%g, %g] (the peak of the window cut by 1/64, of the whole window)", i/2, held, short, full)
			}
			if len(peak.peaks) > trendSamples+2 {
				t.Fatalf("step %d: %d peak samples kept", i/2, len(peak.peaks))
			}
			got := st.observeTrend(now, d, tr)
			top := 0.0
			for _, s := range st.trend {
				top = max(top, s.demand)
			}
			if math.IsNaN(got) || math.IsInf(got, 0) || got < 0 || got > MaxHeadroom*top {
				t.Fatalf("step %d: trend %g (largest demand in the window %g)", i/2, got, top)
			}
			if len(st.trend) > trendSamples+2 {
				t.Fatalf("step %d: %d samples kept", i/2, len(st.trend))
			}
		}
	})
}
