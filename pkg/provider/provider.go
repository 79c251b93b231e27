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
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"k8s.io/metrics/pkg/apis/external_metrics"
	"k8s.io/utils/clock"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
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
	// RecordInterestWith and MembersWith do the same for pods scraped with an
	// override (a gateway input's port and path).
	RecordInterestWith(namespace string, selector labels.Selector, ov podselect.Override)
	MembersWith(namespace string, selector labels.Selector, ov podselect.Override) ([]podselect.Member, error)
	// Member returns one pod by name; found is false when it does not exist.
	Member(namespace, name string) (m podselect.Member, found bool, err error)
	// HPAsFor names the HorizontalPodAutoscalers a request answers.
	HPAsFor(namespace, metric string, selector labels.Selector) []string
}

// Advice hears about answers, to warn about HPAs that cannot do what they are set
// up for; see advisor.Advisor. Optional.
type Advice interface {
	Answered(namespace, metric string, selector labels.Selector, pool policy.Pool)
	GatewaySeen(readings []*signals.Reading)
}

// Catalogs gives the metric catalog in force; a configuration reload replaces
// it (see pkg/config). Implementations are safe for concurrent use.
type Catalogs interface {
	Catalog() *policy.Catalog
}

// StaticCatalog is a Catalogs that never changes.
type StaticCatalog struct{ C *policy.Catalog }

// Catalog returns the catalog.
func (s StaticCatalog) Catalog() *policy.Catalog { return s.C }

// Options configure the provider.
type Options struct {
	// MaxAge is the age beyond which a pod's last reading is stale.
	MaxAge time.Duration
	// StartupGrace is how long after its creation a pod that is not Ready yet
	// counts as starting (loading its model): a demand policy's value is then
	// at least the pods counted and starting (policy.PoolBuilder.AddStarting).
	// 0 turns it off.
	StartupGrace time.Duration
	// Advice, when set, hears about every External answer.
	Advice Advice
}

// Provider implements the External and custom metrics APIs of
// custom-metrics-apiserver.
type Provider struct {
	opts     Options
	catalogs Catalogs
	pools    Pools
	readings Readings
	clock    clock.PassiveClock
	metrics  *Metrics

	warnMu sync.Mutex
	warned map[string]struct{}

	// peaks are the pool states of the policies that remember (a peak hold),
	// per namespace, selector and metric.
	peaks *peakStates

	// aggs are the pools kept as aggregates when the readings are Watched;
	// fromAggs counts the answers read from them (tests check the path).
	aggs     *aggregates
	fromAggs atomic.Int64
}

var _ cmprovider.ExternalMetricsProvider = (*Provider)(nil)

// New returns a Provider serving the policies of the catalog in force.
func New(opts Options, catalogs Catalogs, pools Pools, readings Readings, clk clock.PassiveClock, metrics *Metrics) *Provider {
	p := &Provider{opts: opts, catalogs: catalogs, pools: pools, readings: readings, clock: clk, metrics: metrics, warned: map[string]struct{}{},
		peaks: newPeakStates(metrics.peakStateEvicted)}
	if w, ok := readings.(Watched); ok {
		p.aggs = newAggregates()
		p.watch(w)
	}
	return p
}

// poolState returns the state pol keeps for the pool of namespace and
// selector, whose answer has a value, creating it; nil when pol does not
// remember, or when the pool has no pod and no HPA asks about it (a state is
// kept only for a namespace with pods or HPAs, so that requests naming made-up
// namespaces keep nothing). hpas are the HPAs asking about the pool. The
// states are bounded per namespace (peakStates): a pool whose state was
// dropped starts its peak hold afresh.
func (p *Provider) poolState(pol *policy.Policy, namespace string, selector labels.Selector, pods int, hpas []string, now time.Time) *policy.PoolState {
	if !pol.Remembers() || (pods == 0 && len(hpas) == 0) {
		return nil
	}
	return p.peaks.get(pol, namespace, selector, len(hpas) > 0, now)
}

// ListAllExternalMetrics lists the catalog: a static list, no I/O, so API
// discovery never waits on engines (hazard NC-10).
func (p *Provider) ListAllExternalMetrics() []cmprovider.ExternalMetricInfo {
	var out []cmprovider.ExternalMetricInfo
	for _, m := range p.catalogs.Catalog().Names() {
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
	catalog := p.catalogs.Catalog()
	pol := catalog.Lookup(info.Metric)
	if pol == nil {
		p.metrics.request(metricUnknown, ResultNotFound)
		return nil, metricNotFound(external_metrics.Resource(info.Metric), info.Metric)
	}
	where := describePool(pol.Name, namespace, metricSelector)
	members, err := p.members(where, namespace, metricSelector)
	if err != nil && !((pol.Gateway != nil || len(pol.Minimums) > 0) && apierrors.IsNotFound(err) && p.pools.Synced()) {
		// No pods is a state, not an error, when a gateway input can say how
		// much demand waits for them, or a scheduled minimum how much to start
		// (scale from zero).
		if apierrors.IsNotFound(err) && pol.Gateway == nil {
			err = newStatus(http.StatusNotFound, metav1.StatusReasonNotFound, where+
				": no pods match; check the HPA's metric.selector against the pod labels. If the pool is scaled to zero, this metric cannot wake it: "+
				"at zero pods there is nothing to read; scale from zero needs a policy with a gateway input")
		}
		p.fail(pol.Name, err)
		return nil, err
	}
	var gw *gatewayAnswer
	if pol.Gateway != nil {
		if gw, err = p.gateway(ctx, where, namespace, pol.Gateway); err != nil {
			p.fail(pol.Name, err)
			return nil, err
		}
	}
	var a answer
	aggregated := false
	if w, ok := p.readings.(Watched); ok && gw == nil && pol.Gateway == nil {
		if a, aggregated, err = p.fromAggregate(ctx, w, catalog, pol, where, namespace, metricSelector, members); err != nil {
			p.fail(pol.Name, err)
			return nil, err
		}
		if aggregated {
			p.fromAggs.Add(1)
		}
	}
	if !aggregated {
		if a, err = p.evaluate(ctx, catalog, pol, where, namespace, members, nil, true, gw); err != nil {
			p.fail(pol.Name, err)
			return nil, err
		}
	}
	hpas, hpasRead := []string(nil), false
	if pol.HasAhead() {
		now := p.clock.Now()
		var st *policy.PoolState
		if pol.Remembers() && a.pool.Value != nil {
			hpas, hpasRead = p.pools.HPAsFor(namespace, pol.Name, metricSelector), true
			st = p.poolState(pol, namespace, metricSelector, len(members), hpas, now)
		}
		a.pool = pol.Ahead(now, st, a.pool)
	}
	if p.opts.Advice != nil {
		p.opts.Advice.Answered(namespace, pol.Name, metricSelector, a.pool)
		if gw != nil {
			p.opts.Advice.GatewaySeen(gw.readings)
		}
	}
	if err := a.poolError(where); err != nil {
		p.fail(pol.Name, err)
		return nil, err
	}
	q, err := MilliQuantity(*a.pool.Value)
	if err != nil {
		p.metrics.request(pol.Name, ResultError)
		klog.V(2).InfoS("Pool value out of range", "namespace", namespace, "metric", pol.Name, "err", err)
		return nil, outOfRange(where, err)
	}
	unknown := a.pool.Pods - a.pool.Known
	if unknown > 0 {
		slices.Sort(a.unknown)
		klog.V(2).InfoS("Pods without fresh, usable data", "namespace", namespace, "selector", metricSelector.String(),
			"metric", pol.Name, "unknownSaturation", pol.UnknownSaturation, "held", a.pool.Held, "pods", a.unknown)
	}
	p.metrics.request(pol.Name, ResultOK)
	if !hpasRead {
		hpas = p.pools.HPAsFor(namespace, pol.Name, metricSelector)
	}
	p.metrics.served(namespace, hpas, pol.Name, q.AsApproximateFloat64(), a.pool)
	if len(a.roles) > 1 {
		p.warnMixedRoles(namespace, metricSelector, pol.Name, catalog.RoleLabel(), a.roles)
	}
	return &external_metrics.ExternalMetricValueList{Items: []external_metrics.ExternalMetricValue{{
		MetricName:   info.Metric,
		MetricLabels: metricLabels(a.pool),
		Timestamp:    metav1.NewTime(a.pool.Oldest),
		Value:        q,
	}}}, nil
}

// metricLabels describes the pool behind an answer, for people reading it with
// kubectl get --raw (the HPA ignores them): pods counted, unknown, and, when
// any, held at their last good value or in an engine state.
func metricLabels(p policy.Pool) map[string]string {
	out := map[string]string{}
	for st, n := range podCounts(p) {
		switch {
		case st == PodsCounted:
			out["pods"] = strconv.Itoa(n)
		case st == PodsUnknown:
			out["pods_unknown"] = strconv.Itoa(n)
		case n > 0:
			out["pods_"+string(st)] = strconv.Itoa(n)
		}
	}
	if p.Gateway != nil {
		out["gateway_queue"] = strconv.FormatFloat(*p.Gateway, 'g', -1, 64)
	}
	if p.Starting > 0 {
		out["pods_starting"] = strconv.Itoa(p.Starting)
	}
	return out
}

// warnMixedRoles logs, once per pool, that a selector's pods mix roles of a
// disaggregated deployment (hazard NC-03): one HPA per role.
func (p *Provider) warnMixedRoles(namespace string, selector labels.Selector, metric, roleLabel string, roles []string) {
	key := namespace + "\x00" + selector.String() + "\x00" + metric
	p.warnMu.Lock()
	_, seen := p.warned[key]
	if !seen && len(p.warned) < maxWarned {
		p.warned[key] = struct{}{}
	}
	p.warnMu.Unlock()
	if !seen {
		slices.Sort(roles)
		klog.InfoS("Warning: the selector's pods mix roles of a disaggregated deployment; averaging prefill and decode pods scales the wrong pool: give each role its own HPA (a selector on the role label, or a policy with role)",
			"namespace", namespace, "selector", selector.String(), "metric", metric, "roleLabel", roleLabel, "roles", roles)
	}
}

// maxWarned bounds the pools remembered as already warned about.
const maxWarned = 1000

// answer is the evaluation of one request over a pool.
type answer struct {
	// matched is the number of pods the selector matched; pool.Pods of them are
	// counted (Running, Ready, not terminating, of the policy's role).
	matched int
	pool    policy.Pool
	// unknown says, per counted pod without fresh, usable data, why ("pod: why").
	unknown []string
	// roles lists the distinct role label values of the counted pods, when the
	// pool mixes roles (hazard NC-03).
	roles []string
	// signal reports a KindSignal policy.
	signal bool
}

// podFunc receives each counted pod and its part in the pool.
type podFunc func(m *podselect.Member, v policy.PodValue)

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

// evaluate reads the members' histories from the source (which may scrape or
// query on the spot), then folds the policy over the members, with the
// gateway's queue added when gw is set. each, when set, receives every counted
// pod. A source that cannot answer for any pod (Prometheus down) is a 503
// naming the cause. namespace is the request's: members may be empty (a pool
// at zero behind a gateway).
func (p *Provider) evaluate(ctx context.Context, catalog *policy.Catalog, pol *policy.Policy, where, namespace string, members []podselect.Member, each podFunc, poolOnly bool, gw *gatewayAnswer) (answer, error) {
	histories, err := p.readings.Histories(ctx, namespace, members)
	if err != nil {
		return answer{}, unavailable(fmt.Sprintf("%s: %v", where, err))
	}
	return p.fold(catalog, pol, members, p.clock.Now(), histories, each, poolOnly, gw), nil
}

// gatewayAnswer is what a policy's gateway input read: the queue and the
// readings it came from.
type gatewayAnswer struct {
	queue    float64
	readings []*signals.Reading
	// namespace and selector find the gateway's pods.
	namespace string
	selector  labels.Selector
}

// gateway reads a policy's gateway input: the fresh readings of the gateway's
// Ready pods (in the input's namespace, else the request's), scraped on the
// spot when never scraped, and the queue of this pool's series. Missing data
// follows the engines' rules: no gateway pod, none with a fresh reading, or no
// series of the queue metric at all is an error naming the input, never 0.
func (p *Provider) gateway(ctx context.Context, where, namespace string, g *policy.GatewayInput) (*gatewayAnswer, error) {
	ns := g.Namespace
	if ns == "" {
		ns = namespace
	}
	sel, err := labels.Parse(g.Selector)
	if err != nil {
		return nil, unavailable(fmt.Sprintf("%s: gateway input %q: %v", where, g.Selector, err))
	}
	ov := podselect.Override{Port: g.Port, Path: g.Path, BearerTokenFile: g.BearerTokenFile, ServiceAccount: g.ServiceAccount, Namespace: g.Namespace}
	input := fmt.Sprintf("%s: gateway input (pods %s in namespace %s)", where, g.Selector, ns)
	if err := p.ready(input, ns); err != nil {
		return nil, err
	}
	p.pools.RecordInterestWith(ns, sel, ov)
	members, err := p.pools.MembersWith(ns, sel, ov)
	if err != nil {
		return nil, unavailable(input + ": " + lowerError(err))
	}
	histories, err := p.readings.Histories(ctx, ns, members)
	if err != nil {
		return nil, unavailable(input + ": " + err.Error())
	}
	now := p.clock.Now()
	out := &gatewayAnswer{}
	var missing []string
	counted := 0
	for i := range members {
		m := &members[i]
		if !m.Counted {
			continue
		}
		counted++
		h, why := histories(m)
		r := h.Latest()
		switch {
		case r == nil:
			missing = append(missing, m.Pod.Name+": "+why)
		case now.Sub(r.At()) > p.opts.MaxAge:
			missing = append(missing, fmt.Sprintf("%s: stale: last good scrape %s ago", m.Pod.Name, now.Sub(r.At()).Round(time.Millisecond)))
		default:
			out.readings = append(out.readings, r)
		}
	}
	switch {
	case counted == 0:
		return nil, unavailable(fmt.Sprintf("%s: %d pods match, none Running and Ready: the gateway's queue is unknown", input, len(members)))
	case len(missing) > 0:
		// A gateway pod without data could hold any part of the backlog: unknown.
		slices.Sort(missing)
		return nil, unavailable(fmt.Sprintf("%s: the gateway's queue is unknown: %s", input, summarize(missing)))
	}
	q, err := g.Queue(out.readings...)
	if err != nil {
		return nil, unavailable(fmt.Sprintf("%s: %v", input, err))
	}
	out.queue = q
	out.namespace, out.selector = ns, sel
	return out, nil
}

// isGatewayPod reports whether m is one of the gateway input's own pods
// (an HPA selector on a release label can match the endpoint picker too): the
// gateway's queue is counted through its input, never as an engine.
func (g *gatewayAnswer) isGatewayPod(m *podselect.Member) bool {
	return g != nil && g.selector != nil && m.Pod.Namespace == g.namespace && g.selector.Matches(labels.Set(m.Labels))
}

// fold evaluates the policy over the counted members in one pass, through the
// one pooling path (policy.PoolBuilder).
func (p *Provider) fold(catalog *policy.Catalog, pol *policy.Policy, members []podselect.Member, now time.Time,
	histories func(*podselect.Member) (*history.History, string), each podFunc, poolOnly bool, gw *gatewayAnswer) answer {
	a := answer{matched: len(members), signal: pol.Kind == policy.KindSignal}
	b := pol.NewPool(now, p.opts.MaxAge)
	if poolOnly {
		b.PoolOnly()
	}
	roleKey := catalog.RoleLabel()
	starting := 0
	for i := range members {
		m := &members[i]
		if gw.isGatewayPod(m) || (pol.Role != "" && m.Labels[roleKey] != pol.Role) {
			continue
		}
		if m.Starting && p.opts.StartupGrace > 0 && now.Sub(m.Created) < p.opts.StartupGrace {
			starting++
		}
		if !m.Counted {
			continue
		}
		role := m.Labels[roleKey]
		if role != "" && !slices.Contains(a.roles, role) {
			a.roles = append(a.roles, role)
		}
		h, why := histories(m)
		v := b.Add(h, why)
		if !v.Known {
			a.unknown = append(a.unknown, m.Pod.Name+": "+v.Why)
		}
		if each != nil {
			each(m, v)
		}
	}
	if gw != nil {
		b.AddGateway(gw.queue)
	}
	b.AddStarting(starting)
	a.pool = b.Pool()
	if len(a.roles) < 2 {
		a.roles = nil
	}
	return a
}

// poolError returns the API status for an answer without a pool value: 503
// naming why (no pod Ready, none with fresh data, signal absent), else nil.
func (a *answer) poolError(where string) error {
	switch {
	case a.pool.Value != nil:
		return nil // possibly the gateway's demand alone (no Ready or no known pod)
	case a.pool.Pods == 0:
		return unavailable(fmt.Sprintf("%s: %d pods match but none is Running and Ready", where, a.matched))
	case a.pool.Known == 0 && a.pool.Fresh > 0 && a.signal:
		return unavailable(fmt.Sprintf("%s: none of the %d pods with fresh data exposes this signal", where, a.pool.Fresh))
	case a.pool.Known == 0:
		slices.Sort(a.unknown)
		return unavailable(fmt.Sprintf("%s: %d Ready pods match, none has fresh data: %s", where, a.pool.Pods, summarize(a.unknown)))
	case a.signal && a.pool.Fresh+a.pool.Held < a.pool.Pods:
		// A raw signal has no set point to count a pod without data at (the
		// HPA's own rule counts it at the target): unknown until it reports.
		slices.Sort(a.unknown)
		return unavailable(fmt.Sprintf("%s: %d of the %d Ready pods have no fresh data: %s; a raw signal has no set point to count them at, so the pool's value is unknown until they report (llm_saturation and llm_demand_replicas count them at the unknown-pod saturation)",
			where, a.pool.Pods-a.pool.Fresh-a.pool.Held, a.pool.Pods, summarize(a.unknown)))
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
