// Package provider serves the adapter's External metrics to the HPA through
// sigs.k8s.io/custom-metrics-apiserver: one request (namespace, metric, label
// selector) in, one metric value out.
package provider

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/metrics/pkg/apis/external_metrics"
	"k8s.io/utils/clock"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/saturation-adapter/saturation-adapter/pkg/discovery"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
	"github.com/saturation-adapter/saturation-adapter/pkg/selfmetrics"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// The External metrics served. Names are lower-case because the HPA's client
// lower-cases the metric name in the request path.
const (
	// MetricSaturation is the mean per-pod saturation of the pool (1.0 = at the
	// set point). For an HPA target of type Value, e.g. value: "1".
	MetricSaturation = "llm_saturation"
	// MetricDemandReplicas is the sum of per-pod saturations: the replicas needed
	// at the set point. For an HPA target of type AverageValue, averageValue: "1".
	MetricDemandReplicas = "llm_demand_replicas"
	// MetricQueueDepth is the pool's total queue depth (waiting requests).
	MetricQueueDepth = "llm_num_requests_waiting"
	// MetricRunning is the pool's total of running requests.
	MetricRunning = "llm_num_requests_running"
	// MetricKVCacheUsage is the pool's mean KV-cache usage ratio (0..1).
	MetricKVCacheUsage = "llm_kv_cache_usage"
)

// Catalog returns the names of the External metrics served, in documentation order.
func Catalog() []string {
	return []string{MetricSaturation, MetricDemandReplicas, MetricQueueDepth, MetricRunning, MetricKVCacheUsage}
}

// Pods finds the pods of a request and records the request's interest.
type Pods interface {
	// Touch records that namespace and selector were asked about.
	Touch(namespace string, selector labels.Selector)
	// Pods lists the pods of namespace matched by selector.
	Pods(namespace string, selector labels.Selector) ([]*corev1.Pod, error)
	// TargetFor returns the scrape target of a pod.
	TargetFor(pod *corev1.Pod) (scrape.Target, error)
}

// Readings gives the latest scrape result of pods and scrapes on demand.
type Readings interface {
	Latest(key types.NamespacedName) (*scrape.Result, bool)
	ScrapeAll(ctx context.Context, targets []scrape.Target, prune bool)
}

// Options configure the provider.
type Options struct {
	// UnknownSaturation is the saturation counted for a Ready pod without fresh
	// data (default 1.0, as the Gateway API inference extension does).
	UnknownSaturation float64
	// MaxAge is the age beyond which a pod's last reading is stale.
	MaxAge time.Duration
	// ColdScrapeTimeout bounds the on-demand scrape of Ready pods that were never
	// scraped (a selector nobody asked about before); 0 disables it.
	ColdScrapeTimeout time.Duration
}

// Provider implements the External metrics API of custom-metrics-apiserver.
type Provider struct {
	opts     Options
	pods     Pods
	readings Readings
	clock    clock.PassiveClock
	metrics  *selfmetrics.Metrics
}

var _ cmprovider.ExternalMetricsProvider = (*Provider)(nil)

// New returns a Provider.
func New(opts Options, pods Pods, readings Readings, clk clock.PassiveClock, metrics *selfmetrics.Metrics) *Provider {
	return &Provider{opts: opts, pods: pods, readings: readings, clock: clk, metrics: metrics}
}

// ListAllExternalMetrics lists the catalog.
func (p *Provider) ListAllExternalMetrics() []cmprovider.ExternalMetricInfo {
	var out []cmprovider.ExternalMetricInfo
	for _, m := range Catalog() {
		out = append(out, cmprovider.ExternalMetricInfo{Metric: m})
	}
	return out
}

// GetExternalMetric answers one HPA request with exactly one item computed over
// the Running, Ready, non-terminating pods of namespace matched by
// metricSelector. Errors are API statuses: 404 for an unknown metric or a selector
// that matches no pod, 503 when pods match but none has fresh data (the HPA then
// holds its replica count) and their messages say which pods and why.
func (p *Provider) GetExternalMetric(ctx context.Context, namespace string, metricSelector labels.Selector, info cmprovider.ExternalMetricInfo) (*external_metrics.ExternalMetricValueList, error) {
	name := strings.ToLower(info.Metric)
	if !slices.Contains(Catalog(), name) {
		p.metrics.Requests.WithLabelValues("unknown", "not_found").Inc()
		return nil, cmprovider.NewMetricNotFoundError(external_metrics.Resource(info.Metric), info.Metric)
	}
	value, ts, pool, err := p.compute(ctx, name, namespace, metricSelector)
	if err != nil {
		klog.V(2).InfoS("external metric request failed", "namespace", namespace, "metric", name, "selector", metricSelector.String(), "err", err)
		return nil, err
	}
	q, err := MilliQuantity(value)
	if err != nil {
		p.metrics.Requests.WithLabelValues(name, "error").Inc()
		return nil, apierrors.NewInternalError(fmt.Errorf("%s in namespace %q for selector %q: %w", name, namespace, metricSelector, err))
	}
	sel := metricSelector.String()
	p.metrics.Requests.WithLabelValues(name, "ok").Inc()
	p.metrics.ServedValue.WithLabelValues(namespace, name, sel).Set(q.AsApproximateFloat64())
	p.metrics.PoolPods.WithLabelValues(namespace, name, sel, "counted").Set(float64(pool.Pods))
	p.metrics.PoolPods.WithLabelValues(namespace, name, sel, "unknown").Set(float64(pool.Pods - pool.Known))
	return &external_metrics.ExternalMetricValueList{Items: []external_metrics.ExternalMetricValue{{
		MetricName: info.Metric,
		MetricLabels: map[string]string{
			"pods":         strconv.Itoa(pool.Pods),
			"pods_unknown": strconv.Itoa(pool.Pods - pool.Known),
		},
		Timestamp: metav1.NewTime(ts),
		Value:     q,
	}}}, nil
}

// compute returns the value of metric over the pool, the time of its oldest
// contributing sample, and the pool it was computed from.
func (p *Provider) compute(ctx context.Context, metric, namespace string, selector labels.Selector) (float64, time.Time, signals.Pool, error) {
	where := fmt.Sprintf("%s in namespace %q for selector %q", metric, namespace, selector)
	if namespace == "" {
		p.metrics.Requests.WithLabelValues(metric, "error").Inc()
		return 0, time.Time{}, signals.Pool{}, apierrors.NewBadRequest(where + ": a namespace is required; pools never span namespaces")
	}
	p.pods.Touch(namespace, selector)
	pods, err := p.pods.Pods(namespace, selector)
	if err != nil {
		p.metrics.Requests.WithLabelValues(metric, "error").Inc()
		return 0, time.Time{}, signals.Pool{}, apierrors.NewServiceUnavailable(fmt.Sprintf("%s: %v", where, err))
	}
	if len(pods) == 0 {
		p.metrics.Requests.WithLabelValues(metric, "no_pods").Inc()
		return 0, time.Time{}, signals.Pool{}, newStatus(http.StatusNotFound, metav1.StatusReasonNotFound,
			fmt.Sprintf("%s: no pods match; check the HPA's metric.selector against the pod labels", where))
	}
	now := p.clock.Now()
	counted, pool, oldest, unknown, cold := p.fold(pods, now)
	if counted == 0 {
		p.metrics.Requests.WithLabelValues(metric, "no_data").Inc()
		return 0, time.Time{}, signals.Pool{}, apierrors.NewServiceUnavailable(
			fmt.Sprintf("%s: %d pods match but none is Running and Ready", where, len(pods)))
	}
	if cold && p.scrapeCold(ctx, pods) {
		counted, pool, oldest, unknown, _ = p.fold(pods, p.clock.Now())
	}
	slices.Sort(unknown)
	if pool.Known == 0 {
		p.metrics.Requests.WithLabelValues(metric, "no_data").Inc()
		return 0, time.Time{}, pool, apierrors.NewServiceUnavailable(
			fmt.Sprintf("%s: %d Ready pods match, none has fresh data: %s", where, counted, summarize(unknown)))
	}
	if len(unknown) > 0 {
		klog.V(2).InfoS("pods without fresh data count as saturated", "namespace", namespace, "selector", selector.String(),
			"unknownSaturation", p.opts.UnknownSaturation, "pods", unknown)
	}

	var v *float64
	switch metric {
	case MetricSaturation:
		v = &pool.Saturation
	case MetricDemandReplicas:
		v = &pool.DemandReplicas
	case MetricQueueDepth:
		v = pool.QueueDepth
	case MetricRunning:
		v = pool.Running
	case MetricKVCacheUsage:
		v = pool.KVCacheUsage
	}
	if v == nil {
		p.metrics.Requests.WithLabelValues(metric, "no_data").Inc()
		return 0, time.Time{}, pool, apierrors.NewServiceUnavailable(
			fmt.Sprintf("%s: none of the %d pods with fresh data exposes this signal", where, pool.Known))
	}
	return *v, oldest, pool, nil
}

// fold aggregates the counted (Running, Ready, not terminating) pods in one pass.
// It returns how many were counted, the pool, the time of the oldest contributing
// reading, why the unknown pods are unknown, and whether any counted pod was never
// scraped.
func (p *Provider) fold(pods []*corev1.Pod, now time.Time) (counted int, pool signals.Pool, oldest time.Time, unknown []string, cold bool) {
	b := signals.NewPoolBuilder(p.opts.UnknownSaturation)
	for _, pod := range pods {
		if !discovery.Counted(pod) {
			continue
		}
		counted++
		res, why, ok := p.fresh(pod, now)
		if !ok {
			cold = cold || res == nil
			unknown = append(unknown, pod.Name+": "+why)
			b.Add(nil, signals.Fusion{})
			continue
		}
		if res.Fusion.Saturation == nil {
			unknown = append(unknown, pod.Name+": no valid queue depth or KV-cache usage"+firstWarnings(res.Reading.Warnings))
		} else if oldest.IsZero() || res.Time.Before(oldest) {
			oldest = res.Time
		}
		b.Add(res.Reading, res.Fusion)
	}
	return counted, b.Pool(), oldest, unknown, cold
}

// fresh returns a pod's result if its reading is younger than MaxAge, else why not.
func (p *Provider) fresh(pod *corev1.Pod, now time.Time) (*scrape.Result, string, bool) {
	res, ok := p.readings.Latest(discovery.Key(pod))
	if !ok {
		if _, err := p.pods.TargetFor(pod); err != nil {
			return nil, "cannot be scraped: " + err.Error(), false
		}
		return nil, "not scraped yet", false
	}
	if res.Reading == nil {
		if res.Err != nil {
			return res, "scrape failing: " + res.Err.Error(), false
		}
		return res, "not scraped yet", false
	}
	if age := now.Sub(res.Time); age > p.opts.MaxAge {
		why := fmt.Sprintf("stale: last good scrape %s ago (max age %s)", age.Round(time.Millisecond), p.opts.MaxAge)
		if res.Err != nil {
			why += "; last error: " + res.Err.Error()
		}
		return res, why, false
	}
	return res, "", true
}

// scrapeCold scrapes, within ColdScrapeTimeout, the counted pods that were never
// scraped, so that the first request for a new selector gets an answer. It
// reports whether it scraped any.
func (p *Provider) scrapeCold(ctx context.Context, pods []*corev1.Pod) bool {
	if p.opts.ColdScrapeTimeout <= 0 {
		return false
	}
	var cold []scrape.Target
	for _, pod := range pods {
		if !discovery.Counted(pod) {
			continue
		}
		if _, ok := p.readings.Latest(discovery.Key(pod)); ok {
			continue
		}
		t, err := p.pods.TargetFor(pod)
		if err != nil {
			continue
		}
		cold = append(cold, t)
	}
	if len(cold) == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.ColdScrapeTimeout)
	defer cancel()
	p.readings.ScrapeAll(ctx, cold, false)
	return true
}

// firstWarnings renders up to two of a reading's warnings for an error message.
func firstWarnings(w []string) string {
	switch {
	case len(w) == 0:
		return ""
	case len(w) <= 2:
		return " (" + strings.Join(w, "; ") + ")"
	}
	return fmt.Sprintf(" (%s; and %d more)", strings.Join(w[:2], "; "), len(w)-2)
}

// summarize joins up to five reasons and counts the rest.
func summarize(reasons []string) string {
	const show = 5
	if len(reasons) <= show {
		return strings.Join(reasons, "; ")
	}
	return strings.Join(reasons[:show], "; ") + fmt.Sprintf("; and %d more", len(reasons)-show)
}

func newStatus(code int32, reason metav1.StatusReason, msg string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg,
	}}
}

// MilliQuantity converts a metric value to the quantity served: rounded half-up
// to milli units (so 0.0004 is served as "0" and 0.0006 as "1m"; "800m" means
// 0.8), negative values clamped to 0, in canonical form. NaN, ±Inf and values too
// large for int64 milli units (above about 9.2e15) are errors, never cast.
func MilliQuantity(v float64) (resource.Quantity, error) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return resource.Quantity{}, fmt.Errorf("value %g is not a finite number", v)
	}
	if v < 0 {
		v = 0
	}
	m := math.Floor(v*1000 + 0.5)
	if m >= math.MaxInt64 {
		return resource.Quantity{}, fmt.Errorf("value %g is too large to serve in milli units", v)
	}
	return *resource.NewMilliQuantity(int64(m), resource.DecimalSI), nil
}
