package policy

import (
	"math"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// A demand policy's value is floored at the pods counted plus those starting
// (PoolBuilder.AddStarting). The peak hold and the trend recorded that floor
// as demand, so each scale-up raised the floor, the held peak × (1 +
// headroom) or the trend raised the value served, and the HPA scaled up again:
// 18 replicas in 4 minutes with the peak hold, 215,697 with the trend, on
// pods whose demand rose from 1 to 2 replicas. They record the measured demand.
func TestAheadDoesNotRatchetOnStartingPods(t *testing.T) {
	for _, tc := range []struct {
		name string
		pol  Policy
		// most is the most replicas the measured demand asks for: 2 × 1.2
		// held; 2 + its rise of 1 per 150 s over 4 min, 3.6.
		most int
	}{
		{"peak", Policy{Name: "d", Kind: KindDemand, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(),
			Peak: &PeakHold{Window: 10 * time.Minute, Headroom: 0.2}}, 3},
		{"trend", Policy{Name: "d", Kind: KindDemand, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(),
			Trend: &Trend{Window: 2 * time.Minute, Lookahead: 4 * time.Minute}}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := demandCatalog(t, tc.pol).Lookup("d")
			var st PoolState
			const ready = 2
			replicas := ready
			for step := range 16 { // an HPA sync every 15 s for 4 min: the new pods still load
				now := t0.Add(time.Duration(step) * 15 * time.Second)
				kv := min(0.4+0.04*float64(step), 0.8) // each pod's saturation 0.5 → 1 in 150 s, then flat
				b := pol.NewPool(now, maxAge)
				for range ready {
					b.Add(history.NewHistory(history.HistoryOptions{}, []*signals.Reading{read(t, vllm(0, 4, kv), now)}...), "")
				}
				b.AddStarting(replicas - ready)
				p := pol.Ahead(now, &st, b.Pool())
				replicas = max(replicas, int(math.Ceil(*p.Value-1e-9))) // the HPA never scales down meanwhile
			}
			if replicas > tc.most {
				t.Errorf("a demand rising to %d replicas: the HPA reached %d replicas, want at most %d", ready, replicas, tc.most)
			}
		})
	}
}

// The peak hold kept every sample smaller than all older ones: a demand that
// falls a little at every request (a draining queue, or an engine exporting a
// value that decreases by an epsilon per scrape) kept one sample per request
// for the whole window. It keeps at most one per Window/64, as the trend does.
func TestPeakHoldSamplesAreBounded(t *testing.T) {
	h := &PeakHold{Window: 24 * time.Hour, Headroom: 0.2}
	var st PoolState
	for i := range 20000 { // 5.6 h of requests a second
		st.observe(t0.Add(time.Duration(i)*time.Second), 1e6-float64(i)*1e-3, h)
	}
	if n := len(st.peaks); n > trendSamples+1 {
		t.Errorf("a falling demand, one request a second: %d peak samples kept, want at most %d", n, trendSamples+1)
	}
}

// Merging close samples keeps the earlier time: a stream of requests closer
// than Window/64 never carries a peak past its window.
func TestPeakHoldMergeEndsOnTime(t *testing.T) {
	h := &PeakHold{Window: 64 * time.Second}
	var st PoolState
	st.observe(t0, 10, h)
	for ms := 500; ms <= 70000; ms += 500 {
		got := st.observe(t0.Add(time.Duration(ms)*time.Millisecond), 1, h)
		if ms >= 64000 && got != 1 {
			t.Fatalf("%d ms after a peak of 10 with a 64 s window, requests every 0.5 s: held %g, want 1", ms, got)
		}
		if ms < 63000 && got != 10 {
			t.Fatalf("%d ms after a peak of 10 with a 64 s window: held %g, want 10", ms, got)
		}
	}
}

// A demand above MaxRememberedDemand (more replicas than an HPA takes: 1e17,
// from a counter's jump read as arrivals) is served once as it is, and not
// held: the server answered 503 for the peak's whole window after the pool's
// demand was back to 2.
func TestAheadDoesNotRememberAnImpossibleDemand(t *testing.T) {
	for _, c := range []Policy{
		{Name: "d", Kind: KindDemand, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(), Peak: &PeakHold{Window: 10 * time.Minute, Headroom: 0.2}},
		{Name: "d", Kind: KindDemand, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(), Trend: &Trend{Window: time.Minute, Lookahead: time.Minute}},
	} {
		pol := demandCatalog(t, c).Lookup("d")
		var st PoolState
		huge := 1e17
		if p := pol.Ahead(t0, &st, Pool{Pods: 2, Known: 2, Value: &huge}); *p.Value != huge {
			t.Errorf("the impossible answer itself: %g, want %g", *p.Value, huge)
		}
		for i := 1; i <= 8; i++ {
			normal := 2.0
			p := pol.Ahead(t0.Add(time.Duration(i)*10*time.Second), &st, Pool{Pods: 2, Known: 2, Value: &normal})
			if *p.Value > 2.4 {
				t.Errorf("%v: demand back to 2 after one impossible answer: served %g, want at most 2.4", c.Peak != nil, *p.Value)
			}
		}
	}
}

// The trend kept a sample whenever a request came Window/64 after the
// second-newest, so requests a little over Window/128 apart were all kept
// (107 for a 64 s window asked every 0.6 s, where 66 are documented).
func TestTrendKeepsAtMostOneSamplePer64thOfItsWindow(t *testing.T) {
	for _, every := range []time.Duration{100 * time.Millisecond, 600 * time.Millisecond, 999 * time.Millisecond, time.Second, 1500 * time.Millisecond} {
		tr := &Trend{Window: 64 * time.Second, Lookahead: time.Minute}
		var st PoolState
		for i := range 1000 {
			st.observeTrend(t0.Add(time.Duration(i)*every), float64(i), tr)
		}
		if n := len(st.trend); n > trendSamples+2 {
			t.Errorf("requests every %s over a 64 s window kept %d samples, want at most %d", every, n, trendSamples+2)
		}
		for i := 1; i < len(st.trend)-1; i++ {
			if gap := st.trend[i].at.Sub(st.trend[i-1].at); gap < time.Second {
				t.Errorf("requests every %s: samples %d and %d are %s apart, want at least 1s", every, i-1, i, gap)
				break
			}
		}
	}
}

// With a half-life, a held sample newer than now (requests observed out of
// order) weighed 2^(+age/halfLife): +Inf an hour back with a 1 s half-life.
// It weighs as if it were now.
func TestPeakHoldTimeGoingBackwards(t *testing.T) {
	h := &PeakHold{Window: 2 * time.Hour, Headroom: 0.2, HalfLife: time.Second}
	var st PoolState
	st.observe(t0.Add(time.Hour), 4, h)
	if got := st.observe(t0, 1, h); got != 4 {
		t.Errorf("the clock an hour back: held peak %g, want the newer sample's 4", got)
	}
}

// The newest demand is a peak too: the served demand is at least demand ×
// (1 + headroom), with a half-life as without. A demand merged into an
// earlier sample took that sample's time and was decayed by its age: 10
// arriving 59 s after a 1 (64 m window, 1 m half-life) was served 10, not 12;
// a steady 10 asked every 15 s with a 1 h window served 12, 10.09, 8.49, 7.14.
func TestPeakHoldKeepsTheNewestDemandWhole(t *testing.T) {
	pol := demandCatalog(t, Policy{Name: "d", Kind: KindDemand, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(),
		Peak: &PeakHold{Window: 64 * time.Minute, Headroom: 0.2, HalfLife: time.Minute}}).Lookup("d")
	var st PoolState
	steps := []struct {
		at     time.Duration
		demand float64
	}{{0, 1}, {59 * time.Second, 10}}
	for i := range 12 {
		steps = append(steps, struct {
			at     time.Duration
			demand float64
		}{time.Minute + time.Duration(i)*15*time.Second, 10})
	}
	for _, step := range steps {
		v := step.demand
		p := pol.Ahead(t0.Add(step.at), &st, Pool{Pods: 1, Known: 1, Value: &v})
		if want := step.demand * 1.2; p.Ahead == nil || math.Abs(p.Ahead.Served-want) > 1e-9 {
			t.Errorf("demand %g at +%s: served %+v, want demand × (1 + headroom) = %g", step.demand, step.at, p.Ahead, want)
		}
	}
}

// A pod without a fresh value counts at its placeholder (UnknownSaturation)
// in the answer, a moment's caution; the peak hold and the trend recorded
// that answer, so one slow scrape of one pod in ten, at 0.3 where the
// placeholder is 1, was held for the whole window at 3.7 × 1.2. They record
// the pod at the known pods' mean (never more than the answer): 3 × 1.2.
func TestAheadDoesNotHoldAPlaceholder(t *testing.T) {
	for _, kind := range []Kind{KindMean, KindDemand} {
		pol := demandCatalog(t, Policy{Name: "d", Kind: kind, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(),
			Peak: &PeakHold{Window: 10 * time.Minute, Headroom: 0.2}}).Lookup("d")
		var st PoolState
		served := func(now time.Time, stale int) float64 {
			b := pol.NewPool(now, maxAge)
			for i := range 10 {
				at := now
				if i < stale {
					at = now.Add(-time.Minute)
				}
				b.Add(history.NewHistory(history.HistoryOptions{}, read(t, vllm(0, 4, 0.24), at)), "")
			}
			p := pol.Ahead(now, &st, b.Pool())
			return p.Ahead.Served
		}
		if got := served(t0, 1); math.Abs(got-3.7) > 1e-9 {
			t.Errorf("%s: one pod of ten without a fresh reading: served %g, want 9 × 0.3 + 1 = 3.7", kind, got)
		}
		if got := served(t0.Add(15*time.Second), 0); math.Abs(got-3.6) > 1e-9 {
			t.Errorf("%s: every pod fresh again at 0.3: served %g, want the held 3 × 1.2 = 3.6, not the placeholder's 3.7 × 1.2", kind, got)
		}
	}
}
