// Package provider serves the adapter's metrics to the HPA through
// sigs.k8s.io/custom-metrics-apiserver: one request (namespace, metric, label
// selector) in, one value out on external.metrics.k8s.io, and one value per pod
// on custom.metrics.k8s.io. Which pods form the pool comes from pkg/podselect,
// their readings from pkg/scrape, and what the metric means (scoring, pooling)
// from pkg/signals' catalog.
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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/metrics/pkg/apis/external_metrics"
	"k8s.io/utils/clock"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/saturation-adapter/saturation-adapter/internal/excerpt"
	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// Pools finds the pods of a request and records the request's interest; see
// podselect.Selection.
type Pools interface {
	// Synced reports whether the pod cache is filled.
	Synced() bool
	// RecordInterest records that namespace and selector were asked about.
	RecordInterest(namespace string, selector labels.Selector)
	// Members returns the pods of namespace matched by selector.
	Members(namespace string, selector labels.Selector) ([]podselect.Member, error)
	// Member returns one pod by name; found is false when it does not exist.
	Member(namespace, name string) (m podselect.Member, found bool, err error)
	// HPAsFor names the HorizontalPodAutoscalers a request answers.
	HPAsFor(namespace, metric string, selector labels.Selector) []string
}

// Readings gives the latest scrape result of pods and scrapes on demand; see
// scrape.Scraper.
type Readings interface {
	Latest(uid types.UID) (*scrape.Result, bool)
	Scrape(ctx context.Context, targets []scrape.Target)
}

// Options configure the provider.
type Options struct {
	// MaxAge is the age beyond which a pod's last reading is stale.
	MaxAge time.Duration
	// ColdScrapeTimeout bounds the on-demand scrape of Ready pods that were never
	// scraped (a selector nobody asked about before); 0 disables it.
	ColdScrapeTimeout time.Duration
}

// Provider implements the External and custom metrics APIs of
// custom-metrics-apiserver.
type Provider struct {
	opts     Options
	catalog  *signals.Catalog
	pools    Pools
	readings Readings
	clock    clock.PassiveClock
	metrics  *Metrics
}

var _ cmprovider.ExternalMetricsProvider = (*Provider)(nil)

// New returns a Provider serving the policies of catalog.
func New(opts Options, catalog *signals.Catalog, pools Pools, readings Readings, clk clock.PassiveClock, metrics *Metrics) *Provider {
	return &Provider{opts: opts, catalog: catalog, pools: pools, readings: readings, clock: clk, metrics: metrics}
}

// ListAllExternalMetrics lists the catalog: a static list, no I/O, so API
// discovery never waits on engines (hazard NC-10).
func (p *Provider) ListAllExternalMetrics() []cmprovider.ExternalMetricInfo {
	var out []cmprovider.ExternalMetricInfo
	for _, m := range p.catalog.Names() {
		out = append(out, cmprovider.ExternalMetricInfo{Metric: m})
	}
	return out
}

// GetExternalMetric answers one HPA request with exactly one item computed over
// the Running, Ready, non-terminating pods of namespace matched by
// metricSelector. Errors are API statuses: 404 for an unknown metric or a
// selector that matches no pod, 503 when pods match but none gives a value (the
// HPA then holds its replica count), the adapter is starting, or the value is
// out of range; their messages say which pods and why, in at most
// MaxMessageBytes, without pod addresses.
func (p *Provider) GetExternalMetric(ctx context.Context, namespace string, metricSelector labels.Selector, info cmprovider.ExternalMetricInfo) (*external_metrics.ExternalMetricValueList, error) {
	policy := p.catalog.Lookup(info.Metric)
	if policy == nil {
		p.metrics.request(metricUnknown, ResultNotFound)
		return nil, metricNotFound(external_metrics.Resource(info.Metric), info.Metric)
	}
	where := describePool(policy.Name, namespace, metricSelector)
	members, err := p.members(where, namespace, metricSelector)
	if err != nil {
		p.fail(policy.Name, err)
		return nil, err
	}
	a := p.evaluate(ctx, policy, members, nil)
	if err := a.poolError(where); err != nil {
		p.fail(policy.Name, err)
		return nil, err
	}
	q, err := MilliQuantity(*a.pool.Value)
	if err != nil {
		p.metrics.request(policy.Name, ResultError)
		klog.V(2).InfoS("Pool value out of range", "namespace", namespace, "metric", policy.Name, "err", err)
		return nil, outOfRange(where, err)
	}
	unknown := a.pool.Pods - a.pool.Known
	if unknown > 0 {
		slices.Sort(a.unknown)
		klog.V(2).InfoS("Pods without fresh data count at the unknown-pod saturation", "namespace", namespace, "selector", metricSelector.String(),
			"unknownSaturation", policy.UnknownSaturation, "pods", a.unknown)
	}
	p.metrics.request(policy.Name, ResultOK)
	p.metrics.served(namespace, p.pools.HPAsFor(namespace, policy.Name, metricSelector), policy.Name, q.AsApproximateFloat64(), a.pool.Pods, unknown)
	return &external_metrics.ExternalMetricValueList{Items: []external_metrics.ExternalMetricValue{{
		MetricName: info.Metric,
		MetricLabels: map[string]string{
			"pods":         strconv.Itoa(a.pool.Pods),
			"pods_unknown": strconv.Itoa(unknown),
		},
		Timestamp: metav1.NewTime(a.oldest),
		Value:     q,
	}}}, nil
}

// answer is the evaluation of one request over a pool.
type answer struct {
	// matched is the number of pods the selector matched; pool.Pods of them are
	// counted (Running, Ready, not terminating).
	matched int
	pool    signals.Pool
	// oldest is the time of the oldest reading behind a known pod.
	oldest time.Time
	// unknown says, per counted pod without a fresh saturation, why ("pod: why").
	unknown []string
}

// podFunc receives each counted pod with its fresh reading (nil when it has
// none) and its part in the pool.
type podFunc func(m *podselect.Member, res *scrape.Result, v signals.PodValue, why string)

// members returns the members of namespace matched by selector, recording the
// request's interest. Errors are the API statuses of everything before the
// pool: a missing namespace (400), a cache not synced or an unwatched namespace
// (503), no pod matched (404).
func (p *Provider) members(where, namespace string, selector labels.Selector) ([]podselect.Member, error) {
	if err := p.ready(where, namespace); err != nil {
		return nil, err
	}
	p.pools.RecordInterest(namespace, selector)
	members, err := p.pools.Members(namespace, selector)
	if err != nil {
		return nil, unavailable(where + ": " + lowerError(err))
	}
	if len(members) == 0 {
		return nil, newStatus(http.StatusNotFound, metav1.StatusReasonNotFound, where+": no pods match; check the HPA's metric.selector against the pod labels")
	}
	return members, nil
}

// member returns one pod as the only member of its pool. A by-name request
// declares no interest (its selector would be "everything" and put the whole
// namespace in the scrape set): the pod is scraped on demand. Errors as for
// members.
func (p *Provider) member(where, namespace, name string) ([]podselect.Member, error) {
	if err := p.ready(where, namespace); err != nil {
		return nil, err
	}
	m, found, err := p.pools.Member(namespace, name)
	if err != nil {
		return nil, unavailable(where + ": " + lowerError(err))
	}
	if !found {
		return nil, newStatus(http.StatusNotFound, metav1.StatusReasonNotFound, where+": no pods match")
	}
	return []podselect.Member{m}, nil
}

func (p *Provider) ready(where, namespace string) error {
	if namespace == "" {
		return badRequest(where + ": a namespace is required; pools never span namespaces")
	}
	if !p.pools.Synced() {
		return unavailable(where + ": the adapter is starting: its pod cache is not synced yet")
	}
	return nil
}

// evaluate scrapes on the spot the counted members never scraped, then folds
// the policy over the members. each, when set, receives every counted pod.
func (p *Provider) evaluate(ctx context.Context, policy *signals.Policy, members []podselect.Member, each podFunc) answer {
	p.scrapeCold(ctx, members)
	return p.fold(policy, members, p.clock.Now(), each)
}

// fold evaluates the policy over the counted members in one pass.
func (p *Provider) fold(policy *signals.Policy, members []podselect.Member, now time.Time, each podFunc) answer {
	a := answer{matched: len(members)}
	b := policy.NewPool()
	for i := range members {
		m := &members[i]
		if !m.Counted {
			continue
		}
		res, why := p.fresh(m, now)
		var r *signals.Reading
		if res != nil {
			r = res.Reading
		}
		v := b.Add(r)
		switch {
		case !v.Known && why == "":
			why = "no valid queue depth or KV-cache usage" + firstWarnings(r.Warnings)
			a.unknown = append(a.unknown, m.Pod.Name+": "+why)
		case !v.Known:
			a.unknown = append(a.unknown, m.Pod.Name+": "+why)
		case a.oldest.IsZero() || res.Time.Before(a.oldest):
			a.oldest = res.Time
		}
		if each != nil {
			each(m, res, v, why)
		}
	}
	a.pool = b.Pool()
	return a
}

// poolError returns the API status for an answer without a pool value: 503
// naming why (no pod Ready, none with fresh data, signal absent), else nil.
func (a *answer) poolError(where string) error {
	switch {
	case a.pool.Pods == 0:
		return unavailable(fmt.Sprintf("%s: %d pods match but none is Running and Ready", where, a.matched))
	case a.pool.Known == 0:
		slices.Sort(a.unknown)
		return unavailable(fmt.Sprintf("%s: %d Ready pods match, none has fresh data: %s", where, a.pool.Pods, summarize(a.unknown)))
	case a.pool.Value == nil:
		return unavailable(fmt.Sprintf("%s: none of the %d pods with fresh data exposes this signal", where, a.pool.Known))
	}
	return nil
}

// fail counts a failed request by the kind of its status and logs it.
func (p *Provider) fail(metric string, err error) {
	r := ResultError
	switch {
	case apierrors.IsNotFound(err):
		r = ResultNoPods
	case apierrors.IsServiceUnavailable(err):
		r = ResultNoData
	}
	p.metrics.request(metric, r)
	klog.V(2).InfoS("Metric request failed", "metric", metric, "err", err)
}

// fresh returns a member's result when its reading is younger than MaxAge; else
// the result (possibly nil) is nil-ed and why says why.
func (p *Provider) fresh(m *podselect.Member, now time.Time) (*scrape.Result, string) {
	res, ok := p.readings.Latest(m.UID)
	if !ok {
		if m.TargetErr != nil {
			return nil, "cannot be scraped: " + m.TargetErr.Error()
		}
		return nil, "not scraped yet"
	}
	if res.Reading == nil {
		if res.Err != nil {
			return nil, "scrape failing: " + res.Err.Error()
		}
		return nil, "not scraped yet"
	}
	if age := now.Sub(res.Time); age > p.opts.MaxAge {
		why := fmt.Sprintf("stale: last good scrape %s ago (max age %s)", age.Round(time.Millisecond), p.opts.MaxAge)
		if res.Err != nil {
			why += "; last error: " + res.Err.Error()
		}
		return nil, why
	}
	return res, ""
}

// scrapeCold scrapes, within ColdScrapeTimeout, the counted members that were
// never scraped, so that the first request for a new selector gets an answer.
func (p *Provider) scrapeCold(ctx context.Context, members []podselect.Member) {
	if p.opts.ColdScrapeTimeout <= 0 {
		return
	}
	var cold []scrape.Target
	for i := range members {
		m := &members[i]
		if !m.Counted || m.TargetErr != nil {
			continue
		}
		if _, ok := p.readings.Latest(m.UID); ok {
			continue
		}
		cold = append(cold, m.Target)
	}
	if len(cold) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.ColdScrapeTimeout)
	defer cancel()
	p.readings.Scrape(ctx, cold)
}

// firstWarnings renders up to two of a reading's warnings for an error
// message, each cut to an excerpt (a warning may quote a pod's label values).
func firstWarnings(w []string) string {
	shown := make([]string, 0, 2)
	for _, x := range w[:min(len(w), 2)] {
		shown = append(shown, excerpt.String(x, warningExcerptBytes))
	}
	switch {
	case len(w) == 0:
		return ""
	case len(w) <= 2:
		return " (" + strings.Join(shown, "; ") + ")"
	}
	return fmt.Sprintf(" (%s; and %d more)", strings.Join(shown, "; "), len(w)-2)
}

// summarize joins up to five reasons, within a byte budget, and counts the
// rest.
func summarize(reasons []string) string {
	return joinReasons(reasons, 5)
}

// newStatus is an API status with msg cut to MaxMessageBytes.
func newStatus(code int32, reason metav1.StatusReason, msg string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: reason, Message: capMessage(msg),
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
