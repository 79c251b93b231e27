package prometheus

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

// No request waits on a refresh: while the stand-in Prometheus holds a
// refresh's queries (for as long as the test wants: it answers only when
// released, so no clock decides it), every request is answered from memory
// with the previous answer, its reported age within the max age, and asks
// Prometheus nothing more; once the refresh lands its answer is served. An
// answer older than the max age is an error naming its age and the refresh
// still running, never the old values.
func TestSlowRefreshBlocksNoRequest(t *testing.T) {
	const requests = 64
	app := map[string]string{"app": "x"}
	prom := newFakeProm(t, ok(nil))
	// A timeout far above what the test takes between holding and releasing
	// the stand-in: the refresh ends when the test says, not by its deadline.
	// The answer's max age is then max(MaxAge, CachePeriod+Timeout) = 45 s.
	const maxAge = 45 * time.Second
	f := newFixture(t, prom, fixtureOptions{opts: Options{Timeout: 30 * time.Second, MaxAge: maxAge}},
		pod{name: "a", labels: app}, pod{name: "b", labels: app})
	if got := f.source.maxAnswerAge(); got != maxAge {
		t.Fatalf("max answer age %s, want %s", got, maxAge)
	}
	waiting := func(at time.Time, n int) func(string) (int, string) {
		return ok(map[string]string{"series": matrix(t,
			stream(vllm("vllm:num_requests_waiting", "a"), at, n),
			stream(vllm("vllm:num_requests_waiting", "b"), at, n),
		)})
	}
	// saturation asks for both pods' llm_saturation and returns the answer.
	saturation := func() answer { return f.get(t, "llm", policy.MetricSaturation, "app=x") }
	want := func(r answer, value string, sampled time.Time) {
		t.Helper()
		if r.code != http.StatusOK {
			t.Fatalf("HTTP %d (%s), want 200 from memory", r.code, r.status.Message)
		}
		it := r.list.Items[0]
		if got := it.Value.String(); got != value {
			t.Errorf("value %s, want %s", got, value)
		}
		if !it.Timestamp.Time.Equal(sampled) {
			t.Errorf("timestamp %s, want the served answer's sample time %s", it.Timestamp.Time, sampled)
		}
		if age := f.clock.Now().Sub(it.Timestamp.Time); age > maxAge {
			t.Errorf("served data %s old, beyond the max age %s", age, maxAge)
		}
	}
	// concurrently sends n requests at once and returns their answers.
	concurrently := func(n int) []answer {
		out := make([]answer, n)
		var wg sync.WaitGroup
		for i := range out {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out[i] = saturation()
			}()
		}
		wg.Wait()
		return out
	}
	// heldRefresh waits until the held refresh's queries have reached the
	// stand-in: as many as a refresh runs at once.
	queries := min(len(f.source.gen.Load().plan.queries("llm")), maxQueriesInFlight)
	heldRefresh := func(arrived <-chan string) {
		t.Helper()
		for range queries {
			<-arrived
		}
		if got := prom.held(); got != queries {
			t.Fatalf("the stand-in holds %d queries, want the refresh's %d", got, queries)
		}
	}

	// The first answer: 10 waiting per pod, saturation 10 / 5 = 2.
	a := f.clock.Now().Add(-time.Second)
	prom.set(waiting(a, 10))
	want(saturation(), "2", a)

	// A cache period later the refresh (Source.Run's tick) is held by the
	// stand-in with a new answer ready (20 waiting: 4).
	f.clock.Step(DefaultCachePeriod)
	fetched := f.clock.Now()
	b := fetched.Add(-time.Second)
	prom.set(waiting(b, 20))
	arrived, release := prom.block()
	f.source.refreshAll(f.clock.Now())
	heldRefresh(arrived)
	before := prom.count()["series"]
	for _, r := range concurrently(requests) {
		want(r, "2", a)
	}
	// Each request was answered while the refresh's queries were held: none
	// was given up (a request waiting on the refresh would have waited for
	// the query's timeout).
	stillHeld := func() {
		t.Helper()
		if got := prom.held(); got != queries {
			t.Fatalf("the stand-in holds %d queries, want the refresh's %d still held", got, queries)
		}
	}
	stillHeld()
	// Time passes with the refresh still held, until the samples served are
	// a second short of the max age: still the previous answer, its age
	// growing, and no request asks again.
	f.clock.SetTime(a.Add(maxAge - time.Second))
	for _, r := range concurrently(requests) {
		want(r, "2", a)
	}
	stillHeld()
	if got := prom.count()["series"]; got != before {
		t.Errorf("%d engine series queries during one held refresh, want %d: requests asked Prometheus themselves", got, before)
	}
	release()
	f.source.refreshing.Wait()
	// The answer landed is as old as the refresh took (asked for at
	// fetched): the request serving it starts the next refresh, which the
	// stand-in answers at once.
	want(saturation(), "4", b)
	fetched = f.clock.Now()
	f.source.refreshing.Wait()

	// The next refresh is held past the max age of the answer served (the
	// one asked for at fetched): every request is an error naming its age
	// and the refresh running.
	arrived, release = prom.block()
	f.clock.Step(DefaultCachePeriod)
	f.source.refreshAll(f.clock.Now())
	heldRefresh(arrived)
	f.clock.SetTime(fetched.Add(maxAge + time.Second))
	for _, r := range concurrently(requests) {
		if r.code != http.StatusServiceUnavailable {
			t.Fatalf("HTTP %d, want 503 for an answer older than the max age", r.code)
		}
		for _, s := range []string{"is 46s old, older than the max age 45s", "a refresh is running"} {
			if !strings.Contains(r.status.Message, s) {
				t.Errorf("message %q lacks %q", r.status.Message, s)
			}
		}
	}
	release()
	f.source.refreshing.Wait()

	// Prometheus answering in time again, its answer is served.
	c := f.clock.Now().Add(DefaultCachePeriod - time.Second)
	prom.set(waiting(c, 5))
	f.step(DefaultCachePeriod)
	want(saturation(), "1", c)
}
