package prometheus

import (
	"context"
	"errors"
	"net"

	"github.com/prometheus/client_golang/prometheus"
)

// metricsNamespace prefixes every metric of the adapter.
const metricsNamespace = "saturation_adapter"

// ErrorReason labels a failed query in
// saturation_adapter_prometheus_query_errors_total.
type ErrorReason string

// The reasons a query fails.
const (
	// ReasonTimeout: no answer within --prometheus-timeout (or Prometheus's
	// own query timeout).
	ReasonTimeout ErrorReason = "timeout"
	// ReasonConnect: the connection failed (refused, reset, DNS, TLS).
	ReasonConnect ErrorReason = "connect"
	// ReasonHTTPStatus: an HTTP status other than 2xx without a Prometheus
	// error body (a proxy, 401/403 from an auth gateway, 5xx).
	ReasonHTTPStatus ErrorReason = "http_status"
	// ReasonQuery: Prometheus answered with an error for the query (bad_data,
	// execution: too many samples, a rejected selector).
	ReasonQuery ErrorReason = "query"
	// ReasonResponse: the answer is not a result the adapter can read (not
	// JSON, a scalar, a body above --prometheus-max-response-bytes), or its
	// series would take the answers held at once past their bound.
	ReasonResponse ErrorReason = "response"
)

// ErrorReasons lists every ErrorReason, in documentation order.
func ErrorReasons() []ErrorReason {
	return []ErrorReason{ReasonTimeout, ReasonConnect, ReasonHTTPStatus, ReasonQuery, ReasonResponse}
}

// reasonOf classifies a query error.
func reasonOf(err error) ErrorReason {
	var qerr *QueryError
	var serr *StatusError
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, errTooLarge), errors.Is(err, ErrResponse), errors.Is(err, errHeld):
		return ReasonResponse
	case errors.As(err, &qerr):
		if qerr.Type == "timeout" {
			return ReasonTimeout
		}
		return ReasonQuery
	case errors.As(err, &serr):
		return ReasonHTTPStatus
	case errors.As(err, &netErr) && netErr.Timeout():
		return ReasonTimeout
	}
	return ReasonConnect
}

// Metrics are the Prometheus source's own metrics, on a registry the caller
// owns. Every metric is documented in the README; the package's tests keep the
// two in step.
type Metrics struct {
	// QueryDuration observes each query's wall time, in seconds, by query
	// ("series", "window") and outcome ("success", "error").
	QueryDuration *prometheus.HistogramVec
	// QueryErrors counts failed queries by ErrorReason.
	QueryErrors *prometheus.CounterVec
	// DataAge observes, for each pod whose data is served, the age of its newest
	// sample (the served value's freshness), in seconds.
	DataAge prometheus.Histogram
}

// NewMetrics creates the metrics and registers them with reg. It returns an
// error when any of them is already registered there.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		QueryDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Name: "prometheus_query_duration_seconds",
			Help:    "Duration of one query to Prometheus, in seconds, by query (series, window) and outcome (success, error).",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"query", "outcome"}),
		QueryErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "prometheus_query_errors_total",
			Help: "Failed queries to Prometheus, by reason.",
		}, []string{"reason"}),
		DataAge: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Name: "prometheus_data_age_seconds",
			Help:    "Age of the newest Prometheus sample of each pod whose data is served, in seconds: the freshness of the values served.",
			Buckets: []float64{1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 300},
		}),
	}
	for _, c := range []prometheus.Collector{m.QueryDuration, m.QueryErrors, m.DataAge} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
