package scrape_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
)

const interval = 2 * time.Second

// eventually polls cond until it holds. The deadline only guards against a hang
// (the conditions depend on the fake clock, not on how fast the machine is).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 2*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("%s: never happened", what)
	}
}

// startRun runs the scraper's schedule over targets until the test ends, and
// waits until it has taken them as its scrape set.
func (f *fixture) startRun(t *testing.T, targets func() []scrape.Target) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.scraper.Run(ctx, interval, targets)
	}()
	// Before the engines' servers close (cleanups run last-in first-out).
	t.Cleanup(func() { cancel(); <-done })
	want := float64(len(targets()))
	eventually(t, "Run took its targets", func() bool { return testutil.ToFloat64(f.metrics.Targets) == want })
}

// step waits until the schedule is at rest (every timer armed from the current
// time, no scrape in progress but hung ones), then advances the fake clock.
func (f *fixture) step(t *testing.T, d time.Duration, hung int) {
	t.Helper()
	eventually(t, "the schedule settles", func() bool { return f.scraper.Settled(hung) })
	f.clock.Step(d)
}

// hangingEngine answers nothing until the request's context ends, and records
// how many requests it held at once.
type hangingEngine struct {
	*engine
	mu            sync.Mutex
	inFlight, max int
}

func newHangingEngine(t *testing.T) *hangingEngine {
	h := &hangingEngine{}
	h.engine = newEngine(t, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.inFlight++
		h.max = max(h.max, h.inFlight)
		h.mu.Unlock()
		<-r.Context().Done()
		h.mu.Lock()
		h.inFlight--
		h.mu.Unlock()
	}))
	return h
}

func (h *hangingEngine) counts() (inFlight, maxInFlight int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inFlight, h.max
}

func targetsIn(e *engine, namespace string, n int) []scrape.Target {
	var out []scrape.Target
	for i := range n {
		t := e.target(fmt.Sprintf("%s-%d", namespace, i))
		t.Pod.Namespace = namespace
		t.UID = types.UID(namespace + "/" + t.Pod.Name)
		out = append(out, t)
	}
	return out
}

// TestNoisyNamespaceCannotStarveOthers is issue 12's "one tenant starves every
// other tenant's readings": 40 pods of one namespace whose /metrics hangs (for
// the whole test: their timeout is an hour) and 3 healthy pods of another,
// sharing 4 slots. The healthy namespace's readings must be fresh after every
// interval, and the hanging one must never hold more than 3 slots. With global
// scrape rounds the first round never ended and the healthy pods were never
// scraped again.
func TestNoisyNamespaceCannotStarveOthers(t *testing.T) {
	opts := defaultOptions()
	opts.Concurrency = 4
	opts.Timeout = time.Hour
	f := newFixture(t, opts)
	noisy := newHangingEngine(t)
	quiet := newEngine(t, serve(http.StatusOK, readSample(t, vllmSample)))
	hanging := targetsIn(noisy.engine, "noisy", 40)
	healthy := targetsIn(quiet, "quiet", 3)
	all := append(slices.Clone(hanging), healthy...)
	f.startRun(t, func() []scrape.Target { return all })

	for step := 1; step <= 10; step++ {
		hung, _ := noisy.counts()
		f.step(t, interval, hung)
		now := f.clock.Now()
		eventually(t, fmt.Sprintf("interval %d: every healthy pod read at %s", step, now), func() bool {
			for _, tg := range healthy {
				if r, ok := f.scraper.Latest(tg.UID); !ok || r.Err != nil || !r.Time.Equal(now) {
					return false
				}
			}
			return true
		})
		eventually(t, "the hanging namespace fills its share", func() bool { n, _ := noisy.counts(); return n == 3 })
	}
	if _, most := noisy.counts(); most != 3 {
		t.Errorf("the hanging namespace held up to %d of 4 slots, want 3: one is kept for the other namespace", most)
	}
	f.checkErrors(t)
}

// TestColdScrapeSharesTheSameFairness: an on-demand scrape (a request for pods
// never scraped) of a healthy namespace gets a slot while another namespace's
// hanging pods hold all theirs, and the hanging namespace's own on-demand
// scrape waits for its share, returning when its caller gives up.
func TestColdScrapeSharesTheSameFairness(t *testing.T) {
	opts := defaultOptions()
	opts.Concurrency = 4
	opts.Timeout = time.Hour
	f := newFixture(t, opts)
	noisy := newHangingEngine(t)
	quiet := newEngine(t, serve(http.StatusOK, readSample(t, vllmSample)))
	hanging := targetsIn(noisy.engine, "noisy", 10)
	f.startRun(t, func() []scrape.Target { return hanging })
	f.step(t, interval, 0)
	eventually(t, "the hanging namespace fills its share", func() bool { n, _ := noisy.counts(); return n == 3 })

	cold := targetsIn(quiet, "quiet", 5)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.scraper.Scrape(ctx, cold) // no deadline: it must return on its own
	for _, tg := range cold {
		if r, ok := f.scraper.Latest(tg.UID); !ok || r.Reading() == nil {
			t.Errorf("%s: no reading after the on-demand scrape", tg.Pod)
		}
	}

	more := targetsIn(noisy.engine, "noisy-cold", 1)
	more[0].Pod.Namespace = "noisy"
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	f.scraper.Scrape(ctx, more)
	if n, most := noisy.counts(); n != 3 || most != 3 {
		t.Errorf("hanging namespace in flight %d (at most %d), want 3: its on-demand scrape must wait for its share", n, most)
	}
}

// A failing pod is retried after 1, 2, 4, then every 8 intervals; once it
// answers again it is back to every interval.
func TestFailingTargetBacksOff(t *testing.T) {
	f := newFixture(t, defaultOptions())
	t0 := f.clock.Now()
	var (
		mu    sync.Mutex
		steps []int
		code  = http.StatusInternalServerError
	)
	good := readSample(t, vllmSample)
	e := newEngine(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		steps = append(steps, int(f.clock.Since(t0)/interval))
		c := code
		mu.Unlock()
		serve(c, good).ServeHTTP(w, r)
	}))
	target := e.target("flaky")
	f.startRun(t, func() []scrape.Target { return []scrape.Target{target} })
	hits := func() int { mu.Lock(); defer mu.Unlock(); return len(steps) }

	// Failing: scraped at intervals 1, 2, 4, 8, 16, 24; then it recovers and is
	// read at 32 (within 8 intervals), 33, 34.
	want := []int{1, 2, 4, 8, 16, 24, 32, 33, 34}
	for step := 1; step <= 34; step++ {
		f.step(t, interval, 0)
		n := 0
		for _, s := range want {
			if s <= step {
				n++
			}
		}
		eventually(t, fmt.Sprintf("%d scrapes by interval %d (%v)", n, step, func() []int { mu.Lock(); defer mu.Unlock(); return slices.Clone(steps) }()), func() bool { return hits() == n })
		if step == 24 {
			eventually(t, "backoff gauge", func() bool { return testutil.ToFloat64(f.metrics.Backoff) == 1 })
			mu.Lock()
			code = http.StatusOK
			mu.Unlock()
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, steps); diff != "" {
		t.Errorf("intervals at which the pod was scraped (-want +got):\n%s", diff)
	}
	eventually(t, "backoff gauge back to 0", func() bool { return testutil.ToFloat64(f.metrics.Backoff) == 0 })
}

// Each pod keeps its own phase (from its UID): pods added together are
// first scraped at instants spread over the interval, then exactly once per
// interval at that phase.
func TestTargetsKeepTheirPhase(t *testing.T) {
	f := newFixture(t, defaultOptions())
	var (
		mu    sync.Mutex
		times = map[string][]time.Duration{}
	)
	t0 := f.clock.Now()
	good := readSample(t, vllmSample)
	e := newEngine(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		pod := r.URL.Query().Get("pod")
		times[pod] = append(times[pod], f.clock.Since(t0))
		mu.Unlock()
		serve(http.StatusOK, good).ServeHTTP(w, r)
	}))
	var targets []scrape.Target
	for i := range 20 {
		tg := e.target(fmt.Sprintf("pod-%d", i))
		tg.URL += "?pod=" + tg.Pod.Name
		targets = append(targets, tg)
	}
	f.startRun(t, func() []scrape.Target { return targets })

	// The clock moves in tenths of an interval; a pod due at phase p is scraped
	// at the first tenth at or after p, then one interval later, and so on.
	const tenth = interval / 10
	want := map[string][]time.Duration{}
	distinct := map[time.Duration]bool{}
	for _, tg := range targets {
		p := scrape.Phase(tg.UID, interval)
		first := (p + tenth - 1) / tenth * tenth
		distinct[first] = true
		want[tg.Pod.Name] = []time.Duration{first, first + interval, first + 2*interval}
	}
	hits := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, ts := range times {
			n += len(ts)
		}
		return n
	}
	for now := tenth; now <= 3*interval; now += tenth {
		f.step(t, tenth, 0)
		n := 0
		for _, ts := range want {
			for _, at := range ts {
				if at <= now {
					n++
				}
			}
		}
		eventually(t, fmt.Sprintf("%d scrapes by %s", n, now), func() bool { return hits() == n })
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, times); diff != "" {
		t.Errorf("scrape times per pod (-want +got):\n%s", diff)
	}
	if len(distinct) < 5 {
		t.Errorf("20 pods are first due at only %d distinct tenths of the interval, want them spread over it", len(distinct))
	}
}
