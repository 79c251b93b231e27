package provider

import (
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

// Watched is a Readings that holds every pod's history in memory and says
// when one changes. With it the provider keeps each pool it serves as a
// policy.Aggregate, updated as readings arrive (and as pods join or leave the
// pool, and as time turns readings stale), so that an External request reads
// the pool's value instead of folding every pod: its cost does not grow with
// the pool (BenchmarkGetExternalMetricPoolSize). Implementations are safe for
// concurrent use.
type Watched interface {
	Readings
	// Serve is called once per External request before its pool's aggregate
	// is read: nil when the source can answer for the namespace. Its error
	// fails the request with a 503, as Histories' does; it may wait (within
	// ctx) for the namespace's first data.
	Serve(ctx context.Context, namespace string) error
	// Lookup returns a counted member's history from memory, without I/O, as
	// the function Histories returns would (nil and why when it has none).
	Lookup(m *podselect.Member) (*history.History, string)
	// Watch registers fn, called after the history of the pod uid of
	// namespace changed, or, with uid "", of any pod of namespace.
	Watch(fn func(namespace string, uid types.UID))
}

// aggregates are the pools kept as aggregates, by namespace, selector and
// policy, with an index from pods to the pools they are in.
type aggregates struct {
	mu    sync.Mutex
	pools map[aggKey]*poolAgg
	byUID map[types.UID][]*poolAgg
	sweep time.Time
}

// aggKey identifies a pool: its namespace, the SHA-256 of its selector's
// canonical form (a 100 KB selector costs 32 bytes here; up to maxAggregates
// of them are kept) and its policy's name.
type aggKey struct {
	namespace string
	selector  [sha256.Size]byte
	policy    string
}

func aggKeyOf(namespace string, selector labels.Selector, pol *policy.Policy) aggKey {
	return aggKey{namespace: namespace, selector: sha256.Sum256([]byte(selector.String())), policy: pol.Name}
}

// poolAgg is one pool's aggregate and what its members say beyond their
// histories.
type poolAgg struct {
	key aggKey

	mu  sync.Mutex
	pol *policy.Policy
	// members is the member list the aggregate was built from (podselect
	// caches it per namespace generation: a new list is a membership change).
	members []podselect.Member
	agg     *policy.Aggregate[types.UID]
	// counted are the members in the aggregate, by UID (replaced, never
	// modified: rereadPool reads it without mu held).
	counted map[types.UID]*podselect.Member
	// gen counts the changes of agg's pods (a rebuild, a history set): a
	// new aggregate built meanwhile without mu held is out of date.
	gen uint64
	// roles are the distinct role label values of the counted members (nil
	// for fewer than two); graceEnds, sorted, when each starting member's
	// start-up grace ends.
	roles     []string
	graceEnds []time.Time

	// lastUsed is when a request last read the pool (Unix nanoseconds).
	lastUsed atomic.Int64
	// indexed are the UIDs aggregates.byUID lists this pool under
	// (aggregates.mu held).
	indexed map[types.UID]struct{}
}

// Bounds of the aggregates: pools not asked about for aggIdle are let go
// (checked at most once per aggSweep); past maxAggregates, half are let go,
// the namespaces holding the most first (evictFairLocked).
const (
	aggIdle       = 10 * time.Minute
	aggSweep      = time.Minute
	maxAggregates = 4096
)

func newAggregates() *aggregates {
	return &aggregates{pools: map[aggKey]*poolAgg{}, byUID: map[types.UID][]*poolAgg{}}
}

// watch makes the provider's aggregates follow w's changes.
func (p *Provider) watch(w Watched) {
	w.Watch(func(namespace string, uid types.UID) {
		var pools []*poolAgg
		p.aggs.mu.Lock()
		if uid != "" {
			pools = slices.Clone(p.aggs.byUID[uid])
		} else {
			for k, pa := range p.aggs.pools {
				if k.namespace == namespace {
					pools = append(pools, pa)
				}
			}
		}
		p.aggs.mu.Unlock()
		for _, pa := range pools {
			if uid == "" {
				p.rereadPool(pa, w)
				continue
			}
			pa.mu.Lock()
			if pa.agg != nil {
				pa.agg.Advance(p.clock.Now())
				if m := pa.counted[uid]; m != nil {
					h, why := w.Lookup(m)
					pa.agg.Set(uid, h, why)
					pa.gen++
				}
			}
			pa.mu.Unlock()
		}
	})
}

// rereadPool sets every counted pod's history anew in pa's aggregate, after
// a change of any pod of its namespace (a Prometheus refresh). It builds a
// new aggregate without pa.mu held, so that requests for the pool are
// answered from the previous one meanwhile rather than wait while the pool's
// pods are read again (BenchmarkPrometheusRequestDuringRefresh). The new one
// replaces it unless the pool changed meanwhile (rebuilt, or a pod's history
// set): then the pods are set in place, pa.mu held. Both give the same pool
// (an Aggregate is its pods' fold, whatever the order they were set in:
// FuzzAggregate).
func (p *Provider) rereadPool(pa *poolAgg, w Watched) {
	pa.mu.Lock()
	if pa.agg == nil {
		pa.mu.Unlock()
		return
	}
	pol, counted, gen := pa.pol, pa.counted, pa.gen
	pa.mu.Unlock()
	agg := policy.NewAggregate[types.UID](pol, p.clock.Now(), p.opts.MaxAge)
	for id, m := range counted {
		h, why := w.Lookup(m)
		agg.Set(id, h, why)
	}
	pa.mu.Lock()
	defer pa.mu.Unlock()
	if pa.gen == gen {
		pa.agg = agg
		pa.gen++
		return
	}
	if pa.agg == nil {
		return
	}
	pa.agg.Advance(p.clock.Now())
	for id, m := range pa.counted {
		h, why := w.Lookup(m)
		pa.agg.Set(id, h, why)
	}
	pa.gen++
}

// fromAggregate answers a pool-only request without a gateway input from
// the pool's aggregate; ok false means the caller folds instead: the pool has
// a pod without any history (it may need a scrape on the spot, and its
// message), a latency term's histograms cannot be pooled exactly, the answer
// is an error (its message names the pods and why), or the log wants the
// unknown pods named (-v=2). The error is Serve's.
func (p *Provider) fromAggregate(ctx context.Context, w Watched, catalog *policy.Catalog, pol *policy.Policy, where, namespace string, selector labels.Selector,
	members []podselect.Member) (a answer, ok bool, err error) {
	if err := w.Serve(ctx, namespace); err != nil {
		return answer{}, false, unavailable(fmt.Sprintf("%s: %v", where, err))
	}
	pa := p.aggs.pool(aggKeyOf(namespace, selector, pol), p.clock.Now())
	pa.mu.Lock()
	now := p.clock.Now()
	pa.lastUsed.Store(now.UnixNano())
	if pa.agg == nil || pa.pol != pol || !sameList(pa.members, members) {
		p.rebuild(pa, w, catalog, pol, members, now)
	}
	pa.agg.Advance(now)
	if pa.agg.NilHistories() > 0 {
		pa.mu.Unlock()
		return answer{}, false, nil
	}
	pool, exact := pa.agg.Pool(pa.starting(pa.agg.Now()))
	roles := pa.roles
	pa.mu.Unlock()
	if !exact {
		return answer{}, false, nil
	}
	a = answer{matched: len(members), pool: pool, roles: roles, signal: pol.Kind == policy.KindSignal}
	if a.poolError(where) != nil || (pool.Pods > pool.Known && klog.V(2).Enabled()) {
		return answer{}, false, nil
	}
	return a, true, nil
}

// sameList reports whether two member lists are the same list (not only
// equal): podselect returns the cached one until a pod of the namespace
// changes.
func sameList(a, b []podselect.Member) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// pool returns the pool's entry, creating it, and lets go of the idle ones.
func (ag *aggregates) pool(k aggKey, now time.Time) *poolAgg {
	ag.mu.Lock()
	defer ag.mu.Unlock()
	if now.Sub(ag.sweep) > aggSweep || len(ag.pools) >= maxAggregates {
		ag.sweep = now
		var byUse []*poolAgg
		for _, pa := range ag.pools {
			if now.Sub(time.Unix(0, pa.lastUsed.Load())) > aggIdle {
				ag.dropLocked(pa)
			} else {
				byUse = append(byUse, pa)
			}
		}
		if len(byUse) >= maxAggregates {
			ag.evictFairLocked(byUse, maxAggregates/2)
		}
	}
	pa := ag.pools[k]
	if pa == nil {
		pa = &poolAgg{key: k}
		pa.lastUsed.Store(now.UnixNano())
		ag.pools[k] = pa
	}
	return pa
}

// evictFairLocked lets pools go until keep remain: every namespace keeps up
// to an equal share of keep (what a namespace holding less leaves is shared
// by the others) and lets its least recently used go past it. So one
// namespace's flood of selectors costs the pools of no namespace holding
// fewer than it (TestAggregatesEvictTheNamespaceHoldingMost).
func (ag *aggregates) evictFairLocked(pools []*poolAgg, keep int) {
	byNS := map[string][]*poolAgg{}
	for _, pa := range pools {
		byNS[pa.key.namespace] = append(byNS[pa.key.namespace], pa)
	}
	share := fairShare(byNS, keep)
	for _, list := range byNS {
		if len(list) <= share {
			continue
		}
		slices.SortFunc(list, func(x, y *poolAgg) int { return cmp.Compare(x.lastUsed.Load(), y.lastUsed.Load()) })
		for _, pa := range list[:len(list)-share] {
			ag.dropLocked(pa)
		}
	}
}

// fairShare returns the most entries a namespace may keep so that all keep
// at most keep in all: the largest c with Σ min(len(list), c) ≤ keep
// (water-filling: namespaces holding fewer than c keep all theirs).
func fairShare[T any](byNS map[string][]T, keep int) int {
	sizes := make([]int, 0, len(byNS))
	total := 0
	for _, list := range byNS {
		sizes = append(sizes, len(list))
		total += len(list)
	}
	if total <= keep {
		return total
	}
	slices.Sort(sizes)
	left := keep
	for i, n := range sizes {
		if c := left / (len(sizes) - i); n > c {
			return c
		}
		left -= n
	}
	return left // not reached: total > keep
}

// dropLocked forgets a pool and its index entries; a request still reading
// it finishes with it.
func (ag *aggregates) dropLocked(pa *poolAgg) {
	delete(ag.pools, pa.key)
	for uid := range pa.indexed {
		ag.unindexLocked(uid, pa)
	}
	pa.indexed = nil
}

func (ag *aggregates) unindexLocked(uid types.UID, pa *poolAgg) {
	list := ag.byUID[uid]
	if i := slices.Index(list, pa); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(ag.byUID, uid)
	} else {
		ag.byUID[uid] = list
	}
}

// rebuild makes pa the aggregate of members under pol (pa.mu held): the
// pods counted as the fold counts them (Running, Ready, of the policy's
// role), each with its history. The pods are indexed first, so that no
// reading stored meanwhile is missed.
func (p *Provider) rebuild(pa *poolAgg, w Watched, catalog *policy.Catalog, pol *policy.Policy, members []podselect.Member, now time.Time) {
	roleKey := catalog.RoleLabel()
	counted := make(map[types.UID]*podselect.Member, len(members))
	var roles []string
	var graceEnds []time.Time
	for i := range members {
		m := &members[i]
		if pol.Role != "" && m.Labels[roleKey] != pol.Role {
			continue
		}
		if m.Starting && p.opts.StartupGrace > 0 {
			graceEnds = append(graceEnds, m.Created.Add(p.opts.StartupGrace))
		}
		if !m.Counted {
			continue
		}
		if role := m.Labels[roleKey]; role != "" && !slices.Contains(roles, role) {
			roles = append(roles, role)
		}
		counted[m.UID] = m
	}
	sort.Slice(graceEnds, func(i, j int) bool { return graceEnds[i].Before(graceEnds[j]) })
	if len(roles) < 2 {
		roles = nil
	}
	p.aggs.mu.Lock()
	if p.aggs.pools[pa.key] == pa { // not dropped meanwhile
		for uid := range pa.indexed {
			if _, still := counted[uid]; !still {
				p.aggs.unindexLocked(uid, pa)
				delete(pa.indexed, uid)
			}
		}
		if pa.indexed == nil {
			pa.indexed = map[types.UID]struct{}{}
		}
		for uid := range counted {
			if _, was := pa.indexed[uid]; !was {
				p.aggs.byUID[uid] = append(p.aggs.byUID[uid], pa)
				pa.indexed[uid] = struct{}{}
			}
		}
	}
	p.aggs.mu.Unlock()
	agg := policy.NewAggregate[types.UID](pol, now, p.opts.MaxAge)
	for uid, m := range counted {
		h, why := w.Lookup(m)
		agg.Set(uid, h, why)
	}
	pa.pol, pa.members, pa.agg, pa.counted, pa.roles, pa.graceEnds = pol, members, agg, counted, roles, graceEnds
	pa.gen++
}

// starting counts the members still within their start-up grace at now, as
// the fold does (younger than --startup-grace).
func (pa *poolAgg) starting(now time.Time) int {
	i := sort.Search(len(pa.graceEnds), func(i int) bool { return pa.graceEnds[i].After(now) })
	return len(pa.graceEnds) - i
}
