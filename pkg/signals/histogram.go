package signals

import (
	"math"
	"slices"
	"sort"
)

// Histogram is a cumulative latency histogram as an engine exposes it: Counts[i]
// observations at or below Bounds[i] (seconds), Count in all (the +Inf bucket),
// Sum their total. Bounds are read from each scrape (vLLM accepts custom buckets),
// ascending and finite; Counts is non-decreasing and at most Count. Bounds slices
// may be shared between histograms: never modify them.
type Histogram struct {
	Bounds []float64
	Counts []float64
	Count  float64
	Sum    float64
}

// SameLayout reports whether two histograms have the same bucket bounds.
func SameLayout(a, b *Histogram) bool {
	if len(a.Bounds) != len(b.Bounds) {
		return false
	}
	if len(a.Bounds) > 0 && &a.Bounds[0] == &b.Bounds[0] {
		return true
	}
	return slices.Equal(a.Bounds, b.Bounds)
}

// cumulativeAt returns the number of observations at or below x, interpolated
// linearly inside the bucket that holds x, as PromQL's histogram_quantile
// assumes observations spread within a bucket. Above the last finite bound it
// is the count at that bound: the overflow stays in the +Inf bucket.
func (h *Histogram) cumulativeAt(x float64) float64 {
	i := sort.SearchFloat64s(h.Bounds, x)
	switch {
	case i == len(h.Bounds):
		if i == 0 {
			return 0
		}
		return h.Counts[i-1]
	case h.Bounds[i] == x:
		return h.Counts[i]
	case i == 0:
		if h.Bounds[0] <= 0 || x <= 0 {
			return 0
		}
		return h.Counts[0] * x / h.Bounds[0]
	}
	lo, hi := h.Bounds[i-1], h.Bounds[i]
	return h.Counts[i-1] + (h.Counts[i]-h.Counts[i-1])*(x-lo)/(hi-lo)
}

// Onto returns h's cumulative counts at the given bounds, interpolated inside
// h's buckets where the layouts differ (as Add and Since do).
func (h *Histogram) Onto(bounds []float64) []float64 {
	out := make([]float64, len(bounds))
	for i, b := range bounds {
		out[i] = h.cumulativeAt(b)
	}
	return out
}

// Add returns a + b (a may be nil: the result is a copy of b). Equal layouts add
// bucket by bucket; different layouts (engines or pods with custom buckets) add
// on the union of their bounds, each side interpolated inside its own buckets.
// Neither input is modified.
func (a *Histogram) Add(b *Histogram) *Histogram {
	if b == nil {
		return a
	}
	if a == nil {
		return &Histogram{Bounds: b.Bounds, Counts: slices.Clone(b.Counts), Count: b.Count, Sum: b.Sum}
	}
	out := &Histogram{Count: a.Count + b.Count, Sum: a.Sum + b.Sum}
	if SameLayout(a, b) {
		out.Bounds = a.Bounds
		out.Counts = make([]float64, len(a.Counts))
		for i := range a.Counts {
			out.Counts[i] = a.Counts[i] + b.Counts[i]
		}
		return out
	}
	out.Bounds = unionBounds(a.Bounds, b.Bounds)
	ca, cb := a.Onto(out.Bounds), b.Onto(out.Bounds)
	for i := range ca {
		ca[i] += cb[i]
	}
	out.Counts = ca
	return out
}

// AddInPlace adds b into a, which must be exclusively owned by the caller and
// have the same layout as b; it reports false (and changes nothing) otherwise.
func (a *Histogram) AddInPlace(b *Histogram) bool {
	if !SameLayout(a, b) {
		return false
	}
	for i := range a.Counts {
		a.Counts[i] += b.Counts[i]
	}
	a.Count += b.Count
	a.Sum += b.Sum
	return true
}

func unionBounds(a, b []float64) []float64 {
	out := make([]float64, 0, len(a)+len(b))
	out = append(out, a...)
	out = append(out, b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// Since returns the observations of h that are not in older (h − older): the
// histogram of what was observed between two scrapes of one engine. A counter
// reset (the engine restarted: fewer observations than before, or a bucket that
// went down) counts all of h as new, as PromQL's rate does. When the layout
// changed between the scrapes, older is interpolated onto h's bounds and
// negative differences are clamped to 0; approx then reports it. older may be
// nil (h is returned).
func (h *Histogram) Since(older *Histogram) (delta *Histogram, reset, approx bool) {
	if older == nil {
		return h, false, false
	}
	if h.Count < older.Count {
		return h, true, false
	}
	out := &Histogram{Bounds: h.Bounds, Counts: make([]float64, len(h.Counts)), Count: h.Count - older.Count, Sum: h.Sum - older.Sum}
	if out.Sum < 0 {
		out.Sum = 0
	}
	if SameLayout(h, older) {
		for i := range h.Counts {
			d := h.Counts[i] - older.Counts[i]
			if d < 0 {
				return h, true, false
			}
			out.Counts[i] = d
		}
		return out, false, false
	}
	prev := older.Onto(h.Bounds)
	run := 0.0
	for i := range h.Counts {
		d := max(0, h.Counts[i]-prev[i])
		run = max(run, d) // cumulative counts never decrease
		out.Counts[i] = min(run, out.Count)
	}
	return out, false, true
}

// Quantile returns the φ-quantile (0 ≤ φ ≤ 1) of the observations, as PromQL's
// histogram_quantile computes it (prometheus/prometheus v3.x,
// promql/quantile.go, BucketQuantile): the rank φ × Count is located in its
// bucket and interpolated linearly between the bucket's bounds (the first
// bucket's lower bound is 0 when its upper bound is positive); a rank in the
// +Inf bucket returns the last finite bound. ok is false when there is no
// observation (the quantile is undefined, never 0).
func (h *Histogram) Quantile(phi float64) (v float64, ok bool) {
	if h == nil || !(h.Count > 0) || len(h.Bounds) == 0 || math.IsNaN(phi) {
		return 0, false
	}
	phi = min(max(phi, 0), 1)
	rank := phi * h.Count
	b := sort.Search(len(h.Counts), func(i int) bool { return h.Counts[i] >= rank })
	if b == len(h.Counts) {
		return h.Bounds[len(h.Bounds)-1], true
	}
	if b == 0 && h.Bounds[0] <= 0 {
		return h.Bounds[0], true
	}
	start, end, count := 0.0, h.Bounds[b], h.Counts[b]
	if b > 0 {
		start = h.Bounds[b-1]
		count -= h.Counts[b-1]
		rank -= h.Counts[b-1]
	}
	if count <= 0 {
		return end, true
	}
	// Clamped: float rounding must not leave the bucket.
	return min(max(start+(end-start)*(rank/count), start), end), true
}

func (h *Histogram) Clone() *Histogram {
	if h == nil {
		return nil
	}
	return &Histogram{Bounds: h.Bounds, Counts: slices.Clone(h.Counts), Count: h.Count, Sum: h.Sum}
}
