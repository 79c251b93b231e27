// Package prometheus is the adapter's second signal source: instead of
// scraping engines, it reads their series from Prometheus (or Thanos Query,
// Mimir, VictoriaMetrics: the Prometheus HTTP API) and builds, per pod, the
// same history.History a scrape would, so pooling, terms, validity rules and
// engine states are pkg/signals' alone and do not fork.
//
// Per namespace and cache period it runs one range query of the engine series
// (the families signals.Extractor reads, by name, restricted to the namespace
// and Queries.Matchers; an overridden family in a query of its own) and, per
// window length, one query per counter (or histogram bucket) family of its
// increase(), at most maxQueriesInFlight at a time, and builds every pod's
// history from the answers. Requests are served from
// memory: the newest answer, while a refresh runs in the background
// (stale-while-revalidate), as long as it is not older than the max age; only
// the first request of a namespace waits for Prometheus. Namespaces are
// refreshed on the cache period (Run) while requests ask about them, never
// per request. Series are joined to the pods the provider asks about by
// (namespace, pod) label; the pods themselves come from the informer, exactly
// as in direct mode.
package prometheus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
	// maxQueriesInFlight bounds the queries one namespace's refresh runs at
	// once (one per window and counter family, plus the series): 4 keeps a
	// Prometheus's cores busy without taking all of its
	// --query.max-concurrency (20 by default) for one namespace.
	maxQueriesInFlight = 4
	// DefaultIdleTimeout is how long a namespace is refreshed after its last
	// request: 10 minutes, the adapter's --selector-idle-timeout default, far
	// above an HPA's 15 s sync period.
	DefaultIdleTimeout = 10 * time.Minute
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
	// IdleTimeout is how long a namespace nobody asks about is still
	// refreshed (DefaultIdleTimeout when 0); then its answer is let go and
	// the next request waits for a new one.
	IdleTimeout time.Duration
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
	// refreshing counts the refreshes in flight (tests wait for them).
	refreshing sync.WaitGroup

	mu     sync.Mutex
	spaces map[string]*space // by namespace
	// inflight holds the keys of the background refreshes running.
	inflight map[string]bool

	// memory holds each pod's last history built from series, by UID, so that
	// a pod whose series vanish keeps its last good reading (stale, then held
	// as in direct mode) rather than becoming a pod never seen. Written once
	// per pod and refresh, read by every request: *history.History values.
	memory sync.Map

	hookMu sync.Mutex
	hooks  []func(namespace string)
}

// space is what the source keeps of one namespace: its newest good answer,
// the newest failed one when it is newer, and when a request last asked.
type space struct {
	good, failed *entry
	lastAsked    time.Time
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

// entry is one namespace's answer: every pod's history, built when the
// answer arrived, read-only afterwards.
type entry struct {
	gen *generation
	at  time.Time
	err error
	// built holds each pod's history (or why it has none) by pod.
	built map[types.NamespacedName]builtPod
	// bytes is what the entry's series were charged (Source.held) while
	// they were held.
	bytes atomic.Int64
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
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	s := &Source{opts: opts, client: client, clock: clk, metrics: metrics, spaces: map[string]*space{}, inflight: map[string]bool{}}
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

// Histories returns how to read the history of each member of one namespace
// from memory: the namespace's newest answer from Prometheus, refreshed in
// the background once per cache period and shared by every request. Only the
// first request of a namespace (or the first after a configuration change
// or an idle timeout) waits for Prometheus. A member without series has no
// history and says why; one whose series vanished keeps its last history,
// whose newest reading then ages (stale, then held at its last good value,
// as in direct mode). The error, when there is no answer younger than the
// max age (Prometheus down, slow, erroring, a bad answer), says why in at
// most a few hundred bytes; the request then fails and the HPA holds: an
// answer too old is never served silently.
func (s *Source) Histories(ctx context.Context, namespace string, members []podselect.Member) (func(*podselect.Member) (*history.History, string), error) {
	if !slices.ContainsFunc(members, func(m podselect.Member) bool { return m.Counted }) {
		return func(*podselect.Member) (*history.History, string) { return nil, "not Ready" }, nil
	}
	now := s.clock.Now()
	e, err := s.answer(ctx, namespace, now)
	if err != nil {
		return nil, err
	}
	return func(m *podselect.Member) (*history.History, string) {
		return s.memberHistory(e, m, now)
	}, nil
}

// Serve makes sure the namespace has an answer to serve at the clock's time,
// as Histories does: nil, or the error Histories would return.
func (s *Source) Serve(ctx context.Context, namespace string) error {
	_, err := s.answer(ctx, namespace, s.clock.Now())
	return err
}

// Lookup returns a member's history in the namespace's newest answer (or its
// last one, when its series vanished), as Histories' function does, without
// I/O.
func (s *Source) Lookup(m *podselect.Member) (*history.History, string) {
	s.mu.Lock()
	var e *entry
	if sp := s.spaces[m.Pod.Namespace]; sp != nil {
		e = sp.good
	}
	s.mu.Unlock()
	if e == nil {
		return nil, "no answer from Prometheus yet"
	}
	return s.memberHistory(e, m, s.clock.Now())
}

// memberHistory returns m's history in answer e (remembered for when its
// series vanish), else its last remembered one with why it has none in e.
func (s *Source) memberHistory(e *entry, m *podselect.Member, now time.Time) (*history.History, string) {
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
}

// Watch tells fn, with the namespace and no pod, after each refresh that
// replaced a namespace's answer: any of its pods' histories may have changed.
func (s *Source) Watch(fn func(namespace string, uid types.UID)) {
	s.OnRefresh(func(namespace string) { fn(namespace, "") })
}

// OnRefresh registers fn, called with the namespace after each refresh that
// replaced its answer (in the refresh's goroutine): what Histories returns
// for its pods may have changed.
func (s *Source) OnRefresh(fn func(namespace string)) {
	s.hookMu.Lock()
	s.hooks = append(s.hooks, fn)
	s.hookMu.Unlock()
}

// maxAnswerAge is the oldest answer served: the max age (an answer older
// than that holds only stale samples), at least the cache period plus the
// timeout (what one refresh may take).
func (s *Source) maxAnswerAge() time.Duration {
	return max(s.opts.MaxAge, s.opts.CachePeriod+s.opts.Timeout)
}

// answer returns the namespace's answer to serve at now, recording that it
// was asked: the newest good answer of the current generation, starting a
// background refresh when it is older than the cache period; an error when it
// is older than the max age, or when a refresh after it failed (the failure,
// naming Prometheus; asked again once per cache period). Without one it waits (within ctx) for a refresh,
// unless one failed within the cache period: a Prometheus that is down is
// asked once per period, not once per request.
func (s *Source) answer(ctx context.Context, namespace string, now time.Time) (*entry, error) {
	g := s.gen.Load()
	s.mu.Lock()
	sp := s.spaces[namespace]
	if sp == nil {
		sp = &space{}
		s.spaces[namespace] = sp
	}
	if now.After(sp.lastAsked) {
		sp.lastAsked = now
	}
	good, failed := sp.good, sp.failed
	s.mu.Unlock()
	recentFailure := failed != nil && failed.gen == g && now.Sub(failed.at) < s.opts.CachePeriod
	if good != nil && good.gen == g {
		age := now.Sub(good.at)
		failedSince := failed != nil && failed.gen == g && failed.at.After(good.at)
		if age >= s.opts.CachePeriod && !recentFailure {
			s.refreshAsync(namespace, g)
		}
		if age <= s.maxAnswerAge() && !failedSince {
			return good, nil
		}
		// Older than the max age, or a refresh after it failed: the previous
		// answer is served while a refresh runs, not after one failed, so the
		// request fails naming Prometheus (and the HPA holds) rather than
		// reading data that only grows older.
		msg := fmt.Sprintf("the newest answer from Prometheus at %s for namespace %q is %s old",
			Redact(s.opts.URL), namespace, age.Round(time.Millisecond))
		if age > s.maxAnswerAge() {
			msg += fmt.Sprintf(", older than the max age %s", s.maxAnswerAge())
		}
		if failed != nil && failed.gen == g {
			msg += "; the last refresh failed: " + failed.err.Error()
		} else {
			msg += "; a refresh is running"
		}
		return nil, errors.New(excerpt.String(msg, 700))
	}
	if recentFailure {
		return nil, failed.err
	}
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for Prometheus: %w", ctx.Err())
	case r := <-s.refreshChan(namespace, g):
		e := r.Val.(*entry)
		if e.err != nil {
			return nil, e.err
		}
		return e, nil
	}
}

// refreshAsync starts a refresh of the namespace unless one runs.
func (s *Source) refreshAsync(namespace string, g *generation) {
	key := refreshKey(namespace, g)
	s.mu.Lock()
	if s.inflight[key] {
		s.mu.Unlock()
		return
	}
	s.inflight[key] = true
	s.refreshing.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.refreshing.Done()
		s.group.Do(key, func() (any, error) { return s.refresh(namespace, g), nil }) //nolint:errcheck // the entry carries its error
		s.mu.Lock()
		delete(s.inflight, key)
		s.mu.Unlock()
	}()
}

// refreshChan joins the namespace's refresh in flight, or starts one, and
// returns the channel its entry comes on.
func (s *Source) refreshChan(namespace string, g *generation) <-chan singleflight.Result {
	return s.group.DoChan(refreshKey(namespace, g), func() (any, error) {
		s.refreshing.Add(1)
		defer s.refreshing.Done()
		return s.refresh(namespace, g), nil
	})
}

func refreshKey(namespace string, g *generation) string {
	return strconv.FormatUint(g.id, 10) + "/" + namespace
}

// refresh fetches the namespace's answer and makes it the one served: a good
// answer replaces the previous one; a failed one is kept beside it (the
// previous answer is still served while it is young enough). The hooks then
// hear about the namespace.
func (s *Source) refresh(namespace string, g *generation) *entry {
	e := s.fetch(namespace, g)
	s.mu.Lock()
	sp := s.spaces[namespace]
	if sp == nil {
		sp = &space{lastAsked: e.at}
		s.spaces[namespace] = sp
	}
	if e.err == nil {
		if sp.good != nil {
			s.release(sp.good)
		}
		sp.good, sp.failed = e, nil
	} else {
		sp.failed = e
	}
	s.mu.Unlock()
	if e.err == nil {
		s.hookMu.Lock()
		hooks := s.hooks
		s.hookMu.Unlock()
		for _, fn := range hooks {
			fn(namespace)
		}
	}
	return e
}

// Run refreshes, once per cache period, the answer of every namespace a
// request asked about within the idle timeout, in the background, and lets go
// of the others, until ctx ends. Without it the source still serves: a
// request that finds its answer older than the cache period starts the
// refresh.
func (s *Source) Run(ctx context.Context) {
	var tick <-chan time.Time
	if c, ok := s.clock.(clock.WithTicker); ok {
		t := c.NewTicker(s.opts.CachePeriod)
		defer t.Stop()
		tick = t.C()
	} else {
		t := time.NewTicker(s.opts.CachePeriod)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			s.refreshAll(s.clock.Now())
		}
	}
}

// refreshAll starts a refresh of each namespace asked about within the idle
// timeout whose answer is older than half the cache period (ticks and
// refreshes do not align to the nanosecond), and lets go of the others.
func (s *Source) refreshAll(now time.Time) {
	g := s.gen.Load()
	var due []string
	s.mu.Lock()
	for ns, sp := range s.spaces {
		if now.Sub(sp.lastAsked) > s.opts.IdleTimeout {
			if sp.good != nil {
				s.release(sp.good)
			}
			delete(s.spaces, ns)
			continue
		}
		if sp.good == nil || sp.good.gen != g || now.Sub(sp.good.at) >= s.opts.CachePeriod/2 {
			due = append(due, ns)
		}
	}
	s.mu.Unlock()
	for _, ns := range due {
		s.refreshAsync(ns, g)
	}
}

func (s *Source) observeAge(now time.Time, h *history.History) {
	if r := h.Latest(); r != nil {
		s.metrics.DataAge.Observe(max(0, now.Sub(r.At()).Seconds()))
	}
}

// remember keeps h as the pod's last history; a request stores it once per
// answer (the next ones find it there).
func (s *Source) remember(uid types.UID, h *history.History) {
	if old, ok := s.memory.Load(uid); ok && old.(*history.History) == h {
		return
	}
	s.memory.Store(uid, h)
}

func (s *Source) recall(uid types.UID) *history.History {
	if h, ok := s.memory.Load(uid); ok {
		return h.(*history.History)
	}
	return nil
}

// forget drops remembered histories older than retain (the longest hold of
// the catalog plus the max age): nothing would count them any more.
func (s *Source) forget(now time.Time, retain time.Duration) {
	s.memory.Range(func(uid, h any) bool {
		if r := h.(*history.History).Latest(); r == nil || now.Sub(r.At()) > retain {
			s.memory.Delete(uid)
		}
		return true
	})
}

// get returns a pod's history: built with the answer, or errNoSeries for a
// pod without series in it.
func (e *entry) get(pod types.NamespacedName) builtPod {
	if b, ok := e.built[pod]; ok {
		return b
	}
	return builtPod{err: errNoSeries}
}

// fetch runs the namespace's queries concurrently, within the timeout and
// whatever the requests waiting on it do (they share the answer), and builds
// every pod's history from the answer. The series are let go (and their
// charge released) once built.
func (s *Source) fetch(namespace string, g *generation) *entry {
	start := s.clock.Now()
	e := &entry{gen: g, at: start}
	bo := g.build
	bo.now = start
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	qs := g.plan.queries(namespace)
	type result struct {
		ss      []series
		skipped int
		err     error
	}
	results := make([]result, len(qs))
	// One query per family; at most maxQueriesInFlight at a time, within the
	// timeout (a query still waiting for its turn then fails as timed out).
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxQueriesInFlight)
	for i, q := range qs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results[i].err = ctx.Err()
				s.metrics.QueryErrors.WithLabelValues(string(reasonOf(ctx.Err()))).Inc()
				return
			}
			defer func() { <-sem }()
			results[i].ss, results[i].skipped, results[i].err = s.query(ctx, q, start, namespace, g, e)
		}()
	}
	wg.Wait()
	defer s.release(e)
	pods := map[types.NamespacedName]*podData{}
	for i, q := range qs {
		if err := results[i].err; err != nil {
			e.err = fmt.Errorf("querying Prometheus at %s (%s query for namespace %q): %s", Redact(s.opts.URL), q.kind, namespace, excerpt.String(err.Error(), 400))
			return e
		}
		if n := results[i].skipped; n > 0 {
			klog.V(4).InfoS("Prometheus series of another namespace, without a pod label, of a family not read or past a pod's series bound ignored",
				"namespace", namespace, "query", q.kind, "series", n, "namespaceLabel", g.plan.labels.Namespace, "podLabel", g.plan.labels.Pod)
		}
		byPod(pods, results[i].ss, g.plan.labels, namespace, q.family, q.window)
	}
	e.built = make(map[types.NamespacedName]builtPod, len(pods))
	for pod, d := range pods {
		h, err := build(d, bo)
		if r := h.Latest(); r != nil {
			if s.opts.Count != nil {
				s.opts.Count(r)
			}
			if len(r.Warnings) > 0 {
				klog.V(2).InfoS("Prometheus series of a pod unusable as read", "pod", pod, "warnings", r.Warnings)
			}
		}
		e.built[pod] = builtPod{h: h, err: err}
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
		// A series is its query's family (byPod), else its __name__'s.
		if lset.Get(l.Namespace) != namespace || pod == "" || (q.family == "" && !g.build.names[lset.Get(model.MetricNameLabel)]) || perPod[pod] > maxSeries {
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
