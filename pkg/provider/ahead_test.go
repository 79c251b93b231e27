package provider

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

// TestAheadServedThroughHandlers serves a policy with a demand-rate term, a
// peak hold and a scheduled minimum through custom-metrics-apiserver's
// handlers, scraping a real endpoint as the adapter does: the demand rate
// comes from the engine's finished counter and gauges over the scrapes, the
// served value holds the peak after the burst ends, and an open scheduled
// minimum floors it.
func TestAheadServedThroughHandlers(t *testing.T) {
	body := func(q, n, done float64) string {
		return fmt.Sprintf("vllm:num_requests_waiting %g\nvllm:num_requests_running %g\nvllm:kv_cache_usage_perc 0.1\n"+
			"vllm:request_success_total{finished_reason=\"stop\"} %g\n", q, n, done)
	}
	e := newEngine(t, body(0, 10, 1000))
	catalog, err := policy.NewCatalog(policy.Policy{Name: "chat-ahead", Kind: policy.KindMean, UnknownSaturation: 1,
		Terms: []policy.Term{{Kind: policy.TermQueueDepth, SetPoint: 100}, {Kind: policy.TermDemandRate, SetPoint: 5, Window: 20 * time.Second}},
		Peak:  &policy.PeakHold{Window: 5 * time.Minute, Headroom: 0.2},
		// 12:00–12:30 UTC every day; the fixture's clock starts at 12:00 on a Sunday.
		Minimums: []policy.ScheduledMinimum{{Schedule: "0 13 * * *", Duration: 30 * time.Minute, TimeZone: "Europe/Paris", Demand: 9}}})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureCatalog(t, catalog, podSpec{name: "a", labels: map[string]string{"app": "x"}, engine: e})
	scrape := func(q, n, done float64) {
		e.set(200, body(q, n, done))
		f.scraper.ScrapeOne(context.Background(), mustTarget(t, f, "a"))
	}
	f.clock.Step(-3 * time.Hour) // 09:00 UTC: outside the scheduled window
	scrape(0, 10, 1000)
	f.clock.Step(10 * time.Second)
	// 200 finished + 10 more held over 10 s: 21 requests/s, 4.2 replicas at 5
	// per replica; a mean over 1 pod, held × 1.2: 5.04.
	scrape(0, 20, 1200)
	if got := f.value(t, "llm", "chat-ahead", "app=x"); got != "5040m" {
		t.Errorf("during the burst: %s, want 5040m (21 requests/s / 5 × 1.2)", got)
	}
	f.clock.Step(10 * time.Second)
	scrape(0, 5, 1225) // the burst ends: 25 − 15 = 10 arrivals over 10 s, 0.4 replicas
	if got := f.value(t, "llm", "chat-ahead", "app=x"); got != "5040m" {
		t.Errorf("after the burst: %s, want the held 5040m", got)
	}
	f.clock.Step(3*time.Hour - 20*time.Second + time.Minute) // 12:01 UTC = 13:01 in Paris (CET): the window is open
	for range 3 {
		scrape(0, 5, 1225)
		f.clock.Step(2 * time.Second)
	}
	if got := f.value(t, "llm", "chat-ahead", "app=x"); got != "9" {
		t.Errorf("in the scheduled window: %s, want 9", got)
	}
}
