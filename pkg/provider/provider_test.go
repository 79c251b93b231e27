package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	promconfig "github.com/prometheus/common/config"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
	cmapiserver "sigs.k8s.io/custom-metrics-apiserver/pkg/apiserver"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// engine is an httptest server standing in for one pod's /metrics.
type engine struct {
	srv  *httptest.Server
	mu   sync.Mutex
	body string
	code int
}

func newEngine(t *testing.T, body string) *engine {
	e := &engine{body: body, code: http.StatusOK}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(e.code)
		io.WriteString(w, e.body)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *engine) set(code int, body string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.code, e.body = code, body
}

func (e *engine) port() string {
	_, port, _ := net.SplitHostPort(e.srv.Listener.Addr().String())
	return port
}

func sample(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type podSpec struct {
	ns, name string
	sa       string // spec.serviceAccountName
	labels   map[string]string
	engine   *engine
	notReady bool
	pending  bool
	annot    map[string]string
	// created is the pod's creation time (zero: long ago).
	created time.Time
}

func makePod(p podSpec) *corev1.Pod {
	ns := p.ns
	if ns == "" {
		ns = "llm"
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.name, UID: types.UID(ns + "/" + p.name), Labels: p.labels, Annotations: map[string]string{}},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "127.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
	pod.Spec.ServiceAccountName = p.sa
	if p.engine != nil {
		pod.Annotations[podselect.AnnotationPort] = p.engine.port()
	}
	for k, v := range p.annot {
		pod.Annotations[k] = v
	}
	if p.notReady {
		pod.Status.Conditions[0].Status = corev1.ConditionFalse
	}
	if p.pending {
		pod.Status.Phase, pod.Status.PodIP = corev1.PodPending, ""
	}
	pod.CreationTimestamp = metav1.NewTime(p.created)
	return pod
}

// fixture is an adapter wired as in production (informers over a fake clientset,
// discovery, a real HTTP scraper, the provider) behind custom-metrics-apiserver's
// real handlers.
type fixture struct {
	srv     *httptest.Server
	scraper *scrape.Scraper
	// scrapeMetrics are the scraper's self-metrics.
	scrapeMetrics *scrape.Metrics
	pools         *podselect.Selection
	metrics       *Metrics
	clock         *clocktesting.FakeClock
	reg           *prometheus.Registry
	opts          Options
	// prov is the provider behind srv, for tests that send many requests.
	prov *Provider
}

func builtinCatalog(t testing.TB) *policy.Catalog {
	t.Helper()
	c, err := policy.BuiltinCatalog(policy.DefaultSetPoints(), policy.DefaultUnknownSaturation)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startPools starts informers over a fake clientset holding objs and a
// Selection over them, as the adapter wires them.
func startPools(t testing.TB, ctx context.Context, catalog *policy.Catalog, clk *clocktesting.FakeClock, objs ...runtime.Object) *podselect.Selection {
	t.Helper()
	inf, err := podselect.NewInformers(fake.NewClientset(objs...), nil)
	if err != nil {
		t.Fatal(err)
	}
	sel := podselect.New(podselect.Options{Port: 1, Path: "/metrics", Scheme: "http", IdleTimeout: time.Minute,
		Serves: func(m string) bool { return catalog.Lookup(m) != nil }}, inf.Pods(), clk)
	if err := inf.AddHPAHandler(sel.HPAHandler()); err != nil {
		t.Fatal(err)
	}
	if err := inf.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return sel
}

// object is a pod or an HPA of a fixture.
type object interface{ object() runtime.Object }

func (p podSpec) object() runtime.Object { return makePod(p) }

// hpaSpec is an HPA with one External metric.
type hpaSpec struct {
	name, metric string
	selector     map[string]string
}

func (h hpaSpec) object() runtime.Object {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: h.name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: h.name},
			MaxReplicas:    8,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ExternalMetricSourceType,
				External: &autoscalingv2.ExternalMetricSource{
					Metric: autoscalingv2.MetricIdentifier{Name: h.metric, Selector: &metav1.LabelSelector{MatchLabels: h.selector}},
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: resource.NewQuantity(1, resource.DecimalSI)},
				},
			}},
		},
	}
}

func newFixture(t *testing.T, specs ...object) *fixture {
	t.Helper()
	return newFixtureCatalog(t, builtinCatalog(t), specs...)
}

// newFixtureCatalog is newFixture serving catalog.
func newFixtureCatalog(t *testing.T, catalog *policy.Catalog, specs ...object) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var objs []runtime.Object
	for _, o := range specs {
		objs = append(objs, o.object())
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	pools := startPools(t, ctx, catalog, clk, objs...)
	reg := prometheus.NewRegistry()
	sm, err := scrape.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	client, err := scrape.NewHTTPClient(promconfig.TLSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sc := scrape.New(scrape.Options{Timeout: 2 * time.Second, MaxBodyBytes: 4 << 20, Concurrency: 4}, client,
		scrape.Reader{Extractor: signals.NewExtractorWith(signals.ExtractOptions{Histograms: true, GatewayMetrics: catalog.Needs().GatewayMetrics}),
			History: history.HistoryOptions{Needs: catalog.Needs()}}, clk, sm)
	opts := Options{MaxAge: 6 * time.Second, StartupGrace: 10 * time.Minute}
	prov := New(opts, StaticCatalog{catalog}, pools, Scraped(sc, 2*time.Second), clk, pm)
	return &fixture{srv: newAPIServer(t, prov), scraper: sc, scrapeMetrics: sm, pools: pools, metrics: pm, clock: clk, reg: reg, opts: opts, prov: prov}
}

// newAPIServer serves prov through custom-metrics-apiserver's real server and
// handler chain, with authentication and authorization left open for the test.
func newAPIServer(t *testing.T, prov *Provider) *httptest.Server {
	t.Helper()
	cfg := genericapiserver.NewRecommendedConfig(cmapiserver.Codecs)
	cfg.Authorization.Authorizer = authorizerfactory.NewAlwaysAllowAuthorizer()
	cfg.ExternalAddress = "127.0.0.1:6443"
	cfg.LoopbackClientConfig = &rest.Config{Host: "127.0.0.1:1"} // never used: no post-start hooks call back
	c := &cmapiserver.Config{GenericConfig: &cfg.Config}
	s, err := c.Complete(nil).New("saturation-adapter-test", prov, prov)
	if err != nil {
		t.Fatalf("building API server: %v", err)
	}
	srv := httptest.NewServer(s.GenericAPIServer.Handler)
	t.Cleanup(srv.Close)
	return srv
}

type response struct {
	code   int
	list   v1beta1.ExternalMetricValueList
	status metav1.Status
}

func (f *fixture) get(t *testing.T, ns, metric, selector string) response {
	t.Helper()
	u := fmt.Sprintf("%s/apis/external.metrics.k8s.io/v1beta1/namespaces/%s/%s", f.srv.URL, ns, metric)
	if selector != "" {
		u += "?labelSelector=" + url.QueryEscape(selector)
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	r := response{code: resp.StatusCode}
	target := any(&r.list)
	if resp.StatusCode != http.StatusOK {
		target = &r.status
	}
	if err := json.Unmarshal(body, target); err != nil {
		t.Fatalf("decoding %s: %v\n%s", u, err, body)
	}
	return r
}

func (f *fixture) value(t *testing.T, ns, metric, selector string) string {
	t.Helper()
	r := f.get(t, ns, metric, selector)
	if r.code != http.StatusOK {
		t.Fatalf("GET %s %s: HTTP %d: %s", metric, selector, r.code, r.status.Message)
	}
	if len(r.list.Items) != 1 {
		t.Fatalf("GET %s %s: %d items, want exactly 1", metric, selector, len(r.list.Items))
	}
	return r.list.Items[0].Value.String()
}

func TestExternalMetricsThroughHandlers(t *testing.T) {
	dp := newEngine(t, sample(t, "hazards/BC-06.prom"))                                  // saturation 7.4
	idle := newEngine(t, sample(t, "samples/vllm_v1-0.10-nvcr25.09_single-engine.prom")) // 0.00147
	negKV := newEngine(t, sample(t, "hazards/BC-08.prom"))                               // queue 4 → 0.8
	f := newFixture(t,
		podSpec{name: "dp", labels: map[string]string{"app": "vllm", "tier": "prod"}, engine: dp},
		podSpec{name: "idle", labels: map[string]string{"app": "vllm", "tier": "prod"}, engine: idle},
		podSpec{name: "neg", labels: map[string]string{"app": "neg"}, engine: negKV},
		podSpec{name: "warming", labels: map[string]string{"app": "vllm", "tier": "prod"}, notReady: true},
	)
	tests := []struct {
		metric, selector, want string
	}{
		// (7.4 + 0) / 2: the idle pod's KV residue (0.00118, nothing running or
		// waiting) is not demand.
		{policy.MetricSaturation, "app=vllm", "3700m"},
		{policy.MetricDemandReplicas, "app=vllm", "7400m"},
		{policy.MetricQueueDepth, "app=vllm", "37"},
		{policy.MetricRunning, "app=vllm", "48"},
		// mean of the pods' KV usage: (0.495 + 0.00118) / 2.
		{policy.MetricKVCacheUsage, "app=vllm", "248m"},
		// matchExpressions are applied exactly.
		{policy.MetricQueueDepth, "app in (vllm,neg),tier!=prod", "4"},
		{policy.MetricQueueDepth, "app", "41"},
		// BC-08: the negative KV series drops out; queue 4 / 5 alone.
		{policy.MetricSaturation, "app=neg", "800m"},
		// BC-15: the HPA lower-cases names; an upper-case request still finds the metric.
		{"LLM_Saturation", "app=neg", "800m"},
	}
	for _, tt := range tests {
		t.Run(tt.metric+"/"+tt.selector, func(t *testing.T) {
			if got := f.value(t, "llm", tt.metric, tt.selector); got != tt.want {
				t.Errorf("value = %s, want %s", got, tt.want)
			}
		})
	}
}

// BC-17: the selector is applied exactly and one item is returned, so the HPA's
// sum of items is this model's queue, not every model's.
func TestSelectorAppliedExactly(t *testing.T) {
	llama := newEngine(t, "vllm:num_requests_waiting{engine=\"0\",model_name=\"llama-8b\"} 7\n")
	qwen := newEngine(t, "vllm:num_requests_waiting{engine=\"0\",model_name=\"qwen-32b\"} 40\n")
	f := newFixture(t,
		podSpec{name: "llama-0", labels: map[string]string{"model": "llama-8b"}, engine: llama},
		podSpec{name: "qwen-0", labels: map[string]string{"model": "qwen-32b"}, engine: qwen},
	)
	r := f.get(t, "llm", "vllm-queue-depth", "model=llama-8b")
	if r.code != http.StatusNotFound {
		t.Errorf("unknown metric: HTTP %d, want 404", r.code)
	}
	r = f.get(t, "llm", policy.MetricQueueDepth, "model=llama-8b")
	if r.code != http.StatusOK || len(r.list.Items) != 1 {
		t.Fatalf("HTTP %d with %d items, want 200 with exactly 1: %s", r.code, len(r.list.Items), r.status.Message)
	}
	if got := r.list.Items[0].Value.String(); got != "7" {
		t.Errorf("llama-8b queue = %s, want 7", got)
	}
}

// BC-18: same metric and selector in two namespaces never share a value.
func TestNamespacesKeptApart(t *testing.T) {
	alpha := newEngine(t, "vllm:num_requests_waiting 10\n")
	beta := newEngine(t, "vllm:num_requests_waiting 1\n")
	sel := map[string]string{"deployment": "vllm"}
	f := newFixture(t,
		podSpec{ns: "team-alpha", name: "vllm-0", labels: sel, engine: alpha},
		podSpec{ns: "team-beta", name: "vllm-0", labels: sel, engine: beta},
	)
	for i := 0; i < 2; i++ { // twice: a cache keyed without namespace would serve the last value to both
		if got := f.value(t, "team-alpha", policy.MetricSaturation, "deployment=vllm"); got != "2" {
			t.Errorf("team-alpha = %s, want 2", got)
		}
		if got := f.value(t, "team-beta", policy.MetricSaturation, "deployment=vllm"); got != "200m" {
			t.Errorf("team-beta = %s, want 200m", got)
		}
	}
}

func TestMissingDataIsAnErrorNeverZero(t *testing.T) {
	good := newEngine(t, "vllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\n")
	broken := newEngine(t, "")
	broken.set(http.StatusInternalServerError, "engine dead")
	f := newFixture(t,
		podSpec{name: "good", labels: map[string]string{"app": "mixed"}, engine: good},
		podSpec{name: "broken", labels: map[string]string{"app": "mixed"}, engine: broken},
		podSpec{name: "broken-only", labels: map[string]string{"app": "broken"}, engine: broken},
		podSpec{name: "cold", labels: map[string]string{"app": "cold"}, notReady: true},
		podSpec{name: "pending", labels: map[string]string{"app": "cold"}, pending: true},
		podSpec{name: "tgi", labels: map[string]string{"app": "tgi"}, engine: newEngine(t, "tgi_queue_size 3\ntgi_batch_current_size 2\n")},
		podSpec{name: "misannotated", labels: map[string]string{"app": "misannotated"}, annot: map[string]string{podselect.AnnotationPort: "http"}},
		podSpec{ns: "other", name: "elsewhere", labels: map[string]string{"app": "mixed"}, engine: good},
	)
	t.Run("an unknown pod counts as saturated, not idle", func(t *testing.T) {
		// good: 0, broken: unknown → 1.0; mean 0.5, sum 1.
		if got := f.value(t, "llm", policy.MetricSaturation, "app=mixed"); got != "500m" {
			t.Errorf("saturation = %s, want 500m", got)
		}
		r := f.get(t, "llm", policy.MetricSaturation, "app=mixed")
		if got := r.list.Items[0].MetricLabels; got["pods"] != "2" || got["pods_unknown"] != "1" {
			t.Errorf("metricLabels = %v, want pods=2 pods_unknown=1", got)
		}
	})
	errs := []struct {
		name, metric, selector string
		code                   int
		msg                    []string
	}{
		{"selector matches nothing", policy.MetricSaturation, "app=nothing", http.StatusNotFound,
			[]string{`namespace "llm"`, `selector "app=nothing"`, "no pods match"}},
		{"pods match but none Ready", policy.MetricSaturation, "app=cold", http.StatusServiceUnavailable,
			[]string{"2 pods match but none is Running and Ready"}},
		{"every pod's scrape fails", policy.MetricSaturation, "app=broken", http.StatusServiceUnavailable,
			[]string{"1 Ready pods match, none has fresh data", "broken-only: scrape failing", "HTTP 500"}},
		{"signal no pod exposes", policy.MetricKVCacheUsage, "app=tgi", http.StatusServiceUnavailable,
			[]string{"none of the 1 pods with fresh data exposes this signal"}},
		{"unknown metric", "cpu_usage", "app=mixed", http.StatusNotFound, []string{"cpu_usage"}},
		{"a bad annotation is named, not 'not scraped yet'", policy.MetricSaturation, "app=misannotated", http.StatusServiceUnavailable,
			[]string{`misannotated: cannot be scraped`, `annotation prometheus.io/port="http" is not a port number`}},
	}
	// An empty namespace would otherwise mean "every namespace" to the lister.
	t.Run("no namespace", func(t *testing.T) {
		r := f.get(t, "", policy.MetricSaturation, "app=mixed")
		if r.code != http.StatusBadRequest || !strings.Contains(r.status.Message, "a namespace is required") {
			t.Errorf("HTTP %d %q, want 400 asking for a namespace", r.code, r.status.Message)
		}
	})
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			r := f.get(t, "llm", tt.metric, tt.selector)
			if r.code != tt.code {
				t.Fatalf("HTTP %d (%s), want %d", r.code, r.status.Message, tt.code)
			}
			for _, m := range tt.msg {
				if !strings.Contains(r.status.Message, m) {
					t.Errorf("message %q does not contain %q", r.status.Message, m)
				}
			}
		})
	}
}

func TestStaleReadingsAgeOut(t *testing.T) {
	e := newEngine(t, "vllm:num_requests_waiting 10\n")
	f := newFixture(t, podSpec{name: "a", labels: map[string]string{"app": "x"}, engine: e})
	if got := f.value(t, "llm", policy.MetricSaturation, "app=x"); got != "2" {
		t.Fatalf("fresh = %s, want 2", got)
	}
	// The engine starts failing: the last good reading serves until it is older
	// than MaxAge, then the pod is unknown and, alone, an error.
	e.set(http.StatusInternalServerError, "")
	f.clock.Step(5 * time.Second)
	f.scraper.Sync(context.Background(), f.pools.Targets())
	if got := f.value(t, "llm", policy.MetricSaturation, "app=x"); got != "2" {
		t.Errorf("within max age = %s, want 2", got)
	}
	f.clock.Step(2 * time.Second)
	r := f.get(t, "llm", policy.MetricSaturation, "app=x")
	if r.code != http.StatusServiceUnavailable || !strings.Contains(r.status.Message, "stale: last good scrape 7s ago") ||
		!strings.Contains(r.status.Message, "HTTP 500") {
		t.Errorf("HTTP %d %q, want 503 naming the stale pod and the last error", r.code, r.status.Message)
	}
}

func TestTimestampIsOldestSample(t *testing.T) {
	a := newEngine(t, "vllm:num_requests_waiting 1\n")
	b := newEngine(t, "vllm:num_requests_waiting 1\n")
	f := newFixture(t,
		podSpec{name: "a", labels: map[string]string{"app": "x"}, engine: a},
		podSpec{name: "b", labels: map[string]string{"app": "x"}, engine: b},
	)
	t0 := f.clock.Now()
	f.scraper.ScrapeOne(context.Background(), mustTarget(t, f, "a"))
	f.clock.Step(time.Second)
	f.scraper.ScrapeOne(context.Background(), mustTarget(t, f, "b"))
	r := f.get(t, "llm", policy.MetricSaturation, "app=x")
	if got := r.list.Items[0].Timestamp.Time; !got.Equal(t0) {
		t.Errorf("timestamp = %v, want the oldest sample's %v", got, t0)
	}
}

func mustTarget(t *testing.T, f *fixture, name string) scrape.Target {
	t.Helper()
	m, found, err := f.pools.Member("llm", name)
	if err != nil || !found || m.TargetErr != nil {
		t.Fatalf("pod %s: found %v, %v, %v", name, found, err, m.TargetErr)
	}
	return m.Target
}

func TestListAllExternalMetrics(t *testing.T) {
	f := newFixture(t)
	resp, err := http.Get(f.srv.URL + "/apis/external.metrics.k8s.io/v1beta1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list metav1.APIResourceList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range list.APIResources {
		got = append(got, r.Name)
	}
	want := builtinCatalog(t).Names()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("discovery (-want +got):\n%s", diff)
	}
	for _, name := range want {
		if name != strings.ToLower(name) {
			t.Errorf("metric %q is not lower-case; the HPA client would never find it (BC-15)", name)
		}
	}
}

// BC-13: floats become quantities by rounding half-up to milli units, never by a
// cast that turns NaN into -9223372036854775808m.
func TestMilliQuantity(t *testing.T) {
	tests := []struct {
		in   float64
		want string
		err  bool
	}{
		{0.734, "734m", false},
		{10.334, "10334m", false},
		{329.5, "329500m", false},
		{0.0004, "0", false},
		{0.0006, "1m", false},
		{0.0005, "1m", false},
		{1, "1", false},
		{-0.3875, "0", false},
		{math.NaN(), "", true},
		{math.Inf(1), "", true},
		{math.Inf(-1), "", true},
		{9.3e15, "", true},
	}
	for _, tt := range tests {
		q, err := MilliQuantity(tt.in)
		if (err != nil) != tt.err {
			t.Errorf("MilliQuantity(%g) error = %v, want error %v", tt.in, err, tt.err)
			continue
		}
		if err == nil && q.String() != tt.want {
			t.Errorf("MilliQuantity(%g) = %s, want %s", tt.in, q.String(), tt.want)
		}
	}
}

// custom.metrics.k8s.io: one item per counted pod with data, for HPA metrics of
// type Pods; pods without data are left to the HPA's missing-pod rule.
func TestPodMetricsThroughHandlers(t *testing.T) {
	dp := newEngine(t, sample(t, "hazards/BC-06.prom"))
	broken := newEngine(t, "")
	broken.set(http.StatusBadGateway, "")
	f := newFixture(t,
		podSpec{name: "dp", labels: map[string]string{"app": "vllm"}, engine: dp},
		podSpec{name: "broken", labels: map[string]string{"app": "vllm"}, engine: broken},
		podSpec{name: "warming", labels: map[string]string{"app": "vllm"}, notReady: true},
	)
	get := func(path string) (int, []byte) {
		resp, err := http.Get(f.srv.URL + "/apis/custom.metrics.k8s.io/v1beta2/namespaces/llm/" + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	code, body := get("pods/*/llm_saturation?labelSelector=" + url.QueryEscape("app=vllm"))
	if code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", code, body)
	}
	var list struct {
		Items []struct {
			DescribedObject struct{ Kind, Name string } `json:"describedObject"`
			Value           string                      `json:"value"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].DescribedObject.Name != "dp" || list.Items[0].DescribedObject.Kind != "Pod" || list.Items[0].Value != "7400m" {
		t.Errorf("items = %+v, want only pod dp at 7400m", list.Items)
	}
	if code, body := get("pods/dp/llm_num_requests_waiting"); code != http.StatusOK || !strings.Contains(string(body), `"value":"37"`) {
		t.Errorf("single pod: HTTP %d %s, want 37", code, body)
	}
	if code, body := get("pods/broken/llm_saturation"); code != http.StatusServiceUnavailable || !strings.Contains(string(body), "HTTP 502") {
		t.Errorf("broken pod: HTTP %d %s, want 503 naming the scrape error", code, body)
	}
	if code, _ := get("pods/*/llm_demand_replicas?labelSelector=app%3Dvllm"); code != http.StatusNotFound {
		t.Errorf("pool-only metric per pod: HTTP %d, want 404", code)
	}
	if code, _ := get("pods/*/llm_saturation?labelSelector=app%3Dnone"); code != http.StatusNotFound {
		t.Errorf("no pods: HTTP %d, want 404", code)
	}
}
