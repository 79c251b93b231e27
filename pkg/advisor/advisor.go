// Package advisor says where people look (Kubernetes Events on the HPA, the log, a
// self-metric) when an HorizontalPodAutoscaler on the adapter's metrics is set up so that
// it cannot do what its owner expects: scale to zero on a metric computed from pods (at
// zero pods there is nothing to read: it never wakes up, hazard NC-15), or a Value target
// on a pool with demand but no Ready pod (the HPA multiplies by Ready pods and computes 0,
// hazard NC-08). It also notices a gateway holding requests for pools no policy reads
// (flow control in use without a gateway input, hazard NC-04).
package advisor

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/saturation-adapter/saturation-adapter/internal/excerpt"
	"github.com/saturation-adapter/saturation-adapter/pkg/hpaindex"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// Reason labels saturation_adapter_hpa_warnings and is the Event's reason.
type Reason string

// The warnings.
const (
	// ReasonNoZeroCapableInput: minReplicas is 0 but every metric of the HPA is one of
	// the adapter's computed from pods only (no gateway input).
	ReasonNoZeroCapableInput Reason = "NoZeroCapableInput"
	// ReasonValueTargetNoReadyPods: the pool has demand but no Ready pod, and the HPA
	// reads it with target type Value.
	ReasonValueTargetNoReadyPods Reason = "ValueTargetNoReadyPods"
)

// Reasons lists every Reason, in documentation order.
func Reasons() []Reason { return []Reason{ReasonNoZeroCapableInput, ReasonValueTargetNoReadyPods} }

// Catalogs gives the metric catalog in force.
type Catalogs interface {
	Catalog() *policy.Catalog
}

// metricsNamespace prefixes every metric of the adapter.
const metricsNamespace = "saturation_adapter"

// Metrics are the advisor's self-metrics, on a registry the caller owns.
type Metrics struct {
	// Warnings is 1 while a warning holds for an HPA, by its namespace and name
	// and the Reason.
	Warnings *prometheus.GaugeVec
	// UnmatchedGatewaySeries is the number of gateway queue series holding
	// requests that no policy's gateway input matches, at the last look.
	UnmatchedGatewaySeries prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Warnings: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "hpa_warnings",
			Help: "1 while a HorizontalPodAutoscaler on the adapter's metrics cannot do what it is set up for, by its namespace and name and the reason (NoZeroCapableInput, ValueTargetNoReadyPods).",
		}, []string{"namespace", "hpa", "reason"}),
		UnmatchedGatewaySeries: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "gateway_unmatched_series",
			Help: "Gateway flow-control queue series holding requests that no policy's gateway input matches (flow control in use for a pool whose policy has no gateway input).",
		}),
	}
	for _, c := range []prometheus.Collector{m.Warnings, m.UnmatchedGatewaySeries} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Advisor watches HPAs and the adapter's answers. Safe for concurrent use.
type Advisor struct {
	recorder record.EventRecorder
	catalogs Catalogs
	metrics  *Metrics

	// hpas is the adapter's index of HPAs (shared with the pod selection).
	hpas *hpaindex.Index

	mu     sync.Mutex
	active map[types.NamespacedName]map[Reason]bool
	// inflight holds the HPAs told that a scale-up (from zero) is in flight
	// (policy.Pool.InFlight), until it is over.
	inflight map[types.NamespacedName]bool
	warned   map[string]bool // unmatched gateway pools already logged
	// unmatched holds the gateway series (metric and labels) last seen holding
	// requests no gateway input matches, with when: the gauge counts them over
	// every gateway answered, not only the last one.
	unmatched map[string]time.Time
}

// unmatchedTTL is how long an unmatched gateway series stays counted after it
// was last seen (its gateway no longer answered for).
const unmatchedTTL = 10 * time.Minute

// New returns an Advisor recording Events with recorder (nil: no Events, log and
// metric only) about the HPAs of hpas (nil: an index of its own; register
// HPAHandler).
func New(recorder record.EventRecorder, catalogs Catalogs, metrics *Metrics, hpas *hpaindex.Index) *Advisor {
	if hpas == nil {
		hpas = hpaindex.New()
	}
	a := &Advisor{recorder: recorder, catalogs: catalogs, metrics: metrics, hpas: hpas,
		active: map[types.NamespacedName]map[Reason]bool{}, warned: map[string]bool{},
		unmatched: map[string]time.Time{}, inflight: map[types.NamespacedName]bool{}}
	hpas.Subscribe(a.hpaChanged)
	return a
}

// HPAHandler returns the event handler that keeps the advisor's index of HPAs;
// the adapter registers its shared index's handler itself.
func (a *Advisor) HPAHandler() cache.ResourceEventHandler { return a.hpas.Handler() }

// hpaChanged checks an HPA as it is added or changed, and forgets its warnings
// when it is deleted.
func (a *Advisor) hpaChanged(old, cur *hpaindex.HPA) {
	if cur == nil {
		a.mu.Lock()
		delete(a.active, old.Key)
		delete(a.inflight, old.Key)
		a.mu.Unlock()
		a.metrics.Warnings.DeletePartialMatch(prometheus.Labels{"namespace": old.Key.Namespace, "hpa": old.Key.Name})
		return
	}
	a.checkZero(cur, a.catalogs.Catalog())
}

// checkZero warns about minReplicas 0 when no metric of the HPA can wake it:
// every metric is one of the adapter's and none has a gateway input.
func (a *Advisor) checkZero(h *hpaindex.HPA, catalog *policy.Catalog) {
	others := h.NonExternal
	var names []string
	gateway := false
	for _, m := range h.External {
		p := catalog.Lookup(m.Name)
		if p == nil {
			others = true
			continue
		}
		names = append(names, m.Name)
		if p.Gateway != nil {
			gateway = true
		}
	}
	bad := h.MinReplicas == 0 && !others && len(names) > 0 && !gateway
	a.set(h, ReasonNoZeroCapableInput, bad, fmt.Sprintf(
		"minReplicas is 0 but %s is computed from the pods only: at zero pods there is nothing to read and this HPA never scales up again. "+
			"Scale from zero needs a metric with a gateway input (a policy with gateway: in the adapter's --config; docs/scale-to-zero.md)",
		strings.Join(names, ", ")))
}

// Answered is called with each External answer's pool: for the HPAs reading that
// (namespace, metric, selector) with a Value target, demand with no Ready pod is a
// warning (the HPA computes 0 replicas from it while it has replicas).
func (a *Advisor) Answered(namespace, metric string, selector labels.Selector, pool policy.Pool) {
	bad := pool.Pods == 0 && pool.Value != nil && *pool.Value > 0
	value := 0.0
	if pool.Value != nil {
		value = *pool.Value
	}
	metric, sel := strings.ToLower(metric), selector.String()
	for _, h := range a.hpas.For(namespace, metric, sel) {
		a.mu.Lock()
		a.inFlight(h, pool.InFlight)
		a.mu.Unlock()
		if !slices.ContainsFunc(h.External, func(m hpaindex.Metric) bool { return m.Name == metric && m.Key == sel && m.Value }) {
			continue
		}
		a.set(h, ReasonValueTargetNoReadyPods, bad && h.CurrentReplicas > 0, fmt.Sprintf(
			"%s has demand %.3g but no Ready pod: with target type Value the HPA multiplies by Ready pods and computes 0 replicas. "+
				"Use a demand policy (e.g. llm_demand_replicas) with target type AverageValue \"1\"", metric, value))
	}
}

// ReasonScaleUpInFlight is the reason of the Normal Event an HPA gets when
// the pool behind its metric has pods a scale-up created that are still
// starting and the adapter holds the demand for them (policy.Pool.InFlight:
// "scale-from-zero in flight: ..."), once per episode.
const ReasonScaleUpInFlight = "ScaleUpInFlight"

// inFlight records an HPA's scale-up in flight (msg, "" when none); a.mu is
// held.
func (a *Advisor) inFlight(h *hpaindex.HPA, msg string) {
	switch {
	case msg == "":
		delete(a.inflight, h.Key)
	case !a.inflight[h.Key]:
		a.inflight[h.Key] = true
		klog.V(2).InfoS("Scale-up in flight", "hpa", klog.KObj(h.Object), "message", msg)
		if a.recorder != nil {
			a.recorder.Event(h.Object, corev1.EventTypeNormal, ReasonScaleUpInFlight, msg)
		}
	}
}

// set records a warning's transitions: an Event and a log line when it starts, the
// gauge while it holds.
func (a *Advisor) set(h *hpaindex.HPA, r Reason, on bool, msg string) {
	key := h.Key
	a.mu.Lock()
	was := a.active[key][r]
	if on {
		if a.active[key] == nil {
			a.active[key] = map[Reason]bool{}
		}
		a.active[key][r] = true
	} else if a.active[key] != nil {
		delete(a.active[key], r)
	}
	a.mu.Unlock()
	g := a.metrics.Warnings.WithLabelValues(key.Namespace, key.Name, string(r))
	if !on {
		g.Set(0)
		return
	}
	g.Set(1)
	if was {
		return
	}
	klog.InfoS("Warning: HorizontalPodAutoscaler cannot do what it is set up for", "hpa", klog.KObj(h.Object), "reason", r, "message", msg)
	if a.recorder != nil {
		a.recorder.Event(h.Object, corev1.EventTypeWarning, string(r), msg)
	}
}

// maxUnmatchedLogged bounds the gateway pools remembered as logged, and
// maxUnmatchedCounted the unmatched series counted.
const (
	maxUnmatchedLogged  = 100
	maxUnmatchedCounted = 1000
)

// GatewaySeen checks gateway readings against the catalog: series holding
// requests that no policy's gateway input (of the same metric) matches mean flow
// control in use for a pool whose policy has no gateway input; each such pool is
// logged once, and the gauge counts the series.
func (a *Advisor) GatewaySeen(readings []*signals.Reading) {
	catalog := a.catalogs.Catalog()
	var inputs []*policy.GatewayInput
	for _, p := range catalog.Policies() {
		if p.Gateway != nil {
			inputs = append(inputs, p.Gateway)
		}
	}
	now := time.Now()
	var fresh []string
	a.mu.Lock()
	for _, r := range readings {
		if r == nil {
			continue
		}
		for i := range r.Gateway {
			s := &r.Gateway[i]
			key := s.Metric + describeAll(s.Labels)
			if s.Value <= 0 || slices.ContainsFunc(inputs, func(g *policy.GatewayInput) bool { return g.Reads(s.Metric) && s.Matches(g.Match) }) {
				delete(a.unmatched, key)
				continue
			}
			if _, ok := a.unmatched[key]; ok || len(a.unmatched) < maxUnmatchedCounted {
				a.unmatched[key] = now
			}
			id := describe(s.Labels)
			if !a.warned[id] && len(a.warned) < maxUnmatchedLogged {
				a.warned[id] = true
				fresh = append(fresh, id)
			}
		}
	}
	for k, at := range a.unmatched {
		if now.Sub(at) > unmatchedTTL {
			delete(a.unmatched, k)
		}
	}
	a.metrics.UnmatchedGatewaySeries.Set(float64(len(a.unmatched)))
	a.mu.Unlock()
	for _, id := range fresh {
		klog.InfoS("Warning: the gateway holds requests for a pool no policy's gateway input matches; its HPA scales on the engines alone, which sit at their set points while requests wait in the gateway", "series", id)
	}
}

// describeAll renders every label of a gateway series, sorted.
func describeAll(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString("\x00" + k + "=" + l[k])
	}
	return b.String()
}

// describe renders the identifying labels of a gateway series.
func describe(l map[string]string) string {
	var keys []string
	for k := range l {
		if k == "inference_pool" || strings.Contains(k, "model") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+"="+excerpt.String(l[k], 64))
	}
	return strings.Join(parts, ",")
}
