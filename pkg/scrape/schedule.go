package scrape

import (
	"container/heap"
	"context"
	"hash/fnv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// MaxBackoffIntervals bounds the exponential backoff of a failing pod: it is
// retried after 1, 2, 4 and then every MaxBackoffIntervals scrape intervals, so
// a pod that recovers is read again within that many intervals (16 s at the
// default 2 s). Its first good scrape restores the interval.
const MaxBackoffIntervals = 8

// schedule is the per-target schedule: each pod of the scrape set has its own
// phase and next due time, in a heap served by one timer of the injected clock,
// and its own failure backoff (client-go's per-item exponential rate limiter,
// the one controllers requeue failed items with: When on a failure, Forget on a
// success). It never waits for one pod to scrape another: due pods go to the
// dispatcher, which shares the capacity fairly.
//
// The heap is this package's rather than client-go's delaying queue: that queue
// arms each timer from a time read before it blocks, so a test stepping a fake
// clock races with it; here one goroutine (Run's) owns the timer and says when
// it is parked, which makes the schedule's tests deterministic.
type schedule struct {
	mu       sync.Mutex
	interval time.Duration // 0 until Run
	entries  map[types.UID]*entry
	due      dueHeap // entries waiting for their due time (not busy)
	backoff  workqueue.TypedRateLimiter[types.UID]
	failing  int // entries whose last scheduled scrape failed
	// wake tells Run's loop that the heap's earliest entry may have changed.
	wake chan struct{}
	// parked is set while Run's loop waits, its timer armed for the earliest
	// entry and nothing due (for tests).
	parked bool
	// active counts scrapes started and not yet fully handled (result stored
	// and, for scheduled ones, the next due time set).
	active int
}

// entry is one pod's place in the schedule.
type entry struct {
	target Target
	// due is when its next scrape is due.
	due time.Time
	// index is its position in the heap, -1 while its scrape is queued or
	// running: the next due time is set when it ends.
	index   int
	failing bool
}

func (e *entry) busy() bool { return e.index < 0 }

// dueHeap orders entries by due time (container/heap).
type dueHeap []*entry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *dueHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}

func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

// phase returns the offset of a pod's scrapes within an interval, from its UID:
// stable for a pod, and spread evenly over the interval for many pods, so that
// 10,000 targets added at once do not all fall due together.
func phase(uid types.UID, interval time.Duration) time.Duration {
	if interval <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	return time.Duration(h.Sum64() % uint64(interval))
}

// Run scrapes each target returned by targets on its own schedule until ctx is
// done. targets is called at start and every interval; pods that joined are
// first scraped at their phase (within one interval, from their UID), pods
// that left are forgotten with their results. Each pod is then scraped every
// interval at its phase; a failing pod is retried after 1, 2, 4, ... intervals,
// at most MaxBackoffIntervals, until a scrape succeeds. A scrape that hangs
// holds its slot for at most Options.Timeout, and only its namespace's share of
// the capacity (see Scrape).
func (s *Scraper) Run(ctx context.Context, interval time.Duration, targets func() []Target) {
	s.mu.Lock()
	s.base = ctx
	s.mu.Unlock()
	sc := &s.sched
	sc.mu.Lock()
	sc.interval = interval
	sc.backoff = workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](interval, MaxBackoffIntervals*interval)
	now := s.clock.Now()
	for uid, e := range sc.entries {
		// Pods made the scrape set before Run (by Sync) start at their phase.
		e.due = now.Add(phase(uid, interval))
		if !e.busy() {
			heap.Fix(&sc.due, e.index)
		}
	}
	sc.mu.Unlock()
	s.setTargets(targets())

	tick := s.clock.NewTicker(interval)
	defer tick.Stop()
	for {
		sc.mu.Lock()
		now := s.clock.Now()
		var due []Target
		for len(sc.due) > 0 && !sc.due[0].due.After(now) {
			due = append(due, heap.Pop(&sc.due).(*entry).target)
		}
		var timer clock.Timer
		var fired <-chan time.Time
		if len(due) == 0 && len(sc.due) > 0 {
			timer = s.clock.NewTimer(sc.due[0].due.Sub(now))
			fired = timer.C()
		}
		sc.parked = len(due) == 0
		sc.mu.Unlock()
		if len(due) > 0 {
			for _, t := range due {
				s.dispatch.submit(t, false, true)
			}
			continue
		}
		select {
		case <-ctx.Done():
		case <-fired:
		case <-sc.wake:
		case <-tick.C():
			s.setTargets(targets())
		}
		sc.mu.Lock()
		sc.parked = false
		sc.mu.Unlock()
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// Sync makes targets the scrape set (as Run does every interval: other pods'
// results are forgotten, the scrape-targets gauge set) and scrapes them now,
// returning when every scrape has finished or ctx is done. Tests and benchmarks
// drive rounds with it; the adapter runs Run.
func (s *Scraper) Sync(ctx context.Context, targets []Target) {
	s.setTargets(targets)
	s.Scrape(ctx, targets)
}

// Scrape scrapes the targets now and stores their results; other pods' results
// are kept. Its scrapes share Options.Concurrency with the schedule, by the
// same rule, ahead of their pools' scheduled scrapes: a free slot goes to the
// namespace with the fewest scrapes in flight (then to its pool with the
// fewest), and no namespace holds more than the capacity minus one slot per
// other namespace (at least one slot, at most a quarter of the capacity, kept
// back), so pods that hang in one namespace delay only that namespace. A scrape
// of a pod already queued or running is joined rather than repeated. Scrape
// returns when every scrape has finished or ctx is done; a scrape started by
// then runs to its end (at most Options.Timeout) and stores its result.
func (s *Scraper) Scrape(ctx context.Context, targets []Target) {
	if ctx.Err() != nil || len(targets) == 0 {
		return
	}
	jobs := make([]*job, 0, len(targets))
	for _, t := range targets {
		jobs = append(jobs, s.dispatch.submit(t, true, false))
	}
	s.dispatch.wait(ctx, jobs)
}

// setTargets replaces the scrape set: new pods get an entry due at their phase,
// pods that left lose their entry, backoff and result.
func (s *Scraper) setTargets(targets []Target) {
	sc := &s.sched
	now := s.clock.Now()
	keep := make(map[types.UID]struct{}, len(targets))
	namespaces := map[string]struct{}{}
	sc.mu.Lock()
	for _, t := range targets {
		keep[t.UID] = struct{}{}
		namespaces[t.Pod.Namespace] = struct{}{}
		if e, ok := sc.entries[t.UID]; ok {
			e.target = t // its URL or pool may have changed
			continue
		}
		e := &entry{target: t, due: now.Add(phase(t.UID, sc.interval))}
		sc.entries[t.UID] = e
		heap.Push(&sc.due, e)
	}
	for uid, e := range sc.entries {
		if _, ok := keep[uid]; ok {
			continue
		}
		delete(sc.entries, uid)
		if !e.busy() {
			heap.Remove(&sc.due, e.index)
		}
		if e.failing {
			sc.failing--
		}
		if sc.backoff != nil {
			sc.backoff.Forget(uid)
		}
	}
	failing := sc.failing
	sc.mu.Unlock()
	sc.poke()

	s.mu.Lock()
	for k := range s.results {
		if _, ok := keep[k]; !ok {
			delete(s.results, k)
			s.budget.forget(k)
		}
	}
	s.mu.Unlock()
	s.dispatch.setKnown(len(namespaces))
	s.metrics.Targets.Set(float64(len(targets)))
	s.metrics.Backoff.Set(float64(failing))
}

// poke wakes Run's loop to look at the heap again.
func (sc *schedule) poke() {
	select {
	case sc.wake <- struct{}{}:
	default:
	}
}

// rescheduled sets a pod's next due time after its scheduled scrape ended:
// one interval after the last due time on success, the backoff's delay after a
// failure, skipping (and counting) due times that passed while it waited or ran.
func (s *Scraper) rescheduled(t Target, r *Result) {
	sc := &s.sched
	sc.mu.Lock()
	defer sc.poke()
	defer sc.mu.Unlock()
	e, ok := sc.entries[t.UID]
	if !ok || !e.busy() || sc.backoff == nil {
		return
	}
	failed := r == nil || r.Err != nil
	delay := sc.interval
	if failed {
		delay = sc.backoff.When(t.UID)
	} else {
		sc.backoff.Forget(t.UID)
	}
	if failed != e.failing {
		e.failing = failed
		if failed {
			sc.failing++
		} else {
			sc.failing--
		}
		s.metrics.Backoff.Set(float64(sc.failing))
	}
	now := s.clock.Now()
	next := e.due.Add(delay)
	skipped := 0
	for !next.After(now) {
		next = next.Add(sc.interval)
		skipped++
	}
	if skipped > 0 {
		s.metrics.Skipped.Add(float64(skipped))
		klog.V(4).InfoS("Scheduled scrapes skipped: the previous one was still waiting or running", "pod", t.Pod, "skipped", skipped)
	}
	e.due = next
	heap.Push(&sc.due, e)
}

// run is the dispatcher's start function: it scrapes in a new goroutine, with
// the context of Run (shutdown cancels it) rather than a caller's, and reports
// the end to the dispatcher and, for scheduled scrapes, to the schedule.
func (s *Scraper) run(j *job) {
	s.mu.RLock()
	ctx := s.base
	s.mu.RUnlock()
	sc := &s.sched
	sc.mu.Lock()
	sc.active++
	sc.mu.Unlock()
	go func() {
		r := s.scrapeFn(ctx, j.target)
		if s.dispatch.finish(j, r) && ctx.Err() == nil {
			s.rescheduled(j.target, r)
		}
		sc.mu.Lock()
		sc.active--
		sc.mu.Unlock()
	}()
}
