package scrape

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// MetricsNamespace prefixes every metric of the adapter.
const MetricsNamespace = "saturation_adapter"

// ErrorReason labels a failed scrape in saturation_adapter_scrape_errors_total.
type ErrorReason string

// The reasons a scrape fails.
const (
	// ReasonConnect: the connection failed (refused, reset, TLS verification).
	ReasonConnect ErrorReason = "connect"
	// ReasonTimeout: no whole answer within Options.Timeout.
	ReasonTimeout ErrorReason = "timeout"
	// ReasonHTTPStatus: an answer other than 200 OK.
	ReasonHTTPStatus ErrorReason = "http_status"
	// ReasonBodyTooLarge: a body above Options.MaxBodyBytes.
	ReasonBodyTooLarge ErrorReason = "body_too_large"
	// ReasonRead: the body could not be read to its end.
	ReasonRead ErrorReason = "read"
	// ReasonParse: the body is not a valid text exposition.
	ReasonParse ErrorReason = "parse"
	// ReasonNoEngineMetrics: the body parses but has no supported engine metric.
	ReasonNoEngineMetrics ErrorReason = "no_engine_metrics"
	// ReasonRequest: the request could not be built (a malformed URL).
	ReasonRequest ErrorReason = "request"
	// ReasonTooManySeries: more series of the engine families read than
	// --scrape-max-series.
	ReasonTooManySeries ErrorReason = "too_many_series"
	// ReasonTooManyEngines: more engines in one body than --scrape-max-engines.
	ReasonTooManyEngines ErrorReason = "too_many_engines"
	// ReasonOverBudget: the reading would take its namespace's kept readings
	// past --scrape-readings-budget-bytes (it is not stored), or its body
	// grew past the room --scrape-inflight-bytes left.
	ReasonOverBudget ErrorReason = "over_budget"
	// ReasonModelNotLoaded: llama.cpp's router (llama-server in router mode)
	// answered that the model the scrape URL names is not loaded. The
	// adapter never loads it (autoload=false): the pod is not serving that
	// model, which is not a fault of the scrape.
	ReasonModelNotLoaded ErrorReason = "model_not_loaded"
)

// ErrorReasons lists every ErrorReason, in documentation order.
func ErrorReasons() []ErrorReason {
	return []ErrorReason{ReasonConnect, ReasonTimeout, ReasonHTTPStatus, ReasonBodyTooLarge, ReasonRead, ReasonParse, ReasonNoEngineMetrics, ReasonRequest,
		ReasonTooManySeries, ReasonTooManyEngines, ReasonOverBudget, ReasonModelNotLoaded}
}

// Outcome labels saturation_adapter_scrape_duration_seconds.
type Outcome string

// The outcomes of a scrape.
const (
	OutcomeSuccess Outcome = "success"
	OutcomeError   Outcome = "error"
)

// Metrics are the scrape path's own metrics, on a registry the caller owns.
// Every metric is documented in the README; the package's tests keep the two in
// step.
type Metrics struct {
	// Duration observes the wall time of one scrape of one pod, in seconds, by
	// Outcome.
	Duration *prometheus.HistogramVec
	// Errors counts failed scrapes by ErrorReason.
	Errors *prometheus.CounterVec
	// InvalidSamples counts series rejected by validity checks, by
	// signals.Reason: engine and gateway series, scraped or (with the
	// Prometheus source, which shares this counter) read from Prometheus.
	InvalidSamples *prometheus.CounterVec
	// DuplicateSeries counts duplicate series not used as read, by
	// signals.DuplicateOutcome, from every source as InvalidSamples.
	DuplicateSeries *prometheus.CounterVec
	// Targets is the number of pods in the current scrape set.
	Targets prometheus.Gauge
	// Backoff is the number of pods of the scrape set whose last scheduled
	// scrape failed: they are retried with exponential backoff, up to
	// MaxBackoffIntervals scrape intervals apart.
	Backoff prometheus.Gauge
	// Skipped counts scheduled scrapes that did not happen because the pod's
	// previous scrape was still waiting for a slot or running when the next was
	// due: capacity (Options.Concurrency) is short or engines are slow.
	Skipped prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg. It returns an
// error when any of them is already registered there.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: MetricsNamespace, Name: "scrape_duration_seconds",
			Help:    "Duration of one scrape of one engine's /metrics endpoint, in seconds, by outcome.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}, []string{"outcome"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "scrape_errors_total",
			Help: "Failed scrapes of engine /metrics endpoints, by reason.",
		}, []string{"reason"}),
		InvalidSamples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "invalid_samples_total",
			Help: "Engine and gateway series rejected before use (NaN, Inf, negative, out of range), by reason, whatever their source.",
		}, []string{"reason"}),
		DuplicateSeries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "duplicate_series_total",
			Help: "Duplicate series of one pod, engine and metric not used as read, by outcome: older (a duplicate has a newer sample) or disagree (equally new duplicates with different values, folded to their maximum), whatever their source.",
		}, []string{"outcome"}),
		Targets: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: MetricsNamespace, Name: "scrape_targets",
			Help: "Pods in the current scrape set.",
		}),
		Backoff: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: MetricsNamespace, Name: "scrape_backoff_targets",
			Help: "Pods in the scrape set whose last scheduled scrape failed, retried with exponential backoff.",
		}),
		Skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "scrape_skipped_total",
			Help: "Scheduled scrapes skipped because the pod's previous scrape was still waiting for a slot or running.",
		}),
	}
	for _, c := range []prometheus.Collector{m.Duration, m.Errors, m.InvalidSamples, m.DuplicateSeries, m.Targets, m.Backoff, m.Skipped} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observe(o Outcome, seconds float64) {
	m.Duration.WithLabelValues(string(o)).Observe(seconds)
}

func (m *Metrics) failed(r ErrorReason) { m.Errors.WithLabelValues(string(r)).Inc() }

// Count counts a reading's rejected and duplicate series (the Prometheus
// source counts the readings it builds here too).
func (m *Metrics) Count(r *signals.Reading) {
	for why, n := range r.Invalid {
		m.InvalidSamples.WithLabelValues(string(why)).Add(float64(n))
	}
	for o, n := range r.Duplicates {
		m.DuplicateSeries.WithLabelValues(string(o)).Add(float64(n))
	}
}
