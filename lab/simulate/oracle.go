package simulate

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// The perfect-foresight oracle.
//
// Definition. Time is cut into intervals of OracleInterval (L). A schedule gives
// each interval k a number r_k of Ready replicas. The oracle's schedule is built
// greedily, interval by interval, with the same fleet model as every autoscaler
// (engines, gateway, draining):
//
//  1. From the fleet's exact state at the start of interval k (requests in
//     flight, queues, KV caches, draining pods), r_k is the fewest Ready replicas
//     (at least MinReplicas) such that, of the interval's arrivals that can meet
//     the TTFT SLO at all (see attainableRequests), at most
//     floor((1 - SLOTarget) × n) miss it. A candidate r is evaluated by cloning
//     the fleet, making exactly r pods Ready (new ones at once, surplus ones
//     drained, those with the fewest outstanding requests first), replaying the
//     interval's arrivals, then letting the fleet run one TTFT SLO past the
//     interval's end without further arrivals to see the last first tokens. The
//     search assumes more replicas never hurt: it steps from r_{k-1} up or down in
//     doubling strides, then bisects. Going up, once a candidate at least twice
//     r_{k-1} misses as many requests as the candidate before it, the misses
//     left are taken as unachievable (no replica count removes them: requests
//     behind work no new pod can take) and the target becomes that count: the
//     oracle never chases the infeasible to the replica cap. The fleet state
//     after the chosen candidate's interval is the next interval's start.
//  2. Pods need a cold start: a replica Ready at the start of interval k is
//     created ColdStart earlier, and it costs GPU time from its creation. A dip
//     r_j < r_{j-1} that comes back within ColdStart (at most
//     floor(ColdStart / L) intervals) is filled: keeping the pod is cheaper than
//     draining it and starting another. During the first ColdStart no pod can be
//     started in time, so the schedule holds its largest count of those
//     intervals, which is also every fleet's initial size.
//  3. The schedule is replayed from the start with the cold starts (pods created
//     ColdStart before the interval that needs them, drained at the start of the
//     interval that does not) and the report is that replay. Step 1 judged each
//     interval without the next interval's arrivals; where the replay misses the
//     target, the interval gets one more replica and the schedule is replayed
//     again, at most three times.
//
// The result is a feasible schedule that knows the future, not a proven minimum:
// the greedy choice is myopic (more replicas now could save more later) and the
// per-interval target is stricter than one over the whole trace. Its GPU-hours are
// an upper bound on the cheapest schedule's, so an autoscaler's ratio to it is a
// lower bound on its true overspend.

// oracleResult is the oracle's schedule and its replay.
type oracleResult struct {
	schedule   []int // Ready replicas per interval, as executed
	initial    int
	infeasible int // intervals where even the cap missed the target
	// unachievable counts the misses the search found no replica count
	// removes (doubling the fleet left them): not chased.
	unachievable int
	outcome      *outcome
}

// runOracle computes and replays the oracle's schedule.
func runOracle(cfg Config, w Workload, attainable []bool) (*oracleResult, error) {
	L := cfg.OracleInterval
	// K intervals; an arrival at exactly K·L joins the last one. Interval k holds
	// the requests [bounds[k], bounds[k+1]).
	K := max(1, int((w.Duration+L-1)/L))
	bounds := make([]int, K+1)
	for k := 1; k <= K; k++ {
		b := time.Duration(k) * L
		bounds[k] = bounds[k-1]
		for bounds[k] < len(w.Requests) && w.Requests[bounds[k]].At < b {
			bounds[k]++
		}
	}
	bounds[K] = len(w.Requests)
	allowed := make([]int, K)
	for k := range K {
		n := 0
		for i := bounds[k]; i < bounds[k+1]; i++ {
			if attainable[i] {
				n++
			}
		}
		allowed[k] = int(math.Floor((1-cfg.SLOTarget)*float64(n) + 1e-9))
	}
	maxR := cfg.MaxReplicas
	if maxR == 0 {
		maxR = MaxFleet
	}

	raw, infeasible, unachievable, err := greedySchedule(cfg, w, attainable, bounds, allowed, maxR)
	if err != nil {
		return nil, err
	}
	var res *oracleResult
	for round := 0; ; round++ {
		cs := cfg.coldStart()
		sched, initial := shapeSchedule(raw, L, cs.Mean, cs.Max())
		out, err := runFleet(cfg, w, initial, func(*fleet) (autoscaler, error) {
			return &schedulePolicy{events: scheduleEvents(sched, L, cs)}, nil
		})
		if err != nil {
			return nil, err
		}
		res = &oracleResult{schedule: sched, initial: initial, infeasible: infeasible, unachievable: unachievable, outcome: out}
		if round == 3 {
			return res, nil
		}
		repaired := false
		for k := range K {
			misses := 0
			for i := bounds[k]; i < bounds[k+1]; i++ {
				if attainable[i] && !within(out.rec.first[i], w.Requests[i].At, cfg.TTFTSLO) {
					misses++
				}
			}
			if misses > allowed[k] && raw[k] < maxR {
				raw[k] = max(raw[k], sched[k]) + 1
				repaired = true
			}
		}
		if !repaired {
			return res, nil
		}
	}
}

// within reports whether a first token at first met the TTFT SLO for a request
// arrived at.
func within(first, arrived, slo time.Duration) bool { return first != unset && first-arrived <= slo }

// greedySchedule is step 1 of the oracle: interval by interval, from the fleet
// state the previous interval's choice left, the fewest Ready replicas in
// [MinReplicas, maxR] that keep the interval's misses within allowed[k]
// (searched from the previous interval's count, see intervalSearch). It
// returns the schedule, the intervals where even maxR missed the target, and
// the misses found unachievable (both after the warm-up only).
func greedySchedule(cfg Config, w Workload, attainable []bool, bounds, allowed []int, maxR int) (sched []int, infeasible, unachievable int, err error) {
	K := len(allowed)
	state := newFleet(cfg.Engine, ColdStart{}, epoch(), w.Requests, nopRecorder{}, w.Duration)
	state.abandonAfter = cfg.AbandonAfter
	sched = make([]int, K)
	prev := cfg.MinReplicas
	for k := range K {
		s := &intervalSearch{cfg: cfg, w: w, attainable: attainable, state: state,
			lo: bounds[k], hi: bounds[k+1], end: time.Duration(k+1) * cfg.OracleInterval,
			limit: allowed[k], trials: map[int]intervalTrial{}}
		r := min(max(prev, cfg.MinReplicas), maxR)
		scored := w.scoredAt(time.Duration(k) * cfg.OracleInterval)
		if s.passes(r) {
			r = s.searchDown(r)
		} else {
			var found bool
			if r, found = s.searchUp(r, maxR); !found && scored {
				infeasible++
			}
		}
		if s.err != nil {
			return nil, 0, 0, s.err
		}
		if scored {
			unachievable += s.unachievable
		}
		sched[k] = r
		state = s.trials[r].next
		prev = r
	}
	return sched, infeasible, unachievable, nil
}

// intervalSearch is the search for one interval's replica count: the fleet at
// the interval's start, the interval's requests [lo, hi) ending at end, the
// misses allowed (limit) and the candidates tried so far.
type intervalSearch struct {
	cfg        Config
	w          Workload
	attainable []bool
	state      *fleet
	lo, hi     int
	end        time.Duration
	limit      int
	trials     map[int]intervalTrial
	// unachievable counts the misses the upward search gave up on.
	unachievable int
	// err is the first error making a candidate's pods Ready.
	err error
}

// intervalTrial is one candidate's outcome: its misses and the fleet state at
// the interval's end.
type intervalTrial struct {
	misses int
	next   *fleet
}

// misses returns the interval's attainable requests that miss the TTFT SLO
// with r Ready replicas: a clone of the fleet made r Ready replays the
// interval, then runs one TTFT SLO past its end without further arrivals to
// see the last first tokens. Each r is replayed once. On an error it records
// it in s.err and returns 0.
func (s *intervalSearch) misses(r int) int {
	if t, ok := s.trials[r]; ok {
		return t.misses
	}
	rec := newWindowRecorder(s.lo, s.hi)
	c := s.state.clone(rec)
	if err := c.setReady(r); err != nil {
		s.err = err
		return 0
	}
	c.advance(s.end)
	next := c.clone(nopRecorder{})
	c.stop = c.next
	c.advance(s.end + s.cfg.TTFTSLO)
	m := 0
	for i := s.lo; i < s.hi; i++ {
		if s.attainable[i] && !within(rec.first[i-s.lo], s.w.Requests[i].At, s.cfg.TTFTSLO) {
			m++
		}
	}
	s.trials[r] = intervalTrial{m, next}
	return m
}

// passes reports whether r replicas keep the interval's misses within limit.
func (s *intervalSearch) passes(r int) bool { return s.misses(r) <= s.limit }

// searchDown returns the fewest replicas that pass, from r that passes: down
// in doubling strides while it passes (not below MinReplicas), then bisecting.
func (s *intervalSearch) searchDown(r int) int {
	good, bad, stride := r, -1, 1
	for good > s.cfg.MinReplicas {
		cand := max(good-stride, s.cfg.MinReplicas)
		if !s.passes(cand) {
			bad = cand
			break
		}
		good, stride = cand, stride*2
	}
	if bad < 0 {
		return good
	}
	return s.bisect(good, bad)
}

// searchUp returns the fewest replicas that pass, from r that does not: up in
// doubling strides until it passes, then bisecting. Misses that adding as many
// replicas again does not remove are not the fleet's to fix (requests that
// cannot meet the SLO whatever the replicas: they arrived behind work no new
// pod can take): the search counts them as unachievable, raises the limit to
// them and never chases them to the replica cap. found is false, and the
// result maxR, when even maxR does not pass.
func (s *intervalSearch) searchUp(r, maxR int) (replicas int, found bool) {
	bad, stride := r, 1
	good, last := -1, s.misses(r)
	for {
		cand := min(bad+stride, maxR)
		m := s.misses(cand)
		if m <= s.limit {
			good = cand
			break
		}
		if cand >= 2*r && m >= last {
			s.unachievable += m - s.limit
			s.limit, good = m, cand
			break
		}
		bad, last = cand, m
		if cand == maxR {
			break
		}
		stride *= 2
	}
	if good < 0 {
		return maxR, false
	}
	return s.bisect(good, bad), true
}

// bisect returns the fewest replicas that pass between bad (fails) and good
// (passes).
func (s *intervalSearch) bisect(good, bad int) int {
	for good-bad > 1 {
		mid := (good + bad) / 2
		if s.passes(mid) {
			good = mid
		} else {
			bad = mid
		}
	}
	return good
}

// setReady makes exactly r pods Ready at once: new pods are Ready immediately,
// surplus ones drain.
func (f *fleet) setReady(r int) error {
	cur := f.count(phaseReady)
	if r > cur {
		return f.addReady(r - cur)
	}
	f.drainReady(cur - r)
	return nil
}

// shapeSchedule is step 2 of the oracle: fill dips shorter than the mean cold
// start and hold the largest count of the intervals that start before the
// longest cold start ends (no pod started at 0 may be Ready by then). It
// returns the schedule and the initial fleet.
func shapeSchedule(raw []int, L, coldStart, longest time.Duration) ([]int, int) {
	s := slices.Clone(raw)
	W := int(coldStart / L)
	if W > 0 {
		filled := slices.Clone(s)
		for k := range s {
			left, right := 0, 0
			for j := max(0, k-W); j < k; j++ {
				left = max(left, s[j])
			}
			for j := k + 1; j <= min(len(s)-1, k+W); j++ {
				right = max(right, s[j])
			}
			filled[k] = max(s[k], min(left, right))
		}
		s = filled
	}
	// Intervals starting before the first cold start ends cannot get new pods.
	first := 0
	for k := range s {
		if time.Duration(k)*L < longest || k == 0 {
			first = max(first, s[k])
		}
	}
	for k := range s {
		if time.Duration(k)*L < longest || k == 0 {
			s[k] = first
		}
	}
	return s, first
}

// scheduleEvents turns a schedule into pod creations, each its own cold start
// ahead of the rise that needs it (the oracle knows every pod's draw, the j-th
// pod it starts drawing the j-th cold start as every fleet's j-th new pod
// does), and drains at the start of each fall.
func scheduleEvents(s []int, L time.Duration, cs ColdStart) []scheduleEvent {
	var ev []scheduleEvent
	started := 0
	for k := 1; k < len(s); k++ {
		b := time.Duration(k) * L
		switch d := s[k] - s[k-1]; {
		case d > 0:
			for j := range d {
				c := cs.draw(started, s[k-1]+j)
				started++
				ev = append(ev, scheduleEvent{at: max(0, b-c), create: 1, readyAt: b})
			}
		case d < 0:
			ev = append(ev, scheduleEvent{at: b, drain: -d})
		}
	}
	slices.SortStableFunc(ev, func(a, b scheduleEvent) int { return cmp.Compare(a.at, b.at) })
	return ev
}

type nopRecorder struct{}

func (nopRecorder) firstToken(int, time.Duration) {}
func (nopRecorder) finished(int, time.Duration)   {}
func (nopRecorder) rejected(int)                  {}
func (nopRecorder) abandoned(int)                 {}
