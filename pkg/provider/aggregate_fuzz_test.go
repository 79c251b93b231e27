package provider

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/metrics/pkg/apis/external_metrics"
	clocktesting "k8s.io/utils/clock/testing"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/saturation-adapter/saturation-adapter/internal/testfixture"
	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// eventStore is a ScrapeStore whose results a test sets, telling the
// watchers (OnStore) as the scraper does.
type eventStore struct {
	mu      sync.Mutex
	results map[types.UID]*scrape.Result
	fns     []func(types.NamespacedName, types.UID)
}

func (s *eventStore) Latest(uid types.UID) (*scrape.Result, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.results[uid]
	return r, ok
}
func (s *eventStore) Scrape(context.Context, []scrape.Target) {}
func (s *eventStore) OnStore(fn func(types.NamespacedName, types.UID)) {
	s.fns = append(s.fns, fn)
}
func (s *eventStore) set(pod types.NamespacedName, uid types.UID, r *scrape.Result) {
	s.mu.Lock()
	s.results[uid] = r
	s.mu.Unlock()
	for _, fn := range s.fns {
		fn(pod, uid)
	}
}

// unwatched is eventStore without OnStore: the provider over it folds every
// request.
type unwatched struct{ s *eventStore }

func (u unwatched) Latest(uid types.UID) (*scrape.Result, bool) { return u.s.Latest(uid) }
func (u unwatched) Scrape(context.Context, []scrape.Target)     {}

// eventPools is a Pools over a fixed set of pods whose membership a test
// changes: each pool's member list stays the same list until a pod of its
// namespace changes, as podselect's cache does.
type eventPools struct {
	pods  []podselect.Member
	lists map[string][]podselect.Member
}

func (e *eventPools) Synced() bool                           { return true }
func (e *eventPools) RecordInterest(string, labels.Selector) {}
func (e *eventPools) RecordInterestWith(string, labels.Selector, podselect.Override) {
}
func (e *eventPools) MembersWith(ns string, sel labels.Selector, _ podselect.Override) ([]podselect.Member, error) {
	return e.Members(ns, sel)
}
func (e *eventPools) Member(string, string) (podselect.Member, bool, error) {
	return podselect.Member{}, false, nil
}
func (e *eventPools) HPAsFor(string, string, labels.Selector) []string { return nil }
func (e *eventPools) Members(ns string, sel labels.Selector) ([]podselect.Member, error) {
	key := ns + "/" + sel.String()
	if l, ok := e.lists[key]; ok {
		return l, nil
	}
	var l []podselect.Member
	for _, m := range e.pods {
		if m.Pod.Namespace == ns && sel.Matches(labels.Set(m.Labels)) {
			l = append(l, m)
		}
	}
	e.lists[key] = l
	return l, nil
}

// changed drops the cached lists of a namespace (a pod of it changed).
func (e *eventPools) changed(ns string) {
	for k := range e.lists {
		if strings.HasPrefix(k, ns+"/") {
			delete(e.lists, k)
		}
	}
}

// FuzzProviderAggregates: through any sequence of events, every External
// answer of a provider that keeps its pools as aggregates (a store that says
// when it stores) is the answer of a provider that folds every request over
// the same store and pods: value, labels, timestamp, or the error's status and
// message. The events: readings (real and faulty bodies, one or two, fresh or
// old, or a failed scrape) of pods in two namespaces whose pools overlap
// (app=a, app=b, tier=x), pods joining and leaving pools and turning not
// Ready or starting (membership changes), and time passing the max age and
// the holds. Every pool of both namespaces is asked after each event, so an
// event in one pool that leaked into another would show.
func FuzzProviderAggregates(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte("aggregates must equal the fold, whatever happens to the pods and the clock"))
	bodies := testfixture.Bodies(f)
	names := make([]string, 0, len(bodies))
	for n := range bodies {
		names = append(names, n)
	}
	slices.Sort(names)
	e := signals.NewExtractorWith(signals.ExtractOptions{Histograms: true})
	var readings []signals.Reading
	for _, n := range names {
		r, err := e.Extract(bodies[n])
		if err != nil {
			// Keep the indexes of names: a body that does not extract is
			// a pod that never got a reading.
			r = signals.Reading{}
		}
		readings = append(readings, r)
	}
	guard := policy.Policy{Name: "chat", Kind: policy.KindMean, UnknownSaturation: 1, HoldLastGood: 20 * time.Second,
		Terms: append(policy.DefaultSetPoints().Terms(), policy.Term{Kind: policy.TermTTFT, SetPoint: 0.5, Quantile: 0.9, Window: time.Minute})}
	catalog, err := policy.NewCatalog(append(policy.BuiltinPolicies(policy.DefaultSetPoints(), 1, 30*time.Second), guard)...)
	if err != nil {
		f.Fatal(err)
	}
	hopts := history.HistoryOptions{Needs: catalog.Needs()}
	selectors := []labels.Selector{labels.SelectorFromSet(labels.Set{"app": "a"}), labels.SelectorFromSet(labels.Set{"app": "b"}),
		labels.SelectorFromSet(labels.Set{"tier": "x"})}
	f.Fuzz(func(t *testing.T, prog []byte) {
		clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
		store := &eventStore{results: map[types.UID]*scrape.Result{}}
		pools := &eventPools{lists: map[string][]podselect.Member{}}
		for i := range 8 {
			ns := []string{"llm", "other"}[i%2]
			app := []string{"a", "b"}[(i/2)%2]
			m := podselect.Member{Pod: types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("p%d", i)}, UID: types.UID(fmt.Sprintf("uid-%d", i)),
				Counted: true, Labels: map[string]string{"app": app, "tier": "x"}}
			pools.pods = append(pools.pods, m)
		}
		m1, _ := NewMetrics(prometheus.NewRegistry())
		m2, _ := NewMetrics(prometheus.NewRegistry())
		opts := Options{MaxAge: 6 * time.Second, StartupGrace: 30 * time.Second}
		agg := New(opts, StaticCatalog{catalog}, pools, Scraped(store, 0), clk, m1)
		fold := New(opts, StaticCatalog{catalog}, pools, Scraped(unwatched{store}, 0), clk, m2)
		if agg.aggs == nil || fold.aggs != nil {
			t.Fatal("the providers do not differ by their aggregates")
		}
		next := func() byte {
			if len(prog) == 0 {
				return 0
			}
			b := prog[0]
			prog = prog[1:]
			return b
		}
		// Every pod starts with a fresh reading of the real vLLM V1 dump.
		base := readings[slices.Index(names, "vllm_v1-0.10-nvcr25.09_single-engine.prom")]
		for _, m := range pools.pods {
			r := base
			r.Time = clk.Now()
			store.set(m.Pod, m.UID, &scrape.Result{History: history.NewHistory(hopts, &r), Time: r.Time})
		}
		defer func() {
			if testing.Verbose() {
				t.Logf("%d answers read from aggregates", agg.fromAggs.Load())
			}
		}()
		for step := 0; len(prog) > 0 && step < 48; step++ {
			op := next()
			i := int(op>>3) % len(pools.pods)
			m := &pools.pods[i]
			switch op % 6 {
			case 0, 1, 2: // a reading (one or two), or a failed scrape
				a, b := next(), next()
				ages := []time.Duration{0, time.Second, 5 * time.Second, 7 * time.Second, 25 * time.Second, 2 * time.Minute}
				r1 := readings[int(a)%len(readings)]
				r1.Time = clk.Now().Add(-ages[int(b)%len(ages)])
				var h *history.History
				switch {
				case r1.Engines == nil:
					// A body that does not extract: no history.
				case b&0x80 == 0:
					h = history.NewHistory(hopts, &r1)
				default:
					r0 := readings[int(a/5+b)%len(readings)]
					r0.Time = r1.Time.Add(-15 * time.Second)
					if r0.Engines == nil {
						r0 = r1
						r0.Time = r1.Time.Add(-15 * time.Second)
					}
					h = history.NewHistory(hopts, &r0, &r1)
				}
				res := &scrape.Result{History: h, Time: r1.Time}
				if op%6 == 2 {
					res.Err = &scrape.Error{Reason: scrape.ReasonTimeout, Detail: "timed out"}
				}
				store.set(m.Pod, m.UID, res)
			case 3: // a membership change: the pod's labels, readiness or start
				switch next() % 4 {
				case 0:
					m.Labels = map[string]string{"app": []string{"a", "b"}[step%2], "tier": "x"}
				case 1:
					m.Counted = !m.Counted
					m.Starting = !m.Counted
					m.Created = clk.Now()
				case 2:
					m.Labels = map[string]string{"app": "b"}
				default:
					m.Counted = true
				}
				pools.changed(m.Pod.Namespace)
			default: // time passes
				steps := []time.Duration{time.Millisecond, time.Second, 3 * time.Second, 6 * time.Second, 11 * time.Second, 31 * time.Second}
				clk.Step(steps[int(next())%len(steps)])
			}
			for _, ns := range []string{"llm", "other"} {
				for _, sel := range selectors {
					for _, metric := range catalog.Names() {
						info := cmprovider.ExternalMetricInfo{Metric: metric}
						want, werr := fold.GetExternalMetric(context.Background(), ns, sel, info)
						got, gerr := agg.GetExternalMetric(context.Background(), ns, sel, info)
						if diff := cmp.Diff(describeAnswer(want, werr), describeAnswer(got, gerr)); diff != "" {
							t.Fatalf("step %d, %s in %s for %s: aggregates differ from the fold (-fold +aggregates):\n%s", step, metric, ns, sel, diff)
						}
					}
				}
			}
		}
	})
}

func describeAnswer(l *external_metrics.ExternalMetricValueList, err error) string {
	if err != nil {
		if s, ok := err.(apierrors.APIStatus); ok {
			return fmt.Sprintf("error %d %s", s.Status().Code, s.Status().Message)
		}
		return "error " + err.Error()
	}
	var b strings.Builder
	for _, it := range l.Items {
		fmt.Fprintf(&b, "%s %v %s %s\n", it.MetricName, it.MetricLabels, it.Timestamp.Format(time.RFC3339Nano), it.Value.String())
	}
	return b.String()
}
