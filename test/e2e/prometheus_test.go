package e2e

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/loadgen"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// promScrape is the real Prometheus's scrape interval in these tests, and
// promCache the adapter's --prometheus-cache-period.
const (
	promScrape = time.Second
	promCache  = time.Second
)

// prometheusStack starts a stack whose adapter reads a real Prometheus
// (--source=prometheus). A missing prometheus binary fails the test, as a
// missing helm or kustomize does; E2E_SKIP_PROMETHEUS=1 skips it instead, for
// a machine without the package.
func prometheusStack(t *testing.T, o stack.Options) *stack.Stack {
	t.Helper()
	bin, err := stack.PrometheusBinary()
	if err != nil {
		if os.Getenv("E2E_SKIP_PROMETHEUS") != "" {
			t.Skipf("E2E_SKIP_PROMETHEUS is set: %v", err)
		}
		t.Fatalf("%v; E2E_SKIP_PROMETHEUS=1 skips the Prometheus-source tests", err)
	}
	p := stack.PrometheusOptions{}
	if o.Prometheus != nil {
		p = *o.Prometheus
	}
	p.Binary, p.ScrapeInterval, p.CachePeriod = bin, promScrape, promCache
	o.Prometheus = &p
	return startStack(t, o)
}

// recorder stands between Prometheus and one engine: it forwards each scrape
// and keeps the body Prometheus got, with the time it asked.
type recorder struct {
	upstream string
	srv      *httptest.Server

	mu     sync.Mutex
	bodies []recorded
}

type recorded struct {
	t    time.Time
	body []byte
}

func newRecorder(t *testing.T, upstream string) *recorder {
	r := &recorder{upstream: upstream}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		at := time.Now()
		body, err := fetch(req.Context(), "http://"+upstream+req.URL.Path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		r.mu.Lock()
		r.bodies = append(r.bodies, recorded{t: at, body: body})
		r.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(body)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// scrapedIn returns the bodies Prometheus scraped within [from, to].
func (r *recorder) scrapedIn(from, to time.Time) []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []recorded
	for _, b := range r.bodies {
		if !b.t.Before(from) && !b.t.After(to) {
			out = append(out, b)
		}
	}
	return out
}

// directValue is what direct mode serves for one pod whose newest scrape is
// b: pkg/signals' extractor, History and PoolBuilder, as the adapter runs them
// in direct mode, rounded to milli units as served.
func directValue(catalog *policy.Catalog, metric string, b recorded) (float64, bool) {
	r, err := signals.NewExtractorWith(signals.ExtractOptions{}).Extract(b.body)
	if err != nil {
		return 0, false
	}
	r.Time = b.t
	pool := catalog.Lookup(metric).NewPool(b.t, time.Minute)
	pool.Add(history.NewHistory(history.HistoryOptions{Needs: catalog.Needs()}, &r), "")
	v := pool.Pool().Value
	if v == nil {
		return 0, false
	}
	return math.Floor(*v*1000+0.5) / 1000, true
}

func fetch(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// TestPrometheusMatchesDirect: a real Prometheus scrapes two emulated vLLM
// engines under load, through recording proxies; every value the adapter
// serves from it, per pod and for every built-in metric, is exactly what direct
// mode computes from a body Prometheus scraped within one scrape interval of
// the sample (the answer's timestamp), and the data served is at most a scrape
// interval plus the cache period old (plus the query's own time).
func TestPrometheusMatchesDirect(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	recorders := map[string]*recorder{} // by pod
	target := func(pod *corev1.Pod, addr string) string {
		mu.Lock()
		defer mu.Unlock()
		r, ok := recorders[pod.Name]
		if !ok {
			r = newRecorder(t, addr)
			recorders[pod.Name] = r
		}
		return r.srv.Listener.Addr().String()
	}
	s := prometheusStack(t, stack.Options{ColdStart: time.Second, EmulatorArgs: testEmulatorArgs,
		Prometheus: &stack.PrometheusOptions{Target: target}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const name = "prom-match"
	dep := stack.EngineDeployment(name, 2, stack.EmulatorImage)
	if _, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
	waitReadyCount(t, s, name, sel, 2)
	// A label per pod, so that each pod is a pool of its own.
	var pods []string
	for _, p := range s.ReadyPods(sel) {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"e2e-pod":%q}}}`, p.Name)
		if _, err := s.Cluster.Client.CoreV1().Pods(s.Namespace).Patch(ctx, p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p.Name)
	}
	catalog, err := policy.BuiltinCatalog(policy.DefaultSetPoints(), policy.DefaultUnknownSaturation)
	if err != nil {
		t.Fatal(err)
	}

	// About 80 % of the two replicas' capacity: queues come and go.
	gw := loadgen.New(stack.EmulatorGateway(s.Endpoints(sel)))
	load := make(chan struct{})
	go func() {
		defer close(load)
		gw.Run(ctx, loadgen.Step(0, 5, 45*time.Second, testPrompt, testOutputTokens))
	}()
	loading := func() bool {
		select {
		case <-load:
			return false
		default:
			return true
		}
	}
	metrics := []string{policy.MetricSaturation, policy.MetricDemandReplicas, policy.MetricQueueDepth, policy.MetricRunning, policy.MetricKVCacheUsage}
	var compared, busy int
	var worstAge time.Duration
	for time.Sleep(5 * time.Second); loading(); time.Sleep(700 * time.Millisecond) {
		for _, pod := range pods {
			mu.Lock()
			rec := recorders[pod]
			mu.Unlock()
			for _, m := range metrics {
				asked := time.Now()
				v, list, err := s.ExternalMetric(ctx, m, labels.SelectorFromSet(labels.Set{"e2e-pod": pod}))
				if err != nil {
					t.Errorf("%s of %s: %v", m, pod, err)
					continue
				}
				// The item's timestamp, its sample's, is in whole seconds: the
				// scrape behind it began within that second.
				at := list.Items[0].Timestamp.Time
				worstAge = max(worstAge, asked.Sub(at))
				var want []float64
				for _, b := range rec.scrapedIn(at.Add(-50*time.Millisecond), at.Add(time.Second+50*time.Millisecond)) {
					if d, ok := directValue(catalog, m, b); ok {
						want = append(want, d)
					}
				}
				if len(want) == 0 {
					t.Errorf("%s of %s = %g from a sample at %s, but Prometheus scraped nothing then", m, pod, v, at.Format("15:04:05"))
					continue
				}
				compared++
				if v > 0 {
					busy++
				}
				if !slices.ContainsFunc(want, func(d float64) bool { return math.Abs(d-v) < 1e-9 }) {
					t.Errorf("%s of %s = %g from Prometheus (sample at %s); direct mode on the bodies Prometheus scraped then: %v",
						m, pod, v, at.Format("15:04:05"), want)
				}
			}
		}
	}
	t.Logf("%d values compared (%d above 0); oldest data served %s (scrape interval %s + cache period %s)", compared, busy, worstAge.Round(time.Millisecond), promScrape, promCache)
	if compared < 100 || busy < compared/4 {
		t.Errorf("%d values compared, %d above 0: the load did not exercise the comparison", compared, busy)
	}
	// The answer's timestamp is cut to the second; the query and the
	// aggregator's hop add to scrape interval + cache period.
	if limit := promScrape + promCache + 2*time.Second; worstAge > limit {
		t.Errorf("data served %s old, want at most %s", worstAge, limit)
	}
}

// TestPrometheusOutageHolds: with Prometheus stopped the adapter answers with
// an error naming it and the HPA holds its replicas although the engines went
// idle meanwhile (scale-down stabilization 0, so holding cannot come from
// waiting); once Prometheus is back, the HPA acts on what it now sees.
func TestPrometheusOutageHolds(t *testing.T) {
	t.Parallel()
	s := prometheusStack(t, stack.Options{ColdStart: time.Second})
	ctx := context.Background()
	const name = "prom-hold"
	dep := stack.EngineDeployment(name, 2, stubImage, "stub-waiting=10") // saturation 2 each
	if _, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
	waitReadyCount(t, s, name, sel, 2)
	hpa := stack.HPA(name, name, "llm_saturation", dep.Spec.Selector.MatchLabels, autoscalingv2.ValueMetricType, "1", 1, 4, 0)
	if _, err := s.Cluster.Client.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		smp := s.Observe(ctx, name, name, sel)
		return smp.Spec == 4 && smp.Ready == 4 && smp.Desired == 4 && smp.HPACondition == "", nil
	}); err != nil {
		t.Fatalf("HPA never settled at 4 replicas on Prometheus's data: %v (%+v)", err, s.Observe(ctx, name, name, sel))
	}

	s.Prometheus.Stop()
	for _, ep := range s.Endpoints(sel)() {
		setStubWaiting(t, ep, 0)
	}
	// The answer fetched last serves for up to the cache period; then the
	// adapter asks Prometheus again, and fails.
	var err error
	if werr := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, _, err = s.ExternalMetric(ctx, "llm_saturation", sel)
		return err != nil, nil
	}); werr != nil || !strings.Contains(err.Error(), "querying Prometheus at "+s.Prometheus.URL) {
		t.Fatalf("with Prometheus stopped the adapter answered %v, want an error naming Prometheus", err)
	}
	t.Logf("adapter with Prometheus stopped: %v", err)
	problem := holdReplicas(t, s, name, sel, 4, 30*time.Second)
	if !strings.Contains(problem, "querying Prometheus") {
		t.Errorf("HPA condition %q does not carry the adapter's message", problem)
	}
	t.Logf("HPA held 4 replicas for 30 s; its condition: %s", problem)

	if err := s.Prometheus.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return s.Observe(ctx, name, name, sel).Spec == 1, nil
	}); err != nil {
		t.Fatalf("HPA did not scale the idle pool down once Prometheus was back: %v (%+v)", err, s.Observe(ctx, name, name, sel))
	}
}

// TestScalingPrometheus is TestScaling's scale-up and scale-down with the
// adapter reading a real Prometheus: a 12 req/s step grows an HPA on
// llm_saturation (Value 1) from 1 to at least 3 replicas, the queue drains,
// and the HPA returns to 1 replica after the load stops.
func TestScalingPrometheus(t *testing.T) {
	t.Parallel()
	s := prometheusStack(t, stack.Options{ColdStart: 2 * time.Second, EmulatorArgs: testEmulatorArgs})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	a := newScaleRun(t, s, "vllm-prom", stack.EmulatorImage, "llm_saturation", autoscalingv2.ValueMetricType, "1")
	loadDone := a.startLoad(ctx, testRPS, loadLength)
	loadStart := time.Now()
	t.Run("scale up on llm_saturation from Prometheus", func(t *testing.T) {
		smp := a.waitFor("≥3 desired replicas", loadLength, func(smp stack.Sample) bool { return smp.Desired >= 3 })
		t.Logf("HPA wants %d replicas %s after the load started", smp.Desired, time.Since(loadStart).Round(time.Second))
	})
	t.Run("queue drains", func(t *testing.T) {
		smp := a.waitFor("queue ≤ 1 with ≥3 ready", time.Until(loadStart.Add(loadLength)), func(smp stack.Sample) bool {
			return smp.Ready >= 3 && smp.Queue <= 1
		})
		t.Logf("queue %.0f with %d ready replicas while the load goes on", smp.Queue, smp.Ready)
	})
	a.waitFor("load end", loadLength+10*time.Second, closed(loadDone))
	t.Run("scale down after the load stops", func(t *testing.T) {
		stop := time.Now()
		smp := a.waitFor("1 replica", 2*time.Minute, func(smp stack.Sample) bool { return smp.Spec == 1 && smp.Ready == 1 })
		t.Logf("back to %d replica %s after the load stopped", smp.Spec, time.Since(stop).Round(time.Second))
	})
	if r := a.gw.Results(); len(r) > 0 {
		t.Logf("run: %s", loadgen.Summarize(r, time.Time{}))
	}
}
