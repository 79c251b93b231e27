package scrape

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestDispatcherLimit(t *testing.T) {
	tests := []struct {
		capacity, known, want int
	}{
		{capacity: 64, known: 0, want: 63},
		{capacity: 64, known: 1, want: 63},
		{capacity: 64, known: 2, want: 63},
		{capacity: 64, known: 5, want: 60},
		{capacity: 64, known: 17, want: 48},
		{capacity: 64, known: 1000, want: 48},
		{capacity: 4, known: 2, want: 3},
		{capacity: 4, known: 10, want: 3},
		{capacity: 2, known: 3, want: 1},
		{capacity: 1, known: 1, want: 1}, // nothing can be kept back
		{capacity: 1, known: 5, want: 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("capacity %d known %d", tt.capacity, tt.known), func(t *testing.T) {
			d := newDispatcher(tt.capacity, func(*job) {})
			d.known = tt.known
			if got := d.limit(); got != tt.want {
				t.Errorf("limit() = %d, want %d", got, tt.want)
			}
		})
	}
}

func target(ns, pool, name string) Target {
	return Target{Pod: types.NamespacedName{Namespace: ns, Name: name}, UID: types.UID(ns + "/" + name), Pool: pool}
}

// TestDispatcherOrder submits jobs to a dispatcher whose jobs never end on
// their own and checks who gets each slot as slots free up.
func TestDispatcherOrder(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
		known    int
		submit   []Target
		urgent   []bool
		// finish lists, after the first dispatch, the pods whose scrapes end, one
		// at a time.
		finish []string
		want   []string // pods in the order they started
	}{
		{
			name:     "a busy namespace cannot take the last slot",
			capacity: 3, known: 2,
			submit: []Target{target("a", "", "a1"), target("a", "", "a2"), target("a", "", "a3"), target("b", "", "b1")},
			want:   []string{"a1", "a2", "b1"},
		},
		{
			name:     "a freed slot goes to the namespace with the fewest in flight",
			capacity: 4, known: 2,
			submit: []Target{
				target("a", "", "a1"), target("a", "", "a2"), target("a", "", "a3"), target("a", "", "a4"), target("a", "", "a5"),
				target("b", "", "b1"), target("b", "", "b2"), target("b", "", "b3"),
			},
			finish: []string{"a1", "a2", "b1"},
			// a1-a3 fill a's share, b1 the kept slot; a1 ends: b has fewer (1 < 2);
			// a2 ends: a has 1, b 2: a4; b1 ends: b3.
			want: []string{"a1", "a2", "a3", "b1", "b2", "a4", "b3"},
		},
		{
			name:     "pools of a namespace share it the same way",
			capacity: 2, known: 1,
			submit: []Target{target("a", "x", "x1"), target("a", "x", "x2"), target("a", "y", "y1")},
			finish: []string{"x1"},
			// One slot kept back: x1 alone, then y1 (its pool has none in flight).
			want: []string{"x1", "y1"},
		},
		{
			name:     "urgent jobs go ahead of their pool's scheduled ones",
			capacity: 2, known: 1,
			submit: []Target{target("a", "", "s1"), target("a", "", "s2"), target("a", "", "u1")},
			urgent: []bool{false, false, true},
			finish: []string{"s1"},
			want:   []string{"s1", "u1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var started []*job
			d := newDispatcher(tt.capacity, func(j *job) { started = append(started, j) })
			d.known = tt.known
			for i, tg := range tt.submit {
				urgent := i < len(tt.urgent) && tt.urgent[i]
				d.submit(tg, urgent, !urgent)
			}
			for _, name := range tt.finish {
				for _, j := range started {
					if j.target.Pod.Name == name {
						d.finish(j, &Result{})
					}
				}
			}
			var got []string
			for _, j := range started {
				got = append(got, j.target.Pod.Name)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("start order (-want +got):\n%s", diff)
			}
		})
	}
}

// A scrape of a pod already queued or running is joined; one nobody waits for
// any more is dropped before it starts.
func TestDispatcherJoinsAndDrops(t *testing.T) {
	var started []*job
	d := newDispatcher(1, func(j *job) { started = append(started, j) })
	busy := d.submit(target("a", "", "busy"), false, true)
	first := d.submit(target("b", "", "p"), true, false)
	second := d.submit(target("b", "", "p"), true, false)
	if first != second {
		t.Fatal("a second scrape of a queued pod was not joined")
	}
	abandoned := d.submit(target("b", "", "gone"), true, false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d.wait(ctx, []*job{abandoned})

	d.finish(busy, &Result{})
	if len(started) != 2 || started[1] != first {
		t.Fatalf("started %d jobs, want busy then p", len(started))
	}
	d.finish(first, &Result{Time: time.Unix(1, 0)})
	select {
	case <-second.done:
	default:
		t.Fatal("joined waiter not woken")
	}
	select {
	case <-abandoned.done:
	default:
		t.Fatal("abandoned job neither started nor dropped")
	}
	if len(started) != 2 {
		t.Errorf("started %d jobs, want 2: the abandoned one must be dropped", len(started))
	}
	if len(d.jobs) != 0 || len(d.tenants) != 0 || d.inFlight != 0 {
		t.Errorf("dispatcher not empty: %d jobs, %d tenants, %d in flight", len(d.jobs), len(d.tenants), d.inFlight)
	}
}

// A scheduled scrape that runs past its next due times skips them, counted
// once each, and the pod keeps its phase.
func TestSkippedScrapesCounted(t *testing.T) {
	const interval = 2 * time.Second
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	t0 := clk.Now()
	s := New(Options{Concurrency: 1}, nil, Reader{}, clk, m)
	release := make(chan struct{})
	calls := make(chan time.Time, 10)
	n := 0
	s.scrapeFn = func(context.Context, Target) *Result {
		n++ // one scrape at a time: Concurrency 1
		calls <- clk.Now()
		if n == 1 {
			<-release
		}
		return &Result{Time: clk.Now()}
	}
	tg := target("a", "", "slow")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx, interval, func() []Target { return []Target{tg} }) }()
	defer func() { cancel(); <-done }()

	settle := func(active int) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return s.Settled(active), nil
		}); err != nil {
			s.sched.mu.Lock()
			defer s.sched.mu.Unlock()
			t.Fatalf("the schedule never settled with %d active: parked %v, wake %d, active %d", active, s.sched.parked, len(s.sched.wake), s.sched.active)
		}
	}
	p := phase(tg.UID, interval)
	settle(0)
	clk.Step(interval) // due at p: starts, then hangs
	first := <-calls
	settle(1)
	clk.Step(2 * interval) // now 3 intervals: due times p+1 and p+2 pass
	settle(1)
	close(release)
	settle(0)
	if got := testutil.ToFloat64(m.Skipped); got != 2 {
		t.Errorf("scrape_skipped_total = %g, want 2", got)
	}
	clk.Step(interval)
	second := <-calls
	if first.Sub(t0) != interval || second.Sub(t0) != 4*interval {
		t.Errorf("scraped at +%s and +%s, want +%s and +%s (phase %s kept)", first.Sub(t0), second.Sub(t0), interval, 4*interval, p)
	}
}
