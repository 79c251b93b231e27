package soak

import (
	"math"
	"slices"
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
// hold window too), averaged. extra is how many more pods the answer says counted
// without fresh data (its pods_unknown and pods_held labels) although they served well:
// a scrape timed out on a loaded machine. Any extra of them may count at the unknown
// saturation or a held value, so the bounds take the ones that move them most.
func (f *Fleet) PoolBounds(engines []*Engine, now time.Time, w Windows, dark bool, extra int) (lo, hi float64) {
	var lowerBy, raiseBy []float64 // what counting a healthy pod as dark may move the bounds by
	for _, e := range engines {
		cands := f.podCandidates(e, now.Add(-w.Fresh), now)
		darkLo, darkHi := w.UnknownSaturation, w.UnknownSaturation
		for _, c := range f.podCandidates(e, now.Add(-w.Hold-w.Dark), now) {
			darkHi = max(darkHi, max(c, w.UnknownSaturation))
		}
		modes := e.modesDuring(now.Add(-w.Dark), now)
		misbehaved := dark || modes[ModeDown] || modes[ModeHang] || modes[ModeGarbage] || modes[ModeHuge] || modes[ModeSlow]
		l, h := math.Inf(1), math.Inf(-1)
		for _, c := range cands {
			l, h = min(l, c), max(h, c)
		}
		if misbehaved {
			l, h = min(l, darkLo), max(h, darkHi)
		} else {
			lowerBy, raiseBy = append(lowerBy, max(0, l-darkLo)), append(raiseBy, max(0, darkHi-h))
		}
		lo += l
		hi += h
	}
	slices.Sort(lowerBy)
	slices.Sort(raiseBy)
	for i := 0; i < extra && i < len(lowerBy); i++ {
		lo -= lowerBy[len(lowerBy)-1-i]
		hi += raiseBy[len(raiseBy)-1-i]
	}
	n := float64(len(engines))
	return lo/n - tolerance, hi/n + tolerance
}
