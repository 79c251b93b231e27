package simulate

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/saturation-adapter/saturation-adapter/lab/hpa"
)

// MetricsPath says how an HPA's External and Pods metrics reach it.
type MetricsPath string

const (
	// PathAdapter is the saturation adapter: it scrapes every pod's /metrics every
	// ScrapeInterval (2 s), and answers each HPA request from the latest readings,
	// scraping a Ready pod it never scraped on the spot.
	PathAdapter MetricsPath = "adapter"
	// PathPrometheus is Prometheus scraping every PrometheusScrapeInterval (15 s)
	// and an adapter (prometheus-adapter style) querying it at each HPA request.
	PathPrometheus MetricsPath = "prometheus"
	// PathKEDA is Prometheus as above and KEDA querying it every
	// KEDAPollingInterval (30 s), the HPA reading KEDA's cached value (KEDA's
	// useCachedMetrics); an empty query result reads 0 (KEDA's prometheus scaler
	// with ignoreNullValues, its default).
	PathKEDA MetricsPath = "keda"
)

// ticker is a periodic clock: ticks at phase + k × period, k >= 0.
type ticker struct{ phase, period time.Duration }

// at returns the first tick at or after t.
func (k ticker) at(t time.Duration) time.Duration {
	if t <= k.phase {
		return k.phase
	}
	n := (t - k.phase + k.period - 1) / k.period
	return k.phase + n*k.period
}

// autoscaler changes a fleet's replicas at the times it chooses.
type autoscaler interface {
	// next returns the next time the autoscaler acts; never for none.
	next() time.Duration
	// wake acts at now, the time next returned.
	wake(now time.Duration, f *fleet) error
}

// milli converts a served value to the milli-units of a Quantity the way the
// adapter serves it (half up, never negative).
func milli(v float64) int64 {
	switch {
	case !(v > 0):
		return 0
	case v*1000 >= math.MaxInt64:
		return math.MaxInt64
	}
	return int64(math.Floor(v*1000 + 0.5))
}

// scrapeState is what a scraper remembers of one pod's latest attempt.
type scrapeState struct {
	okAt, failAt   time.Duration
	everOK, failed bool
}

// adapterFeed is the adapter's scrape loop and read path. Only the scrape that
// precedes a consumer's read matters for gauge-only sources, so a tick whose
// next consumer read comes after the following tick is skipped unless everyTick.
type adapterFeed struct {
	src       MetricSource
	tick      ticker
	consumer  ticker
	everyTick bool
	maxAge    time.Duration
	nextTick  time.Duration
	state     map[int]*scrapeState
	renders   int
}

func (a *adapterFeed) scrapeTick(now time.Duration, f *fleet) error {
	a.nextTick = now + a.tick.period
	if !a.everyTick && a.consumer.at(now) >= now+a.tick.period {
		return nil
	}
	for _, p := range f.pods {
		switch p.phase {
		case phaseReady:
			if err := a.scrape(now, f, p); err != nil {
				return err
			}
		case phaseStarting: // Running, its server not up: the scrape fails
			st := a.stateOf(p.num)
			st.failed, st.failAt = true, now
		}
	}
	return nil
}

func (a *adapterFeed) stateOf(num int) *scrapeState {
	st := a.state[num]
	if st == nil {
		st = &scrapeState{}
		a.state[num] = st
	}
	return st
}

// scrape renders p's /metrics and hands it to the source.
func (a *adapterFeed) scrape(now time.Duration, f *fleet, p *pod) error {
	body, err := f.render(p)
	if err != nil {
		return err
	}
	a.renders++
	st := a.stateOf(p.num)
	if err := a.src.Scrape(p.num, now, body); err != nil {
		st.failed, st.failAt = true, now
		return nil
	}
	st.everOK, st.okAt = true, now
	return nil
}

// pool returns the counted (Ready) pods with a fresh reading and the number
// without one, scraping never-scraped Ready pods on the spot as the provider
// does.
func (a *adapterFeed) pool(now time.Duration, f *fleet) ([]int, int, error) {
	var fresh []int
	unknown := 0
	for _, p := range f.pods {
		if p.phase != phaseReady {
			continue
		}
		st := a.state[p.num]
		if st == nil { // never attempted: the provider's cold scrape
			if err := a.scrape(now, f, p); err != nil {
				return nil, 0, err
			}
			st = a.state[p.num]
		}
		if st.everOK && (!st.failed || st.okAt > st.failAt) && now-st.okAt <= a.maxAge {
			fresh = append(fresh, p.num)
		} else {
			unknown++
		}
	}
	return fresh, unknown, nil
}

func (a *adapterFeed) forget(p *pod) {
	delete(a.state, p.num)
	a.src.Forget(p.num)
}

// promFeed is Prometheus scraping the engines' /metrics (Ready and draining
// pods: its pod discovery keeps terminating pods until they are gone), queried
// either at each HPA request or, with a poll ticker, by KEDA.
type promFeed struct {
	src         MetricSource
	tick        ticker
	consumer    ticker
	everyTick   bool
	nextTick    time.Duration
	lastTick    time.Duration
	scrapedAt   map[int]time.Duration
	poll        *ticker
	nextPoll    time.Duration
	cached      map[string]cachedValue
	emptyIsZero bool
	renders     int
}

type cachedValue struct {
	v   float64
	err error
}

func (pf *promFeed) scrapeTick(now time.Duration, f *fleet) error {
	pf.nextTick = now + pf.tick.period
	if !pf.everyTick && pf.consumer.at(now) >= now+pf.tick.period {
		return nil
	}
	pf.lastTick = now
	for _, p := range f.pods {
		if p.phase == phaseStarting {
			continue
		}
		body, err := f.render(p)
		if err != nil {
			return err
		}
		pf.renders++
		if pf.src.Scrape(p.num, now, body) == nil {
			pf.scrapedAt[p.num] = now
		}
	}
	return nil
}

// query evaluates sum()/avg() of metric over the series of the latest scrape, as
// an instant query does (series of pods gone since are stale).
func (pf *promFeed) query(metric string, f *fleet) (float64, error) {
	// An instant query at the latest scrape's time: samples of pods scraped then.
	var fresh []int
	for _, p := range f.pods {
		if t, ok := pf.scrapedAt[p.num]; ok && t == pf.lastTick {
			fresh = append(fresh, p.num)
		}
	}
	v, err := pf.src.External(metric, pf.lastTick, fresh, 0)
	if err != nil && pf.emptyIsZero {
		return 0, nil
	}
	return v, err
}

func (pf *promFeed) forget(p *pod) {
	delete(pf.scrapedAt, p.num)
	pf.src.Forget(p.num)
}

// gpuFeed is NVML utilization.gpu (busy fraction: at least one kernel running)
// of each pod's GPU as Prometheus scrapes it from an exporter every tick: the
// fraction of the previous tick interval the engine spent in steps. Pods starting
// (loading weights) have a GPU and report 0.
type gpuFeed struct {
	tick     ticker
	nextTick time.Duration
	prev     map[int]time.Duration
	samples  map[int]gpuSample
}

type gpuSample struct {
	milli int64
	at    time.Duration
}

func (g *gpuFeed) scrapeTick(now time.Duration, f *fleet) {
	g.nextTick = now + g.tick.period
	for _, p := range f.pods {
		b := p.busyAt(now)
		frac := float64(b-g.prev[p.num]) / float64(g.tick.period)
		g.prev[p.num] = b
		g.samples[p.num] = gpuSample{milli: milli(min(frac, 1)), at: now}
	}
}

func (g *gpuFeed) forget(p *pod) {
	delete(g.prev, p.num)
	delete(g.samples, p.num)
}

// servesMetric reports whether src serves metric; names compare
// case-insensitively, as the HPA lower-cases them.
func servesMetric(src MetricSource, metric string, perPod bool) bool {
	for _, m := range src.Metrics(perPod) {
		if strings.EqualFold(m, metric) {
			return true
		}
	}
	return false
}

// hpaPolicy runs the HPA model on its sync period over the feeds its metrics need.
type hpaPolicy struct {
	ctrl     *hpa.Controller
	sync     ticker
	nextSync time.Duration
	path     MetricsPath
	adapter  *adapterFeed
	prom     *promFeed
	gpu      *gpuFeed
	syncs    int
}

// pipelineSettings are the feed intervals and phases of one run.
type pipelineSettings struct {
	sync, scrape, prom, gpu, poll ticker
	maxAge                        time.Duration
	everyTick                     bool
}

// newHPAPolicy checks that every metric of h can be served on path and sets up
// the feeds. src is the policy's own MetricSource.
func newHPAPolicy(h *autoscalingv2.HorizontalPodAutoscaler, opts hpa.Options, path MetricsPath, src MetricSource, ps pipelineSettings, f *fleet) (*hpaPolicy, error) {
	ctrl, err := hpa.New(h, opts)
	if err != nil {
		return nil, err
	}
	p := &hpaPolicy{ctrl: ctrl, sync: ps.sync, nextSync: ps.sync.phase, path: path}
	var errs []error
	needSource, needGPU := false, false
	for i, m := range h.Spec.Metrics {
		switch m.Type {
		case autoscalingv2.ExternalMetricSourceType:
			if !servesMetric(src, m.External.Metric.Name, false) {
				errs = append(errs, fmt.Errorf("metrics[%d]: External metric %q is not one the simulated adapter serves (%v)", i, m.External.Metric.Name, src.Metrics(false)))
			}
			needSource = true
		case autoscalingv2.PodsMetricSourceType:
			if path != PathAdapter {
				errs = append(errs, fmt.Errorf("metrics[%d]: Pods metrics are simulated on the adapter path only, not %s", i, path))
			} else if !servesMetric(src, m.Pods.Metric.Name, true) {
				errs = append(errs, fmt.Errorf("metrics[%d]: Pods metric %q is not one the simulated adapter serves per pod (%v)", i, m.Pods.Metric.Name, src.Metrics(true)))
			}
			needSource = true
		case autoscalingv2.ResourceMetricSourceType, autoscalingv2.ContainerResourceMetricSourceType:
			name := corev1.ResourceName("")
			if m.Resource != nil {
				name = m.Resource.Name
			} else {
				name = m.ContainerResource.Name
			}
			if name != GPUResource {
				errs = append(errs, fmt.Errorf("metrics[%d]: resource %q is not simulated; the simulation knows %s (GPU busy fraction, one GPU per pod)", i, name, GPUResource))
			}
			needGPU = true
		default:
			errs = append(errs, fmt.Errorf("metrics[%d]: %s metrics are not simulated", i, m.Type))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if needSource {
		switch path {
		case PathAdapter:
			p.adapter = &adapterFeed{src: src, tick: ps.scrape, consumer: ps.sync, everyTick: ps.everyTick, maxAge: ps.maxAge,
				nextTick: ps.scrape.phase, state: map[int]*scrapeState{}}
			f.onRemove = append(f.onRemove, p.adapter.forget)
		case PathPrometheus, PathKEDA:
			p.prom = &promFeed{src: src, tick: ps.prom, consumer: ps.sync, everyTick: ps.everyTick, nextTick: ps.prom.phase,
				lastTick: -1, scrapedAt: map[int]time.Duration{}}
			if path == PathKEDA {
				poll := ps.poll
				p.prom.poll, p.prom.nextPoll, p.prom.consumer = &poll, poll.phase, poll
				p.prom.cached, p.prom.emptyIsZero = map[string]cachedValue{}, true
			}
			f.onRemove = append(f.onRemove, p.prom.forget)
		default:
			return nil, fmt.Errorf("unknown metrics path %q", path)
		}
	}
	if needGPU {
		p.gpu = &gpuFeed{tick: ps.gpu, nextTick: ps.gpu.phase, prev: map[int]time.Duration{}, samples: map[int]gpuSample{}}
		f.onRemove = append(f.onRemove, p.gpu.forget)
	}
	return p, nil
}

func (p *hpaPolicy) next() time.Duration {
	t := p.nextSync
	if p.adapter != nil {
		t = min(t, p.adapter.nextTick)
	}
	if p.prom != nil {
		t = min(t, p.prom.nextTick)
		if p.prom.poll != nil {
			t = min(t, p.prom.nextPoll)
		}
	}
	if p.gpu != nil {
		t = min(t, p.gpu.nextTick)
	}
	return t
}

// wake runs what is due at now: scrapes, then KEDA's poll, then the HPA sync.
func (p *hpaPolicy) wake(now time.Duration, f *fleet) error {
	if p.adapter != nil && p.adapter.nextTick <= now {
		if err := p.adapter.scrapeTick(now, f); err != nil {
			return err
		}
	}
	if p.prom != nil && p.prom.nextTick <= now {
		if err := p.prom.scrapeTick(now, f); err != nil {
			return err
		}
	}
	if p.gpu != nil && p.gpu.nextTick <= now {
		p.gpu.scrapeTick(now, f)
	}
	if p.prom != nil && p.prom.poll != nil && p.prom.nextPoll <= now {
		p.prom.nextPoll = now + p.prom.poll.period
		for _, m := range p.ctrl.HPA().Spec.Metrics {
			if m.External != nil {
				v, err := p.prom.query(m.External.Metric.Name, f)
				p.prom.cached[m.External.Metric.Name] = cachedValue{v, err}
			}
		}
	}
	if p.nextSync <= now {
		p.nextSync = now + p.sync.period
		p.syncs++
		current := int32(f.nonTerminating())
		res := p.ctrl.Sync(f.t0.Add(now), hpa.Scale{SpecReplicas: current, StatusReplicas: current}, f.podObjects(), &syncClient{p: p, f: f, now: now})
		if res.Rescale {
			return f.setReplicas(int(res.DesiredReplicas))
		}
	}
	return nil
}

// syncClient answers the HPA model's metric queries at one sync.
type syncClient struct {
	p   *hpaPolicy
	f   *fleet
	now time.Duration
}

var _ hpa.MetricsClient = (*syncClient)(nil)

func (c *syncClient) GetExternalMetric(name string, _ labels.Selector) ([]int64, time.Time, error) {
	var (
		v   float64
		err error
	)
	switch {
	case c.p.adapter != nil:
		fresh, unknown, perr := c.p.adapter.pool(c.now, c.f)
		if perr != nil {
			return nil, time.Time{}, perr
		}
		v, err = c.p.adapter.src.External(name, c.now, fresh, unknown)
	case c.p.prom != nil && c.p.prom.poll != nil:
		cv, ok := c.p.prom.cached[name]
		if !ok { // before KEDA's first poll its metrics server queries directly
			cv.v, cv.err = c.p.prom.query(name, c.f)
		}
		v, err = cv.v, cv.err
	case c.p.prom != nil:
		v, err = c.p.prom.query(name, c.f)
	default:
		err = fmt.Errorf("no feed for External metric %q", name)
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	return []int64{milli(v)}, c.f.t0.Add(c.now), nil
}

func (c *syncClient) GetRawMetric(name string, _, _ labels.Selector) (hpa.PodMetricsInfo, time.Time, error) {
	a := c.p.adapter
	if a == nil {
		return nil, time.Time{}, fmt.Errorf("no feed for Pods metric %q", name)
	}
	fresh, _, err := a.pool(c.now, c.f)
	if err != nil {
		return nil, time.Time{}, err
	}
	out := hpa.PodMetricsInfo{}
	for _, num := range fresh {
		v, ok := a.src.PodValue(name, c.now, num)
		if !ok {
			continue
		}
		for _, p := range c.f.pods {
			if p.num == num {
				out[p.name] = hpa.PodMetric{Value: milli(v), Timestamp: c.f.t0.Add(a.state[num].okAt), Window: a.tick.period}
			}
		}
	}
	if len(out) == 0 {
		return nil, time.Time{}, fmt.Errorf("no pod has a fresh %s", name)
	}
	return out, c.f.t0.Add(c.now), nil
}

func (c *syncClient) GetResourceMetric(name corev1.ResourceName, _ labels.Selector, _ string) (hpa.PodMetricsInfo, time.Time, error) {
	g := c.p.gpu
	if g == nil || name != GPUResource {
		return nil, time.Time{}, fmt.Errorf("resource %q is not simulated", name)
	}
	out := hpa.PodMetricsInfo{}
	for _, p := range c.f.pods {
		if s, ok := g.samples[p.num]; ok {
			out[p.name] = hpa.PodMetric{Value: s.milli, Timestamp: c.f.t0.Add(s.at), Window: g.tick.period}
		}
	}
	if len(out) == 0 {
		return nil, time.Time{}, errors.New("no metrics returned from resource metrics API")
	}
	return out, c.f.t0.Add(c.now), nil
}

func (c *syncClient) GetObjectMetric(name string, _ autoscalingv2.CrossVersionObjectReference, _ labels.Selector) (int64, time.Time, error) {
	return 0, time.Time{}, fmt.Errorf("metric %q of type Object is not simulated", name)
}

// scheduleEvent is one action of a replica schedule.
type scheduleEvent struct {
	at      time.Duration
	create  int           // pods to create, Ready at readyAt
	readyAt time.Duration // when the created pods are Ready
	drain   int           // Ready pods to drain
}

// schedulePolicy executes a precomputed schedule (the oracle's).
type schedulePolicy struct {
	events []scheduleEvent
	i      int
}

func (s *schedulePolicy) next() time.Duration {
	if s.i < len(s.events) {
		return s.events[s.i].at
	}
	return never
}

func (s *schedulePolicy) wake(now time.Duration, f *fleet) error {
	for s.i < len(s.events) && s.events[s.i].at <= now {
		e := s.events[s.i]
		s.i++
		from := f.nonTerminating()
		for range e.create {
			if _, err := f.newPod(max(e.readyAt, now)); err != nil {
				return err
			}
		}
		f.drainReady(e.drain)
		if to := f.nonTerminating(); to != from {
			f.changes = append(f.changes, scaleChange{at: now, from: from, to: to})
		}
	}
	return nil
}
