// Package selfmetrics holds the adapter's own Prometheus metrics, on a registry
// the caller owns. Every metric is documented in the README; TestMetricsDocumented
// keeps that list and this file in step.
package selfmetrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric of the adapter.
const Namespace = "saturation_adapter"

// Metrics are the adapter's self-observability metrics.
type Metrics struct {
	// ScrapeDuration observes the wall time of one scrape of one pod, in seconds,
	// by outcome ("success" or "error").
	ScrapeDuration *prometheus.HistogramVec
	// ScrapeErrors counts failed scrapes by reason (connect, timeout, http_status,
	// body_too_large, read, parse, no_engine_metrics, request).
	ScrapeErrors *prometheus.CounterVec
	// InvalidSamples counts series rejected by validity checks, by reason (nan,
	// inf, negative, above_range).
	InvalidSamples *prometheus.CounterVec
	// ScrapeTargets is the number of pods in the current scrape set.
	ScrapeTargets prometheus.Gauge
	// PoolPods is the number of pods behind the last answer for one (namespace,
	// metric, selector), by state ("counted" or "unknown").
	PoolPods *prometheus.GaugeVec
	// ServedValue is the last value served for one (namespace, metric, selector).
	ServedValue *prometheus.GaugeVec
	// Requests counts External metric requests by metric and result ("ok",
	// "not_found", "no_pods", "no_data", "error").
	Requests *prometheus.CounterVec
}

// New creates the metrics and registers them with reg. It returns an error when
// any of them is already registered there.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		ScrapeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "scrape_duration_seconds",
			Help:    "Duration of one scrape of one engine's /metrics endpoint, in seconds, by outcome.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}, []string{"outcome"}),
		ScrapeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "scrape_errors_total",
			Help: "Failed scrapes of engine /metrics endpoints, by reason.",
		}, []string{"reason"}),
		InvalidSamples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "invalid_samples_total",
			Help: "Engine series rejected before use (NaN, Inf, negative, ratio above 1), by reason.",
		}, []string{"reason"}),
		ScrapeTargets: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "scrape_targets",
			Help: "Pods in the current scrape set.",
		}),
		PoolPods: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "pool_pods",
			Help: "Pods behind the last answer for a namespace, metric and selector, by state (counted, unknown).",
		}, []string{"namespace", "metric", "selector", "state"}),
		ServedValue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "served_value",
			Help: "Last value served for a namespace, metric and selector.",
		}, []string{"namespace", "metric", "selector"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "requests_total",
			Help: "External metric requests, by metric and result (ok, not_found, no_pods, no_data, error).",
		}, []string{"metric", "result"}),
	}
	for _, c := range []prometheus.Collector{m.ScrapeDuration, m.ScrapeErrors, m.InvalidSamples, m.ScrapeTargets, m.PoolPods, m.ServedValue, m.Requests} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ForgetSelector deletes the per-selector series (pool pods, served value) of a
// namespace and selector nobody asks about any more, so that they neither go stale
// nor accumulate.
func (m *Metrics) ForgetSelector(namespace, selector string) {
	l := prometheus.Labels{"namespace": namespace, "selector": selector}
	m.PoolPods.DeletePartialMatch(l)
	m.ServedValue.DeletePartialMatch(l)
}
