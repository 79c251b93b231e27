package scrape

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// dispatcher shares the scrape capacity (Options.Concurrency scrapes in flight)
// between every caller: the per-target schedule and the on-demand scrapes of
// requests. Jobs wait in a queue per namespace and, within it, per pool; a free
// slot goes to the namespace with the fewest scrapes in flight (then the one
// served longest ago), and within it to the pool with the fewest. While pods of
// more than one namespace are known, no namespace may hold more than
// capacity - reserve slots (see limit), so a namespace whose pods hang until
// their timeout can only slow itself: the others always find a free slot.
//
// Jobs are deduplicated by pod UID: a scrape of a pod that is already queued or
// running is joined, never repeated.
type dispatcher struct {
	capacity int
	// start runs a job in a new goroutine and calls finish when it is done.
	start func(*job)

	mu       sync.Mutex
	inFlight int
	// known is the number of namespaces in the scrape set, set by the schedule.
	known   int
	seq     uint64
	tenants map[string]*tenant // by namespace; only those with jobs queued or in flight
	jobs    map[types.UID]*job // queued or running
}

// tenant is one namespace's share of the capacity.
type tenant struct {
	name     string
	inFlight int
	queued   int
	served   uint64 // dispatcher.seq when it last got a slot
	pools    map[string]*poolQueue
}

// poolQueue holds one pool's jobs: urgent ones (a request waits on them) go
// first, then the schedule's, each in arrival order.
type poolQueue struct {
	name           string
	inFlight       int
	served         uint64
	urgent, normal []*job
}

func (q *poolQueue) len() int { return len(q.urgent) + len(q.normal) }

func (q *poolQueue) pop() *job {
	if len(q.urgent) > 0 {
		j := q.urgent[0]
		q.urgent[0] = nil
		q.urgent = q.urgent[1:]
		return j
	}
	j := q.normal[0]
	q.normal[0] = nil
	q.normal = q.normal[1:]
	return j
}

// job is one scrape of one pod, with everyone waiting for it.
type job struct {
	target Target
	// scheduled is set when the schedule waits for this scrape: it is rescheduled
	// when the job finishes.
	scheduled bool
	// waiters counts the on-demand callers still waiting; a job nobody waits for
	// any more is dropped before it starts.
	waiters int
	running bool
	// done is closed when the job finished (result is then set) or was dropped.
	done   chan struct{}
	result *Result
}

func newDispatcher(capacity int, start func(*job)) *dispatcher {
	return &dispatcher{
		capacity: max(1, capacity),
		start:    start,
		tenants:  map[string]*tenant{},
		jobs:     map[types.UID]*job{},
	}
}

// limit is the most slots one namespace may hold: the capacity minus one slot
// per other namespace known, at least one (for a namespace whose first request
// comes while another holds every slot) and at most a quarter of the capacity
// (so 63 of 64 with one or two namespaces, 48 of 64 with 17 or more). With a
// capacity of 1 nothing can be kept back.
func (d *dispatcher) limit() int {
	k := max(d.known, len(d.tenants))
	reserve := min(max(k-1, 1), (d.capacity+3)/4)
	return max(1, d.capacity-reserve)
}

// submit queues a scrape of t, or joins the one already queued or running for
// its pod. urgent puts it ahead of its pool's scheduled scrapes; scheduled marks
// it as the schedule's. The caller waits on the returned job's done channel.
func (d *dispatcher) submit(t Target, urgent, scheduled bool) *job {
	d.mu.Lock()
	defer d.mu.Unlock()
	if j, ok := d.jobs[t.UID]; ok {
		if scheduled {
			j.scheduled = true
		}
		if urgent {
			j.waiters++
		}
		return j
	}
	j := &job{target: t, scheduled: scheduled, done: make(chan struct{})}
	if urgent {
		j.waiters = 1
	}
	d.jobs[t.UID] = j
	tn := d.tenants[t.Pod.Namespace]
	if tn == nil {
		tn = &tenant{name: t.Pod.Namespace, pools: map[string]*poolQueue{}}
		d.tenants[tn.name] = tn
	}
	q := tn.pools[t.Pool]
	if q == nil {
		q = &poolQueue{name: t.Pool}
		tn.pools[t.Pool] = q
	}
	if urgent {
		q.urgent = append(q.urgent, j)
	} else {
		q.normal = append(q.normal, j)
	}
	tn.queued++
	d.dispatchLocked()
	return j
}

// abandon records that an on-demand caller stopped waiting for j.
func (d *dispatcher) abandon(j *job) {
	d.mu.Lock()
	j.waiters--
	d.mu.Unlock()
}

// setKnown records how many namespaces the scrape set has, for limit.
func (d *dispatcher) setKnown(n int) {
	d.mu.Lock()
	d.known = n
	d.dispatchLocked()
	d.mu.Unlock()
}

// dispatchLocked starts queued jobs while slots are free.
func (d *dispatcher) dispatchLocked() {
	for d.inFlight < d.capacity {
		tn := d.pickTenant()
		if tn == nil {
			return
		}
		q := pickPool(tn)
		j := q.pop()
		tn.queued--
		if !j.scheduled && j.waiters <= 0 {
			// Everyone who asked gave up before it started.
			delete(d.jobs, j.target.UID)
			close(j.done)
			d.forgetIdle(tn, q)
			continue
		}
		d.seq++
		d.inFlight++
		tn.inFlight++
		q.inFlight++
		tn.served, q.served = d.seq, d.seq
		j.running = true
		d.start(j)
	}
}

// pickTenant returns the namespace that gets the next slot: among those with
// jobs queued and below limit, the fewest in flight, then the one served
// longest ago, then by name. Nil when none may start a job.
func (d *dispatcher) pickTenant() *tenant {
	limit := d.limit()
	var best *tenant
	for _, tn := range d.tenants {
		if tn.queued == 0 || tn.inFlight >= limit {
			continue
		}
		if best == nil || tn.inFlight < best.inFlight ||
			(tn.inFlight == best.inFlight && (tn.served < best.served || (tn.served == best.served && tn.name < best.name))) {
			best = tn
		}
	}
	return best
}

// pickPool returns the pool of tn that gets the slot, by the same rule.
func pickPool(tn *tenant) *poolQueue {
	var best *poolQueue
	for _, q := range tn.pools {
		if q.len() == 0 {
			continue
		}
		if best == nil || q.inFlight < best.inFlight ||
			(q.inFlight == best.inFlight && (q.served < best.served || (q.served == best.served && q.name < best.name))) {
			best = q
		}
	}
	return best
}

// finish records the end of a running job, wakes its waiters, and reports
// whether the schedule waits for it.
func (d *dispatcher) finish(j *job, r *Result) (scheduled bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	j.result = r
	delete(d.jobs, j.target.UID)
	d.inFlight--
	tn := d.tenants[j.target.Pod.Namespace]
	q := tn.pools[j.target.Pool]
	tn.inFlight--
	q.inFlight--
	d.forgetIdle(tn, q)
	close(j.done)
	d.dispatchLocked()
	return j.scheduled
}

// forgetIdle drops a pool and a namespace with nothing queued or in flight.
func (d *dispatcher) forgetIdle(tn *tenant, q *poolQueue) {
	if q.len() == 0 && q.inFlight == 0 {
		delete(tn.pools, q.name)
	}
	if len(tn.pools) == 0 {
		delete(d.tenants, tn.name)
	}
}

// wait blocks until every job has finished (or was dropped) or ctx is done;
// then it abandons the jobs still waiting.
func (d *dispatcher) wait(ctx context.Context, jobs []*job) {
	for i, j := range jobs {
		select {
		case <-j.done:
		case <-ctx.Done():
			for _, rest := range jobs[i:] {
				d.abandon(rest)
			}
			return
		}
	}
}
