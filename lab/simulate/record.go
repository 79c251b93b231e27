package simulate

import (
	"math"
	"slices"
	"time"
)

// unset marks a request event that has not happened.
const unset = time.Duration(-1)

// fullRecorder keeps the first-token and finish time of every request, and
// which ones the engine refused or the client abandoned.
type fullRecorder struct {
	first, finish []time.Duration
	refused, gone []bool // per request: rejected, abandoned
}

func newFullRecorder(n int) *fullRecorder {
	r := &fullRecorder{first: make([]time.Duration, n), finish: make([]time.Duration, n),
		refused: make([]bool, n), gone: make([]bool, n)}
	for i := range n {
		r.first[i], r.finish[i] = unset, unset
	}
	return r
}

func (r *fullRecorder) firstToken(i int, at time.Duration) { r.first[i] = at }
func (r *fullRecorder) finished(i int, at time.Duration)   { r.finish[i] = at }
func (r *fullRecorder) rejected(i int)                     { r.refused[i] = true }
func (r *fullRecorder) abandoned(i int)                    { r.gone[i] = true }

// rejectedAt and abandonedAt report what happened to request i.
func (r *fullRecorder) rejectedAt(i int) bool  { return r.refused[i] }
func (r *fullRecorder) abandonedAt(i int) bool { return r.gone[i] }

// windowRecorder keeps the first-token times of the requests [lo, hi) only (the
// oracle's search) and ignores the others.
type windowRecorder struct {
	lo    int
	first []time.Duration
}

func newWindowRecorder(lo, hi int) *windowRecorder {
	w := &windowRecorder{lo: lo, first: make([]time.Duration, hi-lo)}
	for i := range w.first {
		w.first[i] = unset
	}
	return w
}

func (w *windowRecorder) firstToken(i int, at time.Duration) {
	if j := i - w.lo; j >= 0 && j < len(w.first) {
		w.first[j] = at
	}
}
func (w *windowRecorder) finished(int, time.Duration) {}
func (w *windowRecorder) rejected(int)                {}
func (w *windowRecorder) abandoned(int)               {}

// Quantiles are nearest-rank quantiles of TTFT in seconds; nil when the quantile
// falls on a request that never got a first token (rejected, or still waiting at
// the end of the simulation).
type Quantiles struct {
	P50 *float64 `json:"p50"`
	P95 *float64 `json:"p95"`
	P99 *float64 `json:"p99"`
}

// quantiles returns the nearest-rank p50, p95 and p99 of ttft (math.Inf for
// requests without a first token).
func quantiles(ttft []float64) Quantiles {
	s := slices.Clone(ttft)
	slices.Sort(s)
	q := func(p float64) *float64 {
		if len(s) == 0 {
			return nil
		}
		i := int(math.Ceil(p*float64(len(s)))) - 1
		v := s[max(i, 0)]
		if math.IsInf(v, 1) {
			return nil
		}
		v = math.Round(v*1e4) / 1e4
		return &v
	}
	return Quantiles{P50: q(0.50), P95: q(0.95), P99: q(0.99)}
}
