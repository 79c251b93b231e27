package provider

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"k8s.io/apimachinery/pkg/types"
)

// metricsNamespace prefixes every metric of the adapter.
const metricsNamespace = "saturation_adapter"

// Result labels saturation_adapter_requests_total.
type Result string

// The results of a request.
const (
	// ResultOK: a value was served.
	ResultOK Result = "ok"
	// ResultNotFound: the metric is not in the catalog.
	ResultNotFound Result = "not_found"
	// ResultNoPods: the selector matches no pod.
	ResultNoPods Result = "no_pods"
	// ResultNoData: pods match but none gives a value (not Ready, no fresh
	// reading, signal absent) or the adapter is still starting.
	ResultNoData Result = "no_data"
	// ResultError: a bad request, an unwatched namespace, or a value out of range.
	ResultError Result = "error"
)

// Results lists every Result, in documentation order.
func Results() []Result {
	return []Result{ResultOK, ResultNotFound, ResultNoPods, ResultNoData, ResultError}
}

// PodState labels saturation_adapter_pool_pods.
type PodState string

// The states of a pool's pods.
const (
	// PodsCounted: Running, Ready, not terminating pods behind the answer.
	PodsCounted PodState = "counted"
	// PodsUnknown: counted pods without fresh, usable data (no reading, stale,
	// or an engine that cannot serve).
	PodsUnknown PodState = "unknown"
	// PodsHeld: unknown pods counted at their last good value.
	PodsHeld PodState = "held"
	// PodsSleeping, PodsFrozen, PodsWedged, PodsClipped: pods by engine state
	// (policy.EngineState).
	PodsSleeping PodState = PodState(policy.StateSleeping)
	PodsFrozen   PodState = PodState(policy.StateFrozen)
	PodsWedged   PodState = PodState(policy.StateWedged)
	PodsClipped  PodState = PodState(policy.StateClipped)
)

// PodStates lists every PodState, in documentation order.
func PodStates() []PodState {
	return []PodState{PodsCounted, PodsUnknown, PodsHeld, PodsSleeping, PodsFrozen, PodsWedged, PodsClipped}
}

// podCounts returns the pods of a pool by PodState.
func podCounts(p policy.Pool) map[PodState]int {
	return map[PodState]int{
		PodsCounted: p.Pods, PodsUnknown: p.Pods - p.Known, PodsHeld: p.Held,
		PodsSleeping: p.States[policy.StateSleeping], PodsFrozen: p.States[policy.StateFrozen],
		PodsWedged: p.States[policy.StateWedged], PodsClipped: p.States[policy.StateClipped],
	}
}

// metricUnknown labels requests for a metric the catalog does not have, so that
// request text never becomes a label value.
const metricUnknown = "unknown"

// Metrics are the provider's own metrics, on a registry the caller owns. Their
// label values are bounded by what the operator configures (metric catalog,
// HorizontalPodAutoscalers), never by what a client sends. Every metric is
// documented in the README; the package's tests keep the two in step.
type Metrics struct {
	// Requests counts External and per-pod metric requests by metric (a catalog
	// name, or "unknown") and Result.
	Requests *prometheus.CounterVec
	// ServedValue is the last External value served to a HorizontalPodAutoscaler,
	// by the HPA's namespace and name and the metric. Requests that match no HPA
	// (a person's kubectl) are not recorded here.
	ServedValue *prometheus.GaugeVec
	// PoolPods is the number of pods behind that answer, by PodState.
	PoolPods *prometheus.GaugeVec
	// PeakStatesEvicted counts the pool states of peak-hold and trend
	// policies dropped to keep a namespace within its bound, by who asked
	// about the pool (hpa, request): that pool's peak hold and trend started
	// afresh.
	PeakStatesEvicted *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg. It returns an
// error when any of them is already registered there.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "requests_total",
			Help: "External and per-pod metric requests, by metric and result (ok, not_found, no_pods, no_data, error).",
		}, []string{"metric", "result"}),
		ServedValue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "served_value",
			Help: "Last External metric value served to a HorizontalPodAutoscaler, by its namespace and name and the metric.",
		}, []string{"namespace", "hpa", "metric"}),
		PoolPods: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "pool_pods",
			Help: "Pods behind the last External answer to a HorizontalPodAutoscaler, by state (counted, unknown, held, and by engine state).",
		}, []string{"namespace", "hpa", "metric", "state"}),
		PeakStatesEvicted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "peak_states_evicted_total",
			Help: "Pool states of peak-hold and trend policies dropped because their namespace kept the most pools of that kind (asked by an HPA, or by other requests only); the pool's peak hold and trend start afresh.",
		}, []string{"asked_by"}),
	}
	for _, c := range []prometheus.Collector{m.Requests, m.ServedValue, m.PoolPods, m.PeakStatesEvicted} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, c := range peakClasses {
		m.PeakStatesEvicted.WithLabelValues(c) // 0 until the first eviction, not absent
	}
	return m, nil
}

func (m *Metrics) request(metric string, r Result) {
	m.Requests.WithLabelValues(metric, string(r)).Inc()
}

// peakStateEvicted counts a peak-hold state dropped for room; class is one
// of peakClasses.
func (m *Metrics) peakStateEvicted(class string) {
	m.PeakStatesEvicted.WithLabelValues(class).Inc()
}

// served records an answer for each HPA it was computed for.
func (m *Metrics) served(namespace string, hpas []string, metric string, value float64, pool policy.Pool) {
	counts := podCounts(pool)
	for _, h := range hpas {
		m.ServedValue.WithLabelValues(namespace, h, metric).Set(value)
		for _, st := range PodStates() {
			m.PoolPods.WithLabelValues(namespace, h, metric, string(st)).Set(float64(counts[st]))
		}
	}
}

// ForgetHPA deletes the series of a HorizontalPodAutoscaler that no longer
// exists, so that they neither go stale nor accumulate.
func (m *Metrics) ForgetHPA(hpa types.NamespacedName) {
	l := prometheus.Labels{"namespace": hpa.Namespace, "hpa": hpa.Name}
	m.ServedValue.DeletePartialMatch(l)
	m.PoolPods.DeletePartialMatch(l)
}
