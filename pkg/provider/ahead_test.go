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

// TestTrendServedThroughHandlers serves a policy with a trend through the
// handlers: a demand rising 1 replica per 15 s (the HPA's sync period) is
// served 4 replicas ahead of itself once the samples span half the 1-minute
// window (slope 1/15 per second × 60 s lookahead), and the trend falls away
// once the demand stops rising.
func TestTrendServedThroughHandlers(t *testing.T) {
	body := func(done float64) string {
		return fmt.Sprintf("vllm:num_requests_waiting 0\nvllm:num_requests_running 0\nvllm:kv_cache_usage_perc 0.1\n"+
			"vllm:request_success_total{finished_reason=\"stop\"} %g\n", done)
	}
	e := newEngine(t, body(0))
	catalog, err := policy.NewCatalog(policy.Policy{Name: "chat-trend", Kind: policy.KindMean, UnknownSaturation: 1,
		Terms: []policy.Term{{Kind: policy.TermDemandRate, SetPoint: 1, Window: 10 * time.Second}},
		Trend: &policy.Trend{Window: time.Minute, Lookahead: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureCatalog(t, catalog, podSpec{name: "a", labels: map[string]string{"app": "x"}, engine: e})
	done := 0.0
	// step serves a demand of rate replicas: two scrapes 10 s apart, rate
	// requests per second between them (the term's window), 15 s per step.
	step := func(rate float64) string {
		f.clock.Step(5 * time.Second)
		e.set(200, body(done))
		f.scraper.ScrapeOne(context.Background(), mustTarget(t, f, "a"))
		f.clock.Step(10 * time.Second)
		done += 10 * rate
		e.set(200, body(done))
		f.scraper.ScrapeOne(context.Background(), mustTarget(t, f, "a"))
		return f.value(t, "llm", "chat-trend", "app=x")
	}
	for k, want := range []string{"1", "2", "7", "8", "9"} { // from the third sample on: demand + 4
		if got := step(float64(k + 1)); got != want {
			t.Errorf("rising, demand %d: served %s, want %s", k+1, got, want)
		}
	}
	var got string
	for range 5 { // flat at 5 for 75 s: the window holds no rise
		got = step(5)
	}
	if got != "5" {
		t.Errorf("flat for a window: served %s, want the demand 5", got)
	}
}
