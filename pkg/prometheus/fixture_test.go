package prometheus

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
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

	promconfig "github.com/prometheus/common/config"

	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/provider"
)

var _ provider.Readings = (*Source)(nil)

// t0 is the fake clock's start: the hazard files' sample time (1767225600).
var t0 = time.Unix(1767225600, 0).UTC()

// fakeProm is an httptest stand-in for the Prometheus HTTP API: it records
// every query and answers with answer's body.
type fakeProm struct {
	srv *httptest.Server

	mu      sync.Mutex
	queries []string
	answer  func(q string) (int, string)
	delay   time.Duration
	// hold, when set, keeps every query waiting until it is closed (or the
	// client gives up): a Prometheus as slow as the test wants, without a
	// clock. Each query held is first sent on arrived, when set.
	hold    chan struct{}
	arrived chan string
	// holding counts the queries being held.
	holding int
}

func newFakeProm(t testing.TB, answer func(q string) (int, string)) *fakeProm {
	f := &fakeProm{answer: answer}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query" {
			http.NotFound(w, r)
			return
		}
		q := r.FormValue("query")
		f.mu.Lock()
		f.queries = append(f.queries, q)
		answer, delay, hold, arrived := f.answer, f.delay, f.hold, f.arrived
		f.mu.Unlock()
		if hold != nil {
			f.mu.Lock()
			f.holding++
			f.mu.Unlock()
			defer func() {
				f.mu.Lock()
				f.holding--
				f.mu.Unlock()
			}()
			if arrived != nil {
				select {
				case arrived <- q:
				case <-r.Context().Done():
					return
				}
			}
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		code, body := answer(q)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// block makes the stand-in hold every query from now on until the returned
// function is called; each query held is sent on the returned channel as it
// arrives (buffered for a few refreshes' queries).
func (f *fakeProm) block() (arrived <-chan string, release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hold, arr := make(chan struct{}), make(chan string, 16)
	f.hold, f.arrived = hold, arr
	return arr, func() {
		f.mu.Lock()
		f.hold, f.arrived = nil, nil
		f.mu.Unlock()
		close(hold)
	}
}

// held returns how many queries the stand-in is holding.
func (f *fakeProm) held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.holding
}

// sent returns the queries received so far.
func (f *fakeProm) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.queries)
}

func (f *fakeProm) set(answer func(q string) (int, string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = answer
}

// count returns the queries received, by kind: "series" for the engine series
// (range) queries, "window" for the increase queries.
func (f *fakeProm) count() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for _, q := range f.queries {
		out[queryKind(q)]++
	}
	return out
}

// windowFamily matches the family a window query reads (query.go): the
// metric name of its increase().
var windowFamily = regexp.MustCompile(`^increase\(([^{\[]+)`)

// queryKey returns a query's kind and, for a window query, its family.
func queryKey(q string) string {
	if k := queryKind(q); k == "window" {
		if m := windowFamily.FindStringSubmatch(q); m != nil {
			return k + " " + m[1]
		}
		return k
	}
	return "series"
}

// windowQueries returns how many window queries one refresh of a namespace
// runs (one per window and counter family).
func (f *fixture) windowQueries() int {
	n := 0
	for _, q := range f.source.gen.Load().plan.queries("llm") {
		if q.kind == "window" {
			n++
		}
	}
	return n
}

func queryKind(q string) string {
	if strings.Contains(q, "increase(") {
		return "window"
	}
	return "series"
}

// ok answers every query with body, or with an empty vector.
func ok(bodies map[string]string) func(string) (int, string) {
	return func(q string) (int, string) {
		if b, found := bodies[queryKind(q)]; found {
			return http.StatusOK, b
		}
		return http.StatusOK, emptyVector
	}
}

const emptyVector = `{"status":"success","data":{"resultType":"vector","result":[]}}`

// envelope wraps a result in the API's success envelope.
func envelope(t testing.TB, v model.Value) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`{"status":"success","data":{"resultType":%q,"result":%s}}`, v.Type(), b)
}

// stream is one series of a matrix: labels as name, value pairs and its
// samples as (time, value) pairs.
func stream(lbls []string, pts ...any) *model.SampleStream {
	m := model.Metric{}
	for i := 0; i+1 < len(lbls); i += 2 {
		m[model.LabelName(lbls[i])] = model.LabelValue(lbls[i+1])
	}
	s := &model.SampleStream{Metric: m}
	for i := 0; i+1 < len(pts); i += 2 {
		s.Values = append(s.Values, model.SamplePair{Timestamp: model.TimeFromUnixNano(pts[i].(time.Time).UnixNano()), Value: model.SampleValue(toF(pts[i+1]))})
	}
	return s
}

func toF(v any) float64 {
	switch x := v.(type) {
	case int:
		return float64(x)
	case float64:
		return x
	}
	panic(fmt.Sprintf("not a number: %v", v))
}

func hazard(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "hazards", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pod is a pod of a fixture: Running and Ready in namespace llm unless said.
type pod struct {
	ns, name string
	labels   map[string]string
	notReady bool
}

func (p pod) object() *corev1.Pod {
	ns := p.ns
	if ns == "" {
		ns = "llm"
	}
	status := corev1.ConditionTrue
	if p.notReady {
		status = corev1.ConditionFalse
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.name, UID: types.UID(ns + "/" + p.name), Labels: p.labels},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

// fixture is the adapter wired as in prometheus mode (informers over a fake
// clientset, pod selection, the Source against a fake Prometheus, the
// provider) behind custom-metrics-apiserver's real handlers.
type fixture struct {
	srv     *httptest.Server
	prom    *fakeProm
	source  *Source
	clock   *clocktesting.FakeClock
	reg     *prometheus.Registry
	catalog *policy.Catalog
}

type fixtureOptions struct {
	catalog *policy.Catalog
	queries Queries
	opts    Options
	objects []runtime.Object
}

func newFixture(t testing.TB, prom *fakeProm, fo fixtureOptions, pods ...pod) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	objs := slices.Clone(fo.objects)
	for _, p := range pods {
		objs = append(objs, p.object())
	}
	clk := clocktesting.NewFakeClock(t0)
	catalog := fo.catalog
	if catalog == nil {
		var err error
		if catalog, err = policy.BuiltinCatalog(policy.DefaultSetPoints(), policy.DefaultUnknownSaturation); err != nil {
			t.Fatal(err)
		}
	}
	inf, err := podselect.NewInformers(fake.NewClientset(objs...), nil)
	if err != nil {
		t.Fatal(err)
	}
	sel := podselect.New(podselect.Options{Port: 8000, Path: "/metrics", Scheme: "http", IdleTimeout: time.Minute,
		Serves: func(m string) bool { return catalog.Lookup(m) != nil }}, inf.Pods(), clk)
	if err := inf.AddHPAHandler(sel.HPAHandler()); err != nil {
		t.Fatal(err)
	}
	if err := inf.Start(ctx); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := provider.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	api, err := NewClient(ClientOptions{URL: prom.srv.URL, MaxResponseBytes: DefaultMaxResponseBytes, TLS: promconfig.TLSConfig{}})
	if err != nil {
		t.Fatal(err)
	}
	o := fo.opts
	o.URL = prom.srv.URL
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	if o.CachePeriod == 0 {
		o.CachePeriod = DefaultCachePeriod
	}
	if o.MaxAge == 0 {
		o.MaxAge = 45 * time.Second
	}
	if o.ScrapeInterval == 0 {
		o.ScrapeInterval = 15 * time.Second
	}
	src, err := New(o, api, catalog, fo.queries, clk, m)
	if err != nil {
		t.Fatal(err)
	}
	prov := provider.New(provider.Options{MaxAge: o.MaxAge}, provider.StaticCatalog{C: catalog}, sel, src, clk, pm)
	return &fixture{srv: newAPIServer(t, prov), prom: prom, source: src, clock: clk, reg: reg, catalog: catalog}
}

// newAPIServer serves prov through custom-metrics-apiserver's real server and
// handler chain, with authentication and authorization left open for the test.
func newAPIServer(t testing.TB, prov *provider.Provider) *httptest.Server {
	t.Helper()
	cfg := genericapiserver.NewRecommendedConfig(cmapiserver.Codecs)
	cfg.Authorization.Authorizer = authorizerfactory.NewAlwaysAllowAuthorizer()
	cfg.ExternalAddress = "127.0.0.1:6443"
	cfg.LoopbackClientConfig = &rest.Config{Host: "127.0.0.1:1"}
	c := &cmapiserver.Config{GenericConfig: &cfg.Config}
	s, err := c.Complete(nil).New("saturation-adapter-test", prov, prov)
	if err != nil {
		t.Fatalf("building API server: %v", err)
	}
	srv := httptest.NewServer(s.GenericAPIServer.Handler)
	t.Cleanup(srv.Close)
	return srv
}

type answer struct {
	code   int
	list   v1beta1.ExternalMetricValueList
	status metav1.Status
}

func (f *fixture) get(t testing.TB, ns, metric, selector string) answer {
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
	r := answer{code: resp.StatusCode}
	target := any(&r.list)
	if resp.StatusCode != http.StatusOK {
		target = &r.status
	}
	if err := json.Unmarshal(body, target); err != nil {
		t.Fatalf("decoding %s: %v\n%s", u, err, body)
	}
	return r
}

// value returns the one item's value, failing on an error or another count.
func (f *fixture) value(t testing.TB, ns, metric, selector string) string {
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

// step advances the fake clock by d and runs a cache period's refresh (what
// Source.Run does on its tick), waiting for it to end.
func (f *fixture) step(d time.Duration) {
	f.clock.Step(d)
	f.source.refreshAll(f.clock.Now())
	f.source.refreshing.Wait()
}
