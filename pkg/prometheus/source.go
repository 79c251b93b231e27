// Package prometheus is the adapter's second signal source: instead of
// scraping engines, it reads their series from Prometheus (or Thanos Query,
// Mimir, VictoriaMetrics: the Prometheus HTTP API) and builds, per pod, the
// same history.History a scrape would, so pooling, terms, validity rules and
// engine states are pkg/signals' alone and do not fork.
//
// Per namespace and cache period it runs one range query of the engine series
// (the families signals.Extractor reads, by name, restricted to the namespace
// and Queries.Matchers; an overridden family in a query of its own) and one
// query per window length of the counters' and histogram buckets' increase().
// Every HPA and request of the namespace shares that answer; concurrent
// misses collapse into one round trip. Series are joined to the pods the
// provider asks about by (namespace, pod) label; the pods themselves come from
// the informer, exactly as in direct mode.
package prometheus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"golang.org/x/sync/singleflight"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/saturation-adapter/saturation-adapter/internal/excerpt"
	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// Defaults of Options and of the adapter's --prometheus-* flags.
const (
	// DefaultTimeout bounds the queries of one namespace: the HPA controller's
	// five workers wait on a slow metrics API (hazard: a slow adapter delays
	// every HPA), and 5 s is well inside its request timeout.
	DefaultTimeout = 5 * time.Second
	// DefaultCachePeriod is how long one answer serves every request of its
	// namespace: 2 s, the direct mode's scrape interval, so that 200 HPAs
	// polling every 15 s cost one round trip per namespace and query every 2 s
	// at most.
	DefaultCachePeriod = 2 * time.Second
	// DefaultScrapeInterval is Prometheus's scrape interval for the engines:
	// 30 s, the Prometheus Operator's default for a ServiceMonitor or
	// PodMonitor without an interval.
	DefaultScrapeInterval = 30 * time.Second
	// DefaultMaxResponseBytes bounds one answer's body: 16 MiB holds the
	// engine series of about 2,500 vLLM pods of one namespace at a 15 s
	// scrape interval (a pod's series take ~6 KB). Answers are decoded as
	// they stream in, keeping only the namespace's pods' series of the
	// families read, so what one answer holds is at most about its size;
	// every answer held at once is bounded by heldAnswersFactor times it.
	// (64 MiB before issue 20: a 60 MB answer held a replica at its 512 MiB
	// limit while it was read whole and decoded into maps.)
	DefaultMaxResponseBytes = 16 << 20
	// heldAnswersFactor bounds the bytes of every answer held at once (being
	// decoded, or cached for the cache period) to this many times
	// --prometheus-max-response-bytes: 128 MiB at the default.
	heldAnswersFactor = 8
	// maxPointsPerSeries bounds the samples kept per series of a range
	// answer: 90 s at a 1 s scrape interval is 90, the state window at 30 s
	// 3; 1,024 leaves room for any sane range and scrape interval.
	maxPointsPerSeries = 1024
	// maxClockSkew is how far in the future a sample may be and still be
	// read: beyond it Prometheus (or something before it) forged its time,
	// which would keep a frozen value fresh forever.
	maxClockSkew = time.Minute
)

// Options configure a Source.
type Options struct {
	// URL names Prometheus in messages (credentials redacted).
	URL string
	// Labels name the namespace and pod labels of the series.
	Labels Labels
	// Timeout bounds one namespace's queries; CachePeriod is how long their
	// answer is served.
	Timeout     time.Duration
	CachePeriod time.Duration
	// ScrapeInterval is Prometheus's scrape interval for the engines: a series
	// whose newest sample is 1.5 intervals older than its pod's newest has
	// ended.
	ScrapeInterval time.Duration
	// MaxAge is the age beyond which a pod's newest sample is stale (the
	// provider's max age): the engine series query reaches back at least this
	// far, so a stale pod is seen as stale, with its age.
	MaxAge time.Duration
	// StateWindow is the span engine states are judged over.
	StateWindow time.Duration
	// Extract bounds what one pod's series may hold (MaxSeries, MaxEngines).
	Extract signals.ExtractOptions
	// MaxHeldBytes bounds the bytes of the series held from every answer at
	// once (being decoded, or cached for the cache period); a query whose
	// series would go beyond fails (reason response), and the HPA holds.
	// heldAnswersFactor × DefaultMaxResponseBytes when 0.
	MaxHeldBytes int64
	// Count, when set, hears about the newest reading built for each pod from
	// each answer, to count its rejected and duplicate series on the same
	// self-metrics as scrapes (scrape.Metrics.Count).
	Count func(*signals.Reading)
}

// Source reads pods' histories from Prometheus. It is safe for concurrent use.
type Source struct {
	opts    Options
	client  *Client
	clock   clock.PassiveClock
	metrics *Metrics
	// held is the bytes charged by the answers decoding or cached (see
	// Options.MaxHeldBytes).
	held atomic.Int64

	gen   atomic.Pointer[generation]
	gens  atomic.Uint64
	group singleflight.Group

	mu    sync.Mutex
	cache map[string]*entry // by namespace

	// memory holds each pod's last history built from series, by UID, so that
	// a pod whose series vanish keeps its last good reading (stale, then held
	// as in direct mode) rather than becoming a pod never seen.
	memMu  sync.Mutex
	memory map[types.UID]*history.History
}

// generation is what one catalog and Queries make: the plan and how answers
// become histories.
type generation struct {
	// id tells generations apart in the single-flight key.
	id     uint64
	plan   plan
	build  buildOptions
	retain time.Duration
}

// entry is one namespace's answer.
type entry struct {
	gen *generation
	// build is the generation's, evaluated at the fetch's time.
	build buildOptions
	at    time.Time
	err   error
	pods  map[types.NamespacedName]*podData

	// count is Options.Count.
	count func(*signals.Reading)
	// bytes is what the entry's series were charged (Source.held).
	bytes atomic.Int64

	mu    sync.Mutex
	built map[types.NamespacedName]builtPod
}

type builtPod struct {
	h   *history.History
	err error
}

// New returns a Source querying Prometheus through client, for the catalog's
// needs and the Queries. Errors name a bad selector of q.
func New(opts Options, client *Client, catalog *policy.Catalog, q Queries, clk clock.PassiveClock, metrics *Metrics) (*Source, error) {
	if opts.Labels == (Labels{}) {
		opts.Labels = DefaultLabels()
	}
	if opts.StateWindow <= 0 {
		opts.StateWindow = history.DefaultStateWindow
	}
	if opts.MaxHeldBytes <= 0 {
		opts.MaxHeldBytes = heldAnswersFactor * DefaultMaxResponseBytes
	}
	s := &Source{opts: opts, client: client, clock: clk, metrics: metrics, cache: map[string]*entry{}, memory: map[types.UID]*history.History{}}
	if err := s.SetCatalog(catalog, q); err != nil {
		return nil, err
	}
	return s, nil
}

// SetCatalog makes the source read what catalog's policies need, where q says
// (a configuration reload); answers cached under the previous ones are not
// served again. Errors name a bad selector of q and change nothing.
func (s *Source) SetCatalog(catalog *policy.Catalog, q Queries) error {
	g, err := s.newGeneration(catalog, q)
	if err != nil {
		return err
	}
	s.gen.Store(g)
	return nil
}

func (s *Source) newGeneration(catalog *policy.Catalog, q Queries) (*generation, error) {
	needs := catalog.Needs()
	extract := s.opts.Extract
	extract.Histograms = needs.Histograms
	extract.GatewayMetrics = needs.GatewayMetrics
	e := signals.NewExtractorWith(extract)
	matchers, err := ParseMatchers(q.Matchers)
	if err != nil {
		return nil, fmt.Errorf("prometheus matchers %q: %w", q.Matchers, err)
	}
	known, reading := map[string]bool{}, map[string]bool{}
	for _, f := range signals.NewExtractor().Families() {
		known[f.Name] = true
	}
	for _, f := range e.Families() {
		reading[f.Name] = true
	}
	p := plan{labels: s.opts.Labels, matchers: matchers, families: e.Families(), overrides: map[string][]*labels.Matcher{},
		seriesRange: max(s.opts.StateWindow, s.opts.MaxAge)}
	for fam, sel := range q.Series {
		ms, err := ParseSeries(sel)
		if err != nil {
			return nil, fmt.Errorf("prometheus series %s: %w", fam, err)
		}
		switch {
		case !known[fam]:
			return nil, fmt.Errorf("prometheus series %s: not an engine metric family the adapter reads", fam)
		case reading[fam]: // else a histogram, and no policy reads histograms now
			p.overrides[fam] = ms
		}
	}
	// Windows: every rate and latency term's, with the histograms its latency
	// terms read, and the clipped state's lost demand (policy.DefaultTermWindow)
	// for each policy's model.
	keys := slices.Clone(needs.Windows)
	retain := s.opts.MaxAge
	histos := map[time.Duration]map[signals.Histo]bool{}
	for _, pol := range catalog.Policies() {
		retain = max(retain, pol.HoldLastGood+s.opts.MaxAge)
		if pol.Kind == policy.KindSignal {
			continue
		}
		if k := (history.WindowKey{Window: policy.DefaultTermWindow, Model: pol.Model}); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
		for _, t := range pol.Terms {
			if h, ok := t.Kind.Histo(); ok {
				if histos[t.Window] == nil {
					histos[t.Window] = map[signals.Histo]bool{}
				}
				histos[t.Window][h] = true
			}
		}
	}
	for _, k := range keys {
		if !slices.ContainsFunc(p.windows, func(w window) bool { return w.d == k.Window }) {
			p.windows = append(p.windows, window{d: k.Window, histos: histos[k.Window]})
		}
	}
	slices.SortFunc(p.windows, func(a, b window) int { return int(a.d - b.d) })
	hopts := history.HistoryOptions{Needs: needs, StateWindow: s.opts.StateWindow}
	return &generation{id: s.gens.Add(1), plan: p, build: newBuildOptions(e, hopts, keys, s.opts.ScrapeInterval), retain: retain}, nil
}

// Histories returns how to read the history of each member of one namespace:
// the namespace's answer from Prometheus, fetched once per cache period and
// shared by every request. A member without series has no history and says
// why; one whose series vanished keeps its last history, whose newest reading
// then ages (stale, then held at its last good value, as in direct mode).
// The error, when Prometheus does not answer (down, slow, erroring, a bad
// answer), says why in at most a few hundred bytes; the request then fails and
// the HPA holds.
func (s *Source) Histories(ctx context.Context, namespace string, members []podselect.Member) (func(*podselect.Member) (*history.History, string), error) {
	if !slices.ContainsFunc(members, func(m podselect.Member) bool { return m.Counted }) {
		return func(*podselect.Member) (*history.History, string) { return nil, "not Ready" }, nil
	}
	e, err := s.entry(ctx, namespace)
	if err != nil {
		return nil, err
	}
	now := s.clock.Now()
	return func(m *podselect.Member) (*history.History, string) {
		b := e.get(m.Pod)
		if b.h != nil {
			s.remember(m.UID, b.h)
			s.observeAge(now, b.h)
			return b.h, ""
		}
		why := why(b.err, e.gen.plan.seriesRange)
		if h := s.recall(m.UID); h != nil {
			s.observeAge(now, h)
			return h, why
		}
		return nil, why
	}, nil
}

func (s *Source) observeAge(now time.Time, h *history.History) {
	if r := h.Latest(); r != nil {
		s.metrics.DataAge.Observe(max(0, now.Sub(r.At()).Seconds()))
	}
}

func (s *Source) remember(uid types.UID, h *history.History) {
	s.memMu.Lock()
	s.memory[uid] = h
	s.memMu.Unlock()
}

func (s *Source) recall(uid types.UID) *history.History {
	s.memMu.Lock()
	defer s.memMu.Unlock()
	return s.memory[uid]
}

// forget drops remembered histories older than retain (the longest hold of
// the catalog plus the max age): nothing would count them any more.
func (s *Source) forget(now time.Time, retain time.Duration) {
	s.memMu.Lock()
	defer s.memMu.Unlock()
	for uid, h := range s.memory {
		if r := h.Latest(); r == nil || now.Sub(r.At()) > retain {
			delete(s.memory, uid)
		}
	}
}

// get returns a pod's history, built on first use.
func (e *entry) get(pod types.NamespacedName) builtPod {
	e.mu.Lock()
	defer e.mu.Unlock()
	if b, ok := e.built[pod]; ok {
		return b
	}
	h, err := build(e.pods[pod], e.build)
	if r := h.Latest(); r != nil {
		if e.count != nil {
			e.count(r)
		}
		if len(r.Warnings) > 0 {
			klog.V(2).InfoS("Prometheus series of a pod unusable as read", "pod", pod, "warnings", r.Warnings)
		}
	}
	b := builtPod{h: h, err: err}
	e.built[pod] = b
	return b
}

// entry returns the namespace's answer: the cached one while it is younger
// than the cache period, else a new one, fetched once however many requests
// wait for it. A failed fetch is cached too, so that a Prometheus that is down
// is asked once per cache period, not once per request.
func (s *Source) entry(ctx context.Context, namespace string) (*entry, error) {
	g := s.gen.Load()
	now := s.clock.Now()
	s.mu.Lock()
	e, ok := s.cache[namespace]
	s.mu.Unlock()
	if ok && e.gen == g && now.Sub(e.at) < s.opts.CachePeriod {
		return e, e.err
	}
	ch := s.group.DoChan(fmt.Sprintf("%d/%s", g.id, namespace), func() (any, error) {
		e := s.fetch(namespace, g)
		s.mu.Lock()
		if old, ok := s.cache[namespace]; ok {
			s.release(old)
		}
		s.cache[namespace] = e
		s.mu.Unlock()
		return e, nil
	})
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for Prometheus: %w", ctx.Err())
	case r := <-ch:
		e := r.Val.(*entry)
		return e, e.err
	}
}

// fetch runs the namespace's queries concurrently, within the timeout and
// whatever the requests waiting on it do (they share the answer). Answers of
// other namespaces older than the cache period are let go first: they would
// only be fetched again.
func (s *Source) fetch(namespace string, g *generation) *entry {
	start := s.clock.Now()
	s.evict(start)
	e := &entry{gen: g, build: g.build, at: start, pods: map[types.NamespacedName]*podData{}, built: map[types.NamespacedName]builtPod{}, count: s.opts.Count}
	e.build.now = start
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	qs := g.plan.queries(namespace)
	type result struct {
		ss      []series
		skipped int
		err     error
	}
	results := make([]result, len(qs))
	var wg sync.WaitGroup
	for i, q := range qs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i].ss, results[i].skipped, results[i].err = s.query(ctx, q, start, namespace, g, e)
		}()
	}
	wg.Wait()
	for i, q := range qs {
		if err := results[i].err; err != nil {
			e.err = fmt.Errorf("querying Prometheus at %s (%s query for namespace %q): %s", Redact(s.opts.URL), q.kind, namespace, excerpt.String(err.Error(), 400))
			s.release(e)
			e.pods = nil
			return e
		}
		if n := results[i].skipped; n > 0 {
			klog.V(4).InfoS("Prometheus series of another namespace, without a pod label, of a family not read or past a pod's series bound ignored",
				"namespace", namespace, "query", q.kind, "series", n, "namespaceLabel", g.plan.labels.Namespace, "podLabel", g.plan.labels.Pod)
		}
		byPod(e.pods, results[i].ss, g.plan.labels, namespace, q.family, q.window)
	}
	s.forget(start, g.retain)
	return e
}

// errHeld: the answers held at once would exceed Options.MaxHeldBytes.
var errHeld = errors.New("the Prometheus answers held at once would exceed their bound")

// query runs one query at time ts and returns the series it keeps, counting
// and timing it: the series of namespace's pods (by the plan's labels) of the
// families read, at most MaxSeries + 1 per pod (one more fails the pod's
// extraction with ErrTooManySeries), their points within the query's range
// (and not in the future), each charged to the held bytes through e.
// skipped counts the series not kept.
func (s *Source) query(ctx context.Context, q query, ts time.Time, namespace string, g *generation, e *entry) (ss []series, skipped int, err error) {
	start := time.Now()
	l := g.plan.labels
	perPod := map[string]int{}
	maxSeries := s.opts.Extract.MaxSeries
	if maxSeries <= 0 {
		maxSeries = signals.DefaultMaxSeries
	}
	keep := func(lset seriesLabels) bool {
		pod := lset.Get(l.Pod)
		name := lset.Get(familyLabel)
		if name == "" {
			name = lset.Get(model.MetricNameLabel)
		}
		if lset.Get(l.Namespace) != namespace || pod == "" || (q.family == "" && !g.build.names[name]) || perPod[pod] > maxSeries {
			skipped++
			return false
		}
		perPod[pod]++
		return true
	}
	rng := g.plan.seriesRange
	if q.window > 0 {
		rng = 0 // an instant vector: one sample per series, at ts
	}
	lim := decodeLimits{notBefore: ts.Add(-rng - s.opts.ScrapeInterval).UnixMilli(), notAfter: ts.Add(maxClockSkew).UnixMilli(),
		maxPoints: maxPointsPerSeries, charge: func(n int64) error {
			if s.held.Add(n) > s.opts.MaxHeldBytes {
				s.held.Add(-n)
				return fmt.Errorf("%w (%d bytes: %d × --prometheus-max-response-bytes)", errHeld, s.opts.MaxHeldBytes, heldAnswersFactor)
			}
			e.bytes.Add(n)
			return nil
		}}
	a, err := s.client.query(ctx, q.expr, ts, s.opts.Timeout, lim, keep)
	outcome := "success"
	if err != nil {
		outcome = "error"
		s.metrics.QueryErrors.WithLabelValues(string(reasonOf(err))).Inc()
	}
	s.metrics.QueryDuration.WithLabelValues(q.kind, outcome).Observe(time.Since(start).Seconds())
	if len(a.warnings) > 0 {
		klog.V(4).InfoS("Prometheus query warnings", "query", q.expr, "warnings", a.warnings)
	}
	if err != nil {
		return nil, skipped, err
	}
	return a.series, skipped, nil
}

// release gives back what an entry's series were charged.
func (s *Source) release(e *entry) { s.held.Add(-e.bytes.Swap(0)) }

// evict lets go of the cached answers older than the cache period: they are
// fetched again before any request reads them.
func (s *Source) evict(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ns, e := range s.cache {
		if now.Sub(e.at) >= s.opts.CachePeriod {
			delete(s.cache, ns)
			s.release(e)
		}
	}
}
