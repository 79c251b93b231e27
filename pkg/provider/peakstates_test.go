package provider

import (
	"context"
	"crypto/sha256"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

// count returns the states kept in namespace, by class.
func (ps *peakStates) count(namespace string) (byHPA, byRequest int) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ns := ps.byNS[namespace]
	if ns == nil {
		return 0, 0
	}
	return ns.lru[peakByHPA].Len(), ns.lru[peakByRequest].Len()
}

// total returns the states kept in every namespace.
func (ps *peakStates) total() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	n := 0
	for _, ns := range ps.byNS {
		n += len(ns.states)
	}
	return n
}

func peakPolicy(t testing.TB, name string, window time.Duration) *policy.Policy {
	t.Helper()
	c, err := policy.NewCatalog(policy.Policy{Name: name, Kind: policy.KindMean, UnknownSaturation: 1,
		Terms: []policy.Term{{Kind: policy.TermQueueDepth, SetPoint: 3}}, Peak: &policy.PeakHold{Window: window, Headroom: 0.2}})
	if err != nil {
		t.Fatal(err)
	}
	return c.Lookup(name)
}

func mustParse(t testing.TB, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A 100 KB selector's peak-hold state and aggregate are keyed by 32 bytes
// and the policy's name (and namespace): the selector's text is not kept.
func TestPoolKeysAreSmall(t *testing.T) {
	pol := peakPolicy(t, "held", 10*time.Minute)
	long := mustParse(t, "app=vllm"+strings.Repeat(",x notin (y)", 100<<10/12))
	if n := len(long.String()); n < 100<<10-16 {
		t.Fatalf("the selector is %d bytes, want about 100 KB", n)
	}
	k := peakKeyOf(long, pol)
	if size := int(unsafe.Sizeof(k)) + len(k.policy); size > 64 {
		t.Errorf("a 100 KB selector's key takes %d bytes, want at most 64", size)
	}
	if k.policy != "held" || k == peakKeyOf(mustParse(t, "app=vllm"), pol) {
		t.Errorf("key %+v: want the policy's name and a hash of the selector", k)
	}
	// Two spellings of one selector are one pool.
	if peakKeyOf(mustParse(t, "b=2,a=1"), pol) != peakKeyOf(mustParse(t, "a=1, b=2"), pol) {
		t.Error("two spellings of one selector have different keys")
	}
	// So is an aggregate's (up to maxAggregates are kept).
	ak := aggKeyOf("llm", long, pol)
	if size := int(unsafe.Sizeof(ak)) + len(ak.namespace) + len(ak.policy); size > 96 {
		t.Errorf("a 100 KB selector's aggregate key takes %d bytes, want at most 96", size)
	}
	if aggKeyOf("llm", mustParse(t, "b=2,a=1"), pol) != aggKeyOf("llm", mustParse(t, "a=1, b=2"), pol) ||
		aggKeyOf("llm", long, pol) == aggKeyOf("other", long, pol) {
		t.Error("aggregate keys: want one per namespace and canonical selector")
	}
}

// A flood of distinct selectors in one namespace (issue: one state per
// selector, kept an hour, 5,501 for 5,000 selectors and +102 MiB for 500 of
// 100 KB) keeps at most maxPeakStatesPerNamespace states of requests there,
// each counted as evicted past it; the namespace's HPA-asked state and every
// other namespace's states are the same objects after it.
func TestPeakStatesFloodIsBoundedPerNamespace(t *testing.T) {
	pol := peakPolicy(t, "held", 10*time.Minute)
	evicted := map[string]int{}
	ps := newPeakStates(func(class string) { evicted[class]++ })
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	hpaState := ps.get(pol, "a", mustParse(t, "app=vllm"), true, now)
	otherHPA := ps.get(pol, "b", mustParse(t, "app=vllm"), true, now)
	otherReq := ps.get(pol, "b", mustParse(t, "app=vllm,tier=x"), false, now)

	long := mustParse(t, "app=vllm"+strings.Repeat(",x notin (y)", 100<<10/12)) // parsed once: parsing is most of the cost
	before := heapAlloc()
	const short, longs = 5000, 500
	for i := range short {
		ps.get(pol, "a", mustParse(t, fmt.Sprintf("app=vllm,run notin (r%d)", i)), false, now)
	}
	for i := range longs {
		r, err := labels.NewRequirement("run", selection.NotIn, []string{fmt.Sprintf("q%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ps.get(pol, "a", long.Add(*r), false, now)
		now = now.Add(time.Second) // sweeps run: nothing is idle long enough to go
	}
	grown := int64(heapAlloc()) - int64(before)
	t.Logf("after %d short and %d 100 KB selectors: %d states, heap %+d KiB", short, longs, ps.total(), grown>>10)

	if h, r := ps.count("a"); h != 1 || r != maxPeakStatesPerNamespace {
		t.Errorf("namespace a keeps %d HPA and %d request states, want 1 and %d", h, r, maxPeakStatesPerNamespace)
	}
	if want := short + longs - maxPeakStatesPerNamespace; evicted["request"] != want || evicted["hpa"] != 0 {
		t.Errorf("evicted %v, want %d request states and no HPA state", evicted, want)
	}
	// 256 states of a few hundred bytes: 1 MiB is a sanity bound (the
	// unbounded map grew by 102 MiB for the 100 KB selectors alone).
	if grown > 1<<20 {
		t.Errorf("heap grew by %d KiB", grown>>10)
	}
	if ps.get(pol, "a", mustParse(t, "app=vllm"), true, now) != hpaState {
		t.Error("the flood of requests evicted the state an HPA reads in its own namespace")
	}
	if ps.get(pol, "b", mustParse(t, "app=vllm"), true, now) != otherHPA ||
		ps.get(pol, "b", mustParse(t, "app=vllm,tier=x"), false, now) != otherReq {
		t.Error("a flood in namespace a evicted namespace b's states")
	}
}

// An HPA's own states are bounded too (a namespace may have many HPAs), apart
// from the requests': the oldest goes first, and a state moves between the
// classes as HPAs come and go.
func TestPeakStatesClasses(t *testing.T) {
	pol := peakPolicy(t, "held", 10*time.Minute)
	evicted := map[string]int{}
	ps := newPeakStates(func(class string) { evicted[class]++ })
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	sel := func(i int) labels.Selector { return mustParse(t, fmt.Sprintf("app=a%d", i)) }
	first := ps.get(pol, "a", sel(0), true, now)
	for i := 1; i <= maxPeakStatesPerNamespace; i++ {
		ps.get(pol, "a", sel(i), true, now)
	}
	if h, r := ps.count("a"); h != maxPeakStatesPerNamespace || r != 0 || evicted["hpa"] != 1 {
		t.Errorf("%d HPA states, %d request states, evicted %v; want %d, 0 and one HPA state", h, r, evicted, maxPeakStatesPerNamespace)
	}
	if ps.get(pol, "a", sel(0), false, now) == first {
		t.Error("the least recently used HPA state was kept")
	}
	// The HPA of sel(1) was deleted: a person's request moves its state to the
	// requests' class, with its peak.
	st := ps.get(pol, "a", sel(1), true, now)
	if ps.get(pol, "a", sel(1), false, now) != st {
		t.Error("a state changing class lost its peak")
	}
	if h, r := ps.count("a"); h != maxPeakStatesPerNamespace-1 || r != 2 {
		t.Errorf("%d HPA states, %d request states; want %d and 2", h, r, maxPeakStatesPerNamespace-1)
	}
}

// States idle for longer than twice their own policy's window and an hour are
// dropped by the sweep (at most once a minute); the rest stay.
func TestPeakStatesExpire(t *testing.T) {
	short, long := peakPolicy(t, "short", 10*time.Minute), peakPolicy(t, "long", 2*time.Hour)
	ps := newPeakStates(func(string) {})
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	sel := mustParse(t, "app=vllm")
	s := ps.get(short, "a", sel, true, now)
	l := ps.get(long, "a", sel, true, now)
	ps.get(short, "gone", sel, false, now)

	now = now.Add(30 * time.Second)
	ps.get(short, "b", sel, false, now) // no sweep yet: 30 s after the last
	now = now.Add(time.Hour)            // short and gone idle 1h00m30s, b 1h
	ps.get(short, "b", sel, false, now) // sweeps
	if ps.total() != 2 {
		t.Errorf("%d states after the sweep, want 2 (long's, within its 4 h, and b's)", ps.total())
	}
	if ps.get(long, "a", sel, true, now) != l || ps.get(short, "a", sel, true, now) == s {
		t.Error("want the 2 h window's state kept and the 10 min window's state dropped after an hour unused")
	}
	if _, ok := ps.byNS["gone"]; ok {
		t.Error("a namespace without states is kept")
	}
}

// Through the whole request path: a peak-hold policy, an HPA in namespace llm
// and pools asked about by requests only; a flood of 1,000 distinct selectors
// from namespace other leaves llm's held values as they were, and a flood in
// llm itself starts only its request-only pool's hold afresh, never the
// HPA's.
func TestPeakHoldSelectorFloodIsolated(t *testing.T) {
	body := func(q int) string { return fmt.Sprintf("vllm:num_requests_waiting %d\n", q) }
	e := newEngine(t, body(9))
	catalog, err := policy.NewCatalog(policy.Policy{Name: "held", Kind: policy.KindMean, UnknownSaturation: 1,
		Terms: []policy.Term{{Kind: policy.TermQueueDepth, SetPoint: 3}}, Peak: &policy.PeakHold{Window: 10 * time.Minute, Headroom: 0.2}})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureCatalog(t, catalog,
		podSpec{name: "vllm-0", labels: map[string]string{"app": "vllm"}, engine: e},
		podSpec{ns: "other", name: "x-0", labels: map[string]string{"app": "x"}, engine: e},
		hpaSpec{name: "vllm", metric: "held", selector: map[string]string{"app": "vllm"}})
	ctx := context.Background()
	scrape := func(q int) {
		e.set(200, body(q))
		f.clock.Step(time.Second)
		for _, pod := range [][2]string{{"llm", "vllm-0"}, {"other", "x-0"}} {
			m, found, err := f.pools.Member(pod[0], pod[1])
			if err != nil || !found {
				t.Fatalf("pod %s/%s: %v %v", pod[0], pod[1], found, err)
			}
			f.scraper.ScrapeOne(ctx, m.Target)
		}
	}
	flood := func(namespace, base string, n int) {
		info := cmprovider.ExternalMetricInfo{Metric: "held"}
		for i := range n {
			if _, err := f.prov.GetExternalMetric(ctx, namespace, mustParse(t, fmt.Sprintf("%s,run notin (r%d)", base, i)), info); err != nil {
				t.Fatal(err)
			}
		}
	}
	const hpaPool, askedPool = "app=vllm", "app=vllm,tier notin (none)"
	scrape(9) // a burst: 9 waiting at 3 per replica, 3 replicas held × 1.2
	for _, sel := range []string{hpaPool, askedPool} {
		if got := f.value(t, "llm", "held", sel); got != "3600m" {
			t.Fatalf("%s during the burst: %s, want 3600m", sel, got)
		}
	}
	f.value(t, "other", "held", "app=x")
	scrape(0) // the burst ends
	for _, sel := range []string{hpaPool, askedPool} {
		if got := f.value(t, "llm", "held", sel); got != "3600m" {
			t.Fatalf("%s after the burst: %s, want the held 3600m", sel, got)
		}
	}

	flood("other", "app=x", 1000)
	evicted := func(class string) float64 {
		return testutil.ToFloat64(f.metrics.PeakStatesEvicted.WithLabelValues(class))
	}
	if h, r := f.prov.peaks.count("other"); h != 0 || r != maxPeakStatesPerNamespace {
		t.Errorf("namespace other keeps %d HPA and %d request states, want 0 and %d", h, r, maxPeakStatesPerNamespace)
	}
	if got, want := evicted("request"), float64(1001-maxPeakStatesPerNamespace); got != want {
		t.Errorf("evicted request states: %g, want %g", got, want)
	}
	for _, sel := range []string{hpaPool, askedPool} {
		if got := f.value(t, "llm", "held", sel); got != "3600m" {
			t.Errorf("%s after a flood in another namespace: %s, want the held 3600m", sel, got)
		}
	}

	flood("llm", "app=vllm", 1000)
	if h, r := f.prov.peaks.count("llm"); h != 1 || r != maxPeakStatesPerNamespace {
		t.Errorf("namespace llm keeps %d HPA and %d request states, want 1 and %d", h, r, maxPeakStatesPerNamespace)
	}
	if got := f.value(t, "llm", "held", hpaPool); got != "3600m" {
		t.Errorf("the HPA's pool after a flood of requests in its namespace: %s, want the held 3600m", got)
	}
	if got := f.value(t, "llm", "held", askedPool); got != "0" {
		t.Errorf("a request-only pool evicted by its own namespace's flood: %s, want 0 (its hold started afresh)", got)
	}
	if evicted("hpa") != 0 {
		t.Errorf("evicted HPA states: %g, want 0", evicted("hpa"))
	}
}

// Requests for a peak-hold pool of no pod and no HPA (a made-up namespace
// behind a scheduled minimum) keep no state.
func TestPeakStateNeedsPodsOrHPA(t *testing.T) {
	catalog, err := policy.NewCatalog(policy.Policy{Name: "held", Kind: policy.KindMean, UnknownSaturation: 1,
		Terms: []policy.Term{{Kind: policy.TermQueueDepth, SetPoint: 3}}, Peak: &policy.PeakHold{Window: 10 * time.Minute, Headroom: 0.2},
		Minimums: []policy.ScheduledMinimum{{Schedule: "0 0 * * *", Duration: 24 * time.Hour, Demand: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureCatalog(t, catalog)
	for i := range 10 {
		if got := f.value(t, fmt.Sprintf("made-up-%d", i), "held", "app=vllm"); got != "2" {
			t.Fatalf("%s, want the scheduled minimum 2", got)
		}
	}
	if n := f.prov.peaks.total(); n != 0 {
		t.Errorf("%d peak states kept for pools without pods or HPAs", n)
	}
}

// A namespace's flood of selectors past maxAggregates once evicted the least
// recently used pools of every namespace: another tenant's HPA pools, asked
// about every 15 s but less recently than the flood's, were rebuilt. Now the
// namespaces holding the most lose theirs first: a namespace holding fewer
// than its share keeps the same objects.
func TestAggregatesEvictTheNamespaceHoldingMost(t *testing.T) {
	ag := newAggregates()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	key := func(ns string, i int) aggKey {
		return aggKey{namespace: ns, selector: sha256.Sum256([]byte(fmt.Sprintf("app=x,run notin (r%d)", i))), policy: "llm_saturation"}
	}
	var quiet, middle []*poolAgg
	for i := range 10 {
		quiet = append(quiet, ag.pool(key("quiet", i), now))
	}
	for i := range 900 {
		middle = append(middle, ag.pool(key("middle", i), now.Add(time.Second)))
	}
	for i := range 3*maxAggregates + 7 {
		ag.pool(key("noisy", i), now.Add(2*time.Second+time.Duration(i)*time.Millisecond))
	}
	if n := len(ag.pools); n > maxAggregates {
		t.Errorf("%d aggregates kept, want at most %d", n, maxAggregates)
	}
	for i, pa := range quiet {
		if ag.pools[key("quiet", i)] != pa {
			t.Fatalf("quiet pool %d was evicted by another namespace's flood", i)
		}
	}
	for i, pa := range middle {
		if ag.pools[key("middle", i)] != pa {
			t.Fatalf("middle pool %d (900 pools, fewer than its share) was evicted", i)
		}
	}
	// The index follows: a dropped pool is in no UID's list.
	for _, list := range ag.byUID {
		for _, pa := range list {
			if ag.pools[pa.key] != pa {
				t.Fatal("byUID lists a dropped pool")
			}
		}
	}
}

func TestFairShare(t *testing.T) {
	lists := func(sizes ...int) map[string][]int {
		m := map[string][]int{}
		for i, n := range sizes {
			m[fmt.Sprint(i)] = make([]int, n)
		}
		return m
	}
	for _, tt := range []struct {
		sizes      []int
		keep, want int
	}{
		{[]int{10, 900, 5000}, 2048, 1138}, // 10 + 900 + 1138
		{[]int{3000, 3000}, 2048, 1024},
		{[]int{1, 2, 3}, 10, 6},    // all fit
		{[]int{5, 5, 5}, 2, 0},     // less than one each
		{[]int{1, 100}, 50, 49},    // 1 + 49
		{[]int{4, 4, 100}, 12, 4},  // 4 + 4 + 4
		{[]int{4, 4, 100}, 13, 5},  // 4 + 4 + 5
		{[]int{10, 10, 10}, 29, 9}, // 27 ≤ 29
	} {
		if got := fairShare(lists(tt.sizes...), tt.keep); got != tt.want {
			t.Errorf("fairShare(%v, %d) = %d, want %d", tt.sizes, tt.keep, got, tt.want)
		}
	}
}

// A state belongs to one definition of its policy: states were keyed by the
// policy's name, so a reload that halved the set point (every demand doubles)
// served the old held peak in the new units, and the trend fitted the step
// from old to new units as a rise. A reload that leaves the policy as it was
// keeps its state.
func TestPeakStateNotSharedAcrossPolicyEdits(t *testing.T) {
	mk := func(setPoint float64, window time.Duration) *policy.Policy {
		c, err := policy.NewCatalog(policy.Policy{Name: "chat", Kind: policy.KindDemand, UnknownSaturation: 1,
			Terms: []policy.Term{{Kind: policy.TermQueueDepth, SetPoint: setPoint}}, Peak: &policy.PeakHold{Window: window, Headroom: 0.2}})
		if err != nil {
			t.Fatal(err)
		}
		return c.Lookup("chat")
	}
	ps := newPeakStates(func(string) {})
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	sel := mustParse(t, "app=vllm")
	before := ps.get(mk(3, 2*time.Hour), "llm", sel, true, now)
	if ps.get(mk(6, 2*time.Hour), "llm", sel, true, now.Add(time.Second)) == before {
		t.Error("the state recorded under the policy before its set point changed is the one used after it")
	}
	if ps.get(mk(3, time.Minute), "llm", sel, true, now.Add(2*time.Second)) == before {
		t.Error("the state recorded under the policy before its peak window changed is the one used after it")
	}
	if ps.get(mk(3, 2*time.Hour), "llm", sel, true, now.Add(3*time.Second)) != before {
		t.Error("the policy reloaded as it was: its state started afresh")
	}
}

// A role policy's pods are those whose role label (the configuration file's
// roleLabel) has its role: editing roleLabel changes its pods as much as
// editing its role, and starts its state afresh too.
func TestPeakStateNotSharedAcrossRoleLabelEdits(t *testing.T) {
	c, err := policy.NewCatalog(policy.Policy{Name: "decode", Kind: policy.KindDemand, UnknownSaturation: 1, Role: "decode",
		Terms: []policy.Term{{Kind: policy.TermQueueDepth, SetPoint: 3}}, Peak: &policy.PeakHold{Window: time.Hour, Headroom: 0.2}})
	if err != nil {
		t.Fatal(err)
	}
	ps := newPeakStates(func(string) {})
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	sel := mustParse(t, "app=vllm")
	before := ps.get(c.WithRoleLabel("llm-d.ai/role").Lookup("decode"), "llm", sel, true, now)
	if ps.get(c.WithRoleLabel("example.com/tier").Lookup("decode"), "llm", sel, true, now.Add(time.Second)) == before {
		t.Error("the state held while the role label was llm-d.ai/role is the one used after roleLabel changed to example.com/tier")
	}
	if ps.get(c.WithRoleLabel("llm-d.ai/role").Lookup("decode"), "llm", sel, true, now.Add(2*time.Second)) != before {
		t.Error("the same role label again: the state started afresh")
	}
}
