package soak

import (
	"math"
	"time"
)

// Windows the checker allows around an answer, from the adapter's own bounds.
type Windows struct {
	// Fresh is how old a reading behind a counted value may be: the adapter's max sample
	// age plus the time to scrape (and, with Prometheus, its scrape interval and the
	// cache period).
	Fresh time.Duration
	// Dark is how long after a fault ends a pod may still be unknown: the max sample age
	// plus the scrape backoff (8 intervals) and some slack.
	Dark time.Duration
	// Hold is the adapter's --unknown-pod-hold: a pod without fresh data counts at its
	// last good value for that long when it is higher than the unknown saturation.
	Hold time.Duration
	// UnknownSaturation is what a pod without fresh data counts at.
	UnknownSaturation float64
}

// tolerance is the served values' rounding (milli units) and float noise.
const tolerance = 0.0015

// epochsIn returns the epochs that overlap [from, to].
func (tr Truth) epochsIn(from, to time.Time) []int64 {
	var out []int64
	for e := tr.EpochAt(from); e <= tr.EpochAt(to); e++ {
		out = append(out, e)
	}
	return out
}

// podCandidates returns what engine e's value may be for a reading taken in
// [from, to]: its saturation in each epoch of the window, and its KV term alone
// where it served a NaN queue then.
func (f *Fleet) podCandidates(e *Engine, from, to time.Time) []float64 {
	modes := e.modesDuring(from.Add(-time.Second), to)
	var out []float64
	for _, ep := range f.Truth.epochsIn(from.Add(-time.Second), to) {
		sat, nan := f.Truth.Saturation(e.Index, ep)
		out = append(out, sat)
		if modes[ModeNaN] {
			out = append(out, nan)
		}
	}
	return out
}

// CheckPod reports whether a per-pod value v, read at ts, is one engine e can have.
func (f *Fleet) CheckPod(e *Engine, v float64, ts time.Time, w Windows) bool {
	for _, c := range f.podCandidates(e, ts.Add(-3*time.Second), ts.Add(time.Second)) {
		if math.Abs(c-v) <= tolerance {
			return true
		}
	}
	return false
}

// PoolBounds returns the range a mean pool value (llm_saturation) over engines may take
// at now: per pod, the lowest and highest of what it may count at (its values of the
// last fresh window; when it misbehaved within the dark window, or every pod's source
// did (dark: Prometheus was down), the unknown saturation and its held values of the
// hold window too), averaged.
func (f *Fleet) PoolBounds(engines []*Engine, now time.Time, w Windows, dark bool) (lo, hi float64) {
	for _, e := range engines {
		cands := f.podCandidates(e, now.Add(-w.Fresh), now)
		modes := e.modesDuring(now.Add(-w.Dark), now)
		if dark || modes[ModeDown] || modes[ModeHang] || modes[ModeGarbage] || modes[ModeHuge] || modes[ModeSlow] {
			cands = append(cands, w.UnknownSaturation)
			for _, c := range f.podCandidates(e, now.Add(-w.Hold-w.Dark), now) {
				cands = append(cands, max(c, w.UnknownSaturation))
			}
		}
		l, h := math.Inf(1), math.Inf(-1)
		for _, c := range cands {
			l, h = min(l, c), max(h, c)
		}
		lo += l
		hi += h
	}
	n := float64(len(engines))
	return lo/n - tolerance, hi/n + tolerance
}
