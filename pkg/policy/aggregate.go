package policy

import (
	"container/heap"
	"math"
	"slices"
	"time"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// Aggregate keeps the Pool of a set of pods under one policy as their
// histories change, so that reading it costs the same whatever the pool's
// size: each pod's part is evaluated when its history is Set (a scrape), and
// again when time alone changes it (Advance: its reading turns stale, its
// hold ends), and added to or taken from the pool's tally. It is the External
// metrics' shortcut on PoolBuilder (the pool-only fold), and gives the same
// Pool, bit for bit, as a PoolBuilder folding the same histories at the same
// time (FuzzAggregate): the sum is exact (exactSum), and the latency terms'
// observations are pooled only while every pod's window histogram of a term
// has one layout and whole counts below 2^33 (float64 adds them exactly in
// any order); otherwise Pool reports that it cannot, and the caller folds.
//
// Keys are the pods' identities (a UID). An Aggregate is not safe for
// concurrent use; each pool has its own, and nothing one learns reaches
// another.
type Aggregate[K comparable] struct {
	policy *Policy
	maxAge time.Duration
	now    time.Time

	pods map[K]*aggPod[K]
	t    tally
	// busy, usable and broken count the known pods behind tally's flags
	// (which a PoolBuilder only ever sets).
	busy           int
	usable, broken []int
	// hists pools each latency term's window histograms by layout.
	hists [][]layoutSum
	// oldest orders the known pods by their reading's time; expiry, the pods
	// whose part changes by time alone, by its last instant.
	oldest, expiry podHeap[K]
	// unknown holds the KindSignal pods without a fresh signal.
	unknown map[K]struct{}
	// nilHistory counts the pods Set without a history.
	nilHistory int
	scratch    []*signals.Histogram
}

type aggPod[K comparable] struct {
	key       K
	h         *history.History
	why       string
	pt        part
	hists     []*signals.Histogram
	oldestIdx int // -1: not in oldest
	expiryIdx int // -1: not in expiry
}

// layoutSum is the sum of the histograms of one layout.
type layoutSum struct {
	bounds []float64
	counts []float64
	count  float64
	pods   int
	// inexact counts the histograms whose counts are not whole numbers in
	// [0, 2^33): float64 sums of them depend on their order.
	inexact int
}

// maxExactCount bounds the counts an Aggregate adds: whole numbers below it,
// over up to 2^20 pods, sum below 2^53, where float64 counts by one.
const maxExactCount = 1 << 33

// NewAggregate returns an empty aggregate for the policy p (from a Catalog),
// at time now, a reading older than maxAge being stale.
func NewAggregate[K comparable](p *Policy, now time.Time, maxAge time.Duration) *Aggregate[K] {
	a := &Aggregate[K]{policy: p, maxAge: maxAge, now: now, pods: map[K]*aggPod[K]{}, unknown: map[K]struct{}{}}
	a.oldest.less = func(x, y *aggPod[K]) bool { return x.pt.at.Before(y.pt.at) }
	a.oldest.idx = func(x *aggPod[K]) *int { return &x.oldestIdx }
	a.expiry.less = func(x, y *aggPod[K]) bool { return x.pt.until.Before(y.pt.until) }
	a.expiry.idx = func(x *aggPod[K]) *int { return &x.expiryIdx }
	if p.hasLatency() {
		a.usable, a.broken = make([]int, len(p.Terms)), make([]int, len(p.Terms))
		a.hists = make([][]layoutSum, len(p.Terms))
		a.scratch = make([]*signals.Histogram, len(p.Terms))
	}
	return a
}

// Len returns the number of pods.
func (a *Aggregate[K]) Len() int { return len(a.pods) }

// NilHistories returns the number of pods Set without a history (never
// scraped successfully, or no series).
func (a *Aggregate[K]) NilHistories() int { return a.nilHistory }

// Now returns the time the aggregate is evaluated at.
func (a *Aggregate[K]) Now() time.Time { return a.now }

// Set makes h (nil: none) the history of pod k, with why its newest scrape
// failed when it did, evaluated at the aggregate's time; k joins the pool
// when new.
func (a *Aggregate[K]) Set(k K, h *history.History, why string) {
	pod := a.pods[k]
	if pod == nil {
		pod = &aggPod[K]{key: k, oldestIdx: -1, expiryIdx: -1}
		a.pods[k] = pod
	} else {
		a.take(pod)
	}
	pod.h, pod.why = h, why
	a.put(pod)
}

// Remove takes pod k out of the pool, if it is in.
func (a *Aggregate[K]) Remove(k K) {
	if pod := a.pods[k]; pod != nil {
		a.take(pod)
		delete(a.pods, k)
	}
}

// Advance moves the aggregate's time to now, re-evaluating the pods whose
// part changed by time alone in between. A time before the aggregate's is
// ignored: it never goes back.
func (a *Aggregate[K]) Advance(now time.Time) {
	if !now.After(a.now) {
		return
	}
	a.now = now
	for len(a.expiry.pods) > 0 && a.expiry.pods[0].pt.until.Before(now) {
		pod := a.expiry.pods[0]
		a.take(pod)
		a.put(pod)
	}
}

// Pool returns the pool at the aggregate's time, with starting pods (see
// PoolBuilder.AddStarting), as PoolBuilder.PoolOnly folding the same pods'
// histories would. ok is false when a latency term's histograms cannot be
// pooled exactly here (several layouts, or counts that are not whole): fold
// them with a PoolBuilder instead.
func (a *Aggregate[K]) Pool(starting int) (pool Pool, ok bool) {
	var obs []*signals.Histogram
	for i, layouts := range a.hists {
		switch {
		case len(layouts) == 0:
			continue
		case len(layouts) > 1 || layouts[0].inexact > 0:
			return Pool{}, false
		}
		if obs == nil {
			obs = make([]*signals.Histogram, len(a.hists))
		}
		l := &layouts[0]
		obs[i] = &signals.Histogram{Bounds: l.bounds, Counts: slices.Clone(l.counts), Count: l.count}
	}
	var unknowns []float64
	if a.policy.Kind == KindSignal {
		for k := range a.unknown {
			unknowns = append(unknowns, a.pods[k].pt.heldValue)
		}
	}
	t := a.t
	t.starting = max(starting, 0)
	if a.usable != nil && t.known > 0 {
		t.usable, t.broken = make([]bool, len(a.usable)), make([]bool, len(a.broken))
		for i := range a.usable {
			t.usable[i], t.broken[i] = a.usable[i] > 0, a.broken[i] > 0
		}
	}
	t.busy = a.busy > 0
	t.oldest = time.Time{}
	if len(a.oldest.pods) > 0 {
		t.oldest = a.oldest.pods[0].pt.at
	}
	return a.policy.poolOf(&t, obs, unknowns), true
}

// put evaluates a pod at the aggregate's time and adds its part.
func (a *Aggregate[K]) put(pod *aggPod[K]) {
	p := a.policy
	pod.pt, _ = p.evalPart(pod.h, pod.why, a.now, a.maxAge, false, a.scratch)
	pt := &pod.pt
	a.t.add(p, pt, 1)
	if pod.h == nil {
		a.nilHistory++
	}
	if pt.unknown {
		a.unknown[pod.key] = struct{}{}
	}
	if pt.known {
		a.oldest.push(pod)
		if pt.busy {
			a.busy++
		}
		for i := range a.usable {
			if pt.usable&(1<<i) != 0 {
				a.usable[i]++
			}
			if pt.broken&(1<<i) != 0 {
				a.broken[i]++
			}
		}
		if a.scratch != nil {
			pod.hists = pod.hists[:0]
			for i, d := range a.scratch {
				pod.hists = append(pod.hists, d)
				if d != nil {
					a.addHist(i, d, 1)
				}
			}
		}
	}
	if !pt.until.IsZero() {
		a.expiry.push(pod)
	}
}

// take takes a pod's part out.
func (a *Aggregate[K]) take(pod *aggPod[K]) {
	pt := &pod.pt
	a.t.add(a.policy, pt, -1)
	if pod.h == nil {
		a.nilHistory--
	}
	if pt.unknown {
		delete(a.unknown, pod.key)
	}
	if pt.known {
		a.oldest.remove(pod)
		if pt.busy {
			a.busy--
		}
		for i := range a.usable {
			if pt.usable&(1<<i) != 0 {
				a.usable[i]--
			}
			if pt.broken&(1<<i) != 0 {
				a.broken[i]--
			}
		}
		for i, d := range pod.hists {
			if d != nil {
				pod.hists[i] = nil // resum must not count it
				a.addHist(i, d, -1)
			}
		}
		pod.hists = pod.hists[:0]
	}
	a.expiry.remove(pod)
}

// addHist adds (sign 1) or takes (sign -1) a histogram to term i's sum of
// its layout.
func (a *Aggregate[K]) addHist(i int, d *signals.Histogram, sign int) {
	layouts := a.hists[i]
	j := slices.IndexFunc(layouts, func(l layoutSum) bool {
		return signals.SameLayout(&signals.Histogram{Bounds: l.bounds}, d)
	})
	if j < 0 {
		layouts = append(layouts, layoutSum{bounds: d.Bounds, counts: make([]float64, len(d.Counts))})
		j = len(layouts) - 1
	}
	l := &layouts[j]
	s := float64(sign)
	for b, c := range d.Counts {
		l.counts[b] += s * c
	}
	l.count += s * d.Count
	l.pods += sign
	if !wholeCounts(d) {
		l.inexact += sign
		if l.inexact == 0 && l.pods > 0 {
			// The sums went through counts that do not add exactly: add
			// the layout's histograms again.
			a.resum(i, l)
		}
	}
	if l.pods == 0 {
		layouts = slices.Delete(layouts, j, j+1)
	}
	a.hists[i] = layouts
}

// resum recomputes a layout's sums of term i from its pods' histograms.
func (a *Aggregate[K]) resum(i int, l *layoutSum) {
	clear(l.counts)
	l.count = 0
	probe := &signals.Histogram{Bounds: l.bounds}
	for _, pod := range a.pods {
		if i >= len(pod.hists) || pod.hists[i] == nil || !signals.SameLayout(probe, pod.hists[i]) {
			continue
		}
		d := pod.hists[i]
		for b, c := range d.Counts {
			l.counts[b] += c
		}
		l.count += d.Count
	}
}

// wholeCounts reports whether a histogram's counts are whole numbers in [0,
// maxExactCount).
func wholeCounts(h *signals.Histogram) bool {
	ok := func(v float64) bool { return v >= 0 && v < maxExactCount && v == math.Trunc(v) }
	if !ok(h.Count) {
		return false
	}
	for _, c := range h.Counts {
		if !ok(c) {
			return false
		}
	}
	return true
}

// podHeap is a binary min-heap of pods with their index kept in the pod.
type podHeap[K comparable] struct {
	pods []*aggPod[K]
	less func(x, y *aggPod[K]) bool
	idx  func(*aggPod[K]) *int
}

func (h *podHeap[K]) Len() int           { return len(h.pods) }
func (h *podHeap[K]) Less(i, j int) bool { return h.less(h.pods[i], h.pods[j]) }
func (h *podHeap[K]) Swap(i, j int) {
	h.pods[i], h.pods[j] = h.pods[j], h.pods[i]
	*h.idx(h.pods[i]), *h.idx(h.pods[j]) = i, j
}
func (h *podHeap[K]) Push(x any) {
	p := x.(*aggPod[K])
	*h.idx(p) = len(h.pods)
	h.pods = append(h.pods, p)
}
func (h *podHeap[K]) Pop() any {
	n := len(h.pods) - 1
	p := h.pods[n]
	h.pods[n] = nil
	h.pods = h.pods[:n]
	*h.idx(p) = -1
	return p
}

func (h *podHeap[K]) push(p *aggPod[K]) { heap.Push(h, p) }

func (h *podHeap[K]) remove(p *aggPod[K]) {
	if i := *h.idx(p); i >= 0 {
		heap.Remove(h, i)
	}
}
