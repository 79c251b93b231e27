package scrape_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/saturation-adapter/saturation-adapter/internal/metricdocs"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// TestMetricsDocumented keeps the documented metric table and this package's
// metrics in step: names, types, labels and every value of a fixed label.
func TestMetricsDocumented(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := scrape.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	// Every label value the code can produce, from its typed constants.
	for _, o := range []scrape.Outcome{scrape.OutcomeSuccess, scrape.OutcomeError} {
		m.Duration.WithLabelValues(string(o)).Observe(0.01)
	}
	for _, r := range scrape.ErrorReasons() {
		m.Errors.WithLabelValues(string(r))
	}
	for _, r := range signals.Reasons() {
		m.InvalidSamples.WithLabelValues(string(r))
	}
	for _, o := range signals.DuplicateOutcomes() {
		m.DuplicateSeries.WithLabelValues(string(o))
	}
	metricdocs.Check(t, reg, "../../", 7)
}

// TestMetricsExposition is the golden exposition of the scrape path's counters
// and gauge after one round over a good engine, a failing one and one serving a
// NaN KV-cache usage. (The duration histogram's buckets depend on timing; its
// counts are checked instead.)
func TestMetricsExposition(t *testing.T) {
	f := newFixture(t, defaultOptions())
	good := newEngine(t, serve(http.StatusOK, readSample(t, vllmSample)))
	failing := newEngine(t, serve(http.StatusInternalServerError, []byte("boom")))
	nan := newEngine(t, serve(http.StatusOK, []byte("vllm:num_requests_waiting 1\nvllm:kv_cache_usage_perc NaN\n")))
	f.scraper.Sync(context.Background(), []scrape.Target{good.target("good"), failing.target("failing"), nan.target("nan")})
	const want = `
# HELP saturation_adapter_invalid_samples_total Engine and gateway series rejected before use (NaN, Inf, negative, out of range), by reason, whatever their source.
# TYPE saturation_adapter_invalid_samples_total counter
saturation_adapter_invalid_samples_total{reason="nan"} 1
# HELP saturation_adapter_scrape_errors_total Failed scrapes of engine /metrics endpoints, by reason.
# TYPE saturation_adapter_scrape_errors_total counter
saturation_adapter_scrape_errors_total{reason="http_status"} 1
# HELP saturation_adapter_scrape_targets Pods in the current scrape set.
# TYPE saturation_adapter_scrape_targets gauge
saturation_adapter_scrape_targets 3
`
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want),
		"saturation_adapter_invalid_samples_total", "saturation_adapter_scrape_errors_total", "saturation_adapter_scrape_targets"); err != nil {
		t.Error(err)
	}
	for outcome, n := range map[scrape.Outcome]int{scrape.OutcomeSuccess: 2, scrape.OutcomeError: 1} {
		if got := testutil.CollectAndCount(f.metrics.Duration.WithLabelValues(string(outcome)).(prometheus.Histogram)); got != 1 {
			t.Errorf("duration{outcome=%q}: %d series, want 1", outcome, got)
		}
		if got := histogramCount(t, f.reg, string(outcome)); got != uint64(n) {
			t.Errorf("duration{outcome=%q} count = %d, want %d", outcome, got, n)
		}
	}
}

func histogramCount(t *testing.T, reg *prometheus.Registry, outcome string) uint64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "saturation_adapter_scrape_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == outcome {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}
