package prometheus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promconfig "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/provider"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// streamsOf returns a body's series as Prometheus stores them after scraping
// pod: its own labels plus namespace, pod, job and instance, stamped at the
// scrape (or with the body's own timestamps).
func streamsOf(t testing.TB, body []byte, podName string, at time.Time) []*model.SampleStream {
	t.Helper()
	p := textparse.NewPromParser(body, labels.NewSymbolTable(), false)
	var out []*model.SampleStream
	for {
		entry, err := p.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if entry != textparse.EntrySeries {
			continue
		}
		_, ts, v := p.Series()
		var lset labels.Labels
		p.Labels(&lset)
		m := model.Metric{"namespace": "llm", "pod": model.LabelValue(podName), "job": "llm/engines", "instance": "10.0.0.1:8000"}
		lset.Range(func(l labels.Label) { m[model.LabelName(l.Name)] = model.LabelValue(l.Value) })
		when := at
		if ts != nil {
			when = time.UnixMilli(*ts)
		}
		out = append(out, &model.SampleStream{Metric: m, Values: []model.SamplePair{{Timestamp: model.TimeFromUnixNano(when.UnixNano()), Value: model.SampleValue(v)}}})
	}
}

// The semantics do not fork: the same engine bodies, scraped directly by the
// adapter or read from Prometheus, give the same answer for every built-in
// metric, pool by pool and pod by pod (errors included).
func TestSameAnswersAsDirect(t *testing.T) {
	files := []string{
		"samples/vllm_v1-0.10-nvcr25.09_single-engine.prom", "samples/vllm_v0-0.6-qwenvl-issue55_excerpt.prom",
		"samples/sglang_v0.4-docs.prom", "samples/triton-trtllm_readme.prom", "samples/llamacpp_mid2025-pr13196_excerpt.prom",
		"samples/llm-d-inference-sim_v0.10.2_load.prom", "hazards/BC-06.prom", "hazards/BC-08.prom", "hazards/BC-09-window.prom",
		"hazards/NC-05-gateway.prom", "hazards/NC-06.prom", "hazards/NC-02-t1.prom",
	}
	var pods []pod
	var streams []*model.SampleStream
	engines := map[string]*httptest.Server{}
	for i, f := range files {
		body, err := os.ReadFile(filepath.Join("..", "..", "testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("pod-%02d", i)
		pods = append(pods, pod{name: name, labels: map[string]string{"app": "x", "file": fmt.Sprint(i)}})
		streams = append(streams, streamsOf(t, body, name, t0)...)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) }))
		t.Cleanup(srv.Close)
		engines[name] = srv
	}
	prom := newFakeProm(t, ok(map[string]string{"series": matrix(t, streams...)}))
	viaProm := newFixture(t, prom, fixtureOptions{}, pods...)
	direct := newDirectFixture(t, engines, pods)

	metrics := []string{policy.MetricSaturation, policy.MetricDemandReplicas, policy.MetricQueueDepth, policy.MetricRunning, policy.MetricKVCacheUsage}
	selectors := []string{"app=x"}
	for i := range files {
		selectors = append(selectors, fmt.Sprintf("file=%d", i))
	}
	answered := 0
	for _, m := range metrics {
		for _, sel := range selectors {
			d, p := direct.get(t, "llm", m, sel), viaProm.get(t, "llm", m, sel)
			if d.code != p.code {
				t.Errorf("%s %s: direct HTTP %d (%s), Prometheus HTTP %d (%s)", m, sel, d.code, d.status.Message, p.code, p.status.Message)
				continue
			}
			if d.code != http.StatusOK {
				continue
			}
			answered++
			dv, pv := d.list.Items[0], p.list.Items[0]
			if dv.Value.Cmp(pv.Value) != 0 || fmt.Sprint(dv.MetricLabels) != fmt.Sprint(pv.MetricLabels) {
				t.Errorf("%s %s: direct %s %v, Prometheus %s %v", m, sel, dv.Value.String(), dv.MetricLabels, pv.Value.String(), pv.MetricLabels)
			}
		}
	}
	// Every pool has a saturation and a queue; some engines lack KV or running.
	if answered < 2*len(selectors)+len(selectors) {
		t.Errorf("%d of %d requests answered with a value, want most", answered, len(metrics)*len(selectors))
	}
	t.Logf("%d of %d answers compared", answered, len(metrics)*len(selectors))
}

// newDirectFixture is the adapter in direct mode over the same pods, each
// scraped from its engine server, at the same fake time.
func newDirectFixture(t *testing.T, engines map[string]*httptest.Server, pods []pod) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var objs []runtime.Object
	for _, p := range pods {
		o := p.object()
		_, port, _ := net.SplitHostPort(engines[p.name].Listener.Addr().String())
		o.Status.PodIP = "127.0.0.1"
		o.Annotations = map[string]string{podselect.AnnotationPort: port}
		objs = append(objs, o)
	}
	clk := clocktesting.NewFakeClock(t0)
	catalog, err := policy.BuiltinCatalog(policy.DefaultSetPoints(), policy.DefaultUnknownSaturation)
	if err != nil {
		t.Fatal(err)
	}
	inf, err := podselect.NewInformers(fake.NewClientset(objs...), nil)
	if err != nil {
		t.Fatal(err)
	}
	sel := podselect.New(podselect.Options{Port: 8000, Path: "/metrics", Scheme: "http", IdleTimeout: time.Minute,
		Serves: func(m string) bool { return catalog.Lookup(m) != nil }}, inf.Pods(), clk)
	if err := inf.Start(ctx); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	sm, err := scrape.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := provider.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	client, err := scrape.NewHTTPClient(promconfig.TLSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sc := scrape.New(scrape.Options{Timeout: 2 * time.Second, MaxBodyBytes: 4 << 20, Concurrency: 4}, client,
		scrape.Reader{Extractor: signals.NewExtractorWith(signals.ExtractOptions{}), History: history.HistoryOptions{Needs: catalog.Needs()}}, clk, sm)
	prov := provider.New(provider.Options{MaxAge: 45 * time.Second}, provider.StaticCatalog{C: catalog}, sel, provider.Scraped(sc, 2*time.Second), clk, pm)
	return &fixture{srv: newAPIServer(t, prov), clock: clk, reg: reg, catalog: catalog}
}

// familyBody is an engine whose own running gauge carries a label that looks
// like a family's name tag (saturation_adapter_metric, naming another
// family): it is the engine's label and names nothing, so the gauge is still
// the running count (40) and the queue is the waiting gauge (0).
var familyBody = []byte("vllm:num_requests_waiting{engine=\"0\"} 0\n" +
	"vllm:num_requests_running{engine=\"0\",saturation_adapter_metric=\"vllm:num_requests_waiting\"} 40\n" +
	"vllm:kv_cache_usage_perc{engine=\"0\"} 0.5\n" +
	// a series of a family not read, whose label names one that is: not read
	"vllm:cache_config_info{engine=\"0\",saturation_adapter_metric=\"vllm:num_requests_waiting\"} 7\n")

// A label on an engine's own series that names another family does not
// rename it: read through Prometheus, the series gives the same answers
// as scraped directly.
func TestFamilyLabelOnEngineSeries(t *testing.T) {
	pods := []pod{{name: "pod-a", labels: map[string]string{"app": "x"}}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(familyBody) }))
	t.Cleanup(srv.Close)
	viaProm := newFixture(t, newFakeProm(t, ok(map[string]string{"series": matrix(t, streamsOf(t, familyBody, "pod-a", t0)...)})), fixtureOptions{}, pods...)
	direct := newDirectFixture(t, map[string]*httptest.Server{"pod-a": srv}, pods)
	want := map[string]string{policy.MetricQueueDepth: "0", policy.MetricRunning: "40", policy.MetricSaturation: "625m"}
	for m, w := range want {
		d, p := direct.get(t, "llm", m, "app=x"), viaProm.get(t, "llm", m, "app=x")
		if d.code != http.StatusOK || p.code != http.StatusOK {
			t.Fatalf("%s: direct HTTP %d (%s), via Prometheus HTTP %d (%s)", m, d.code, d.status.Message, p.code, p.status.Message)
		}
		dv, pv := d.list.Items[0].Value, p.list.Items[0].Value
		if dv.Cmp(pv) != 0 {
			t.Errorf("%s: direct %s, via Prometheus %s", m, dv.String(), pv.String())
		}
		if dv.String() != w {
			t.Errorf("%s: direct %s, want %s", m, dv.String(), w)
		}
	}
}

// explain reads a saved answer by the same rule: a series with a metric name
// is read by it (the label naming another family is the engine's, kept), as
// the extractor reads the body; a window query's increase (no metric name)
// names no family and changes nothing.
func TestReadingsOfFamilyLabelOnEngineSeries(t *testing.T) {
	e := signals.NewExtractor()
	want, err := e.Extract(familyBody)
	if err != nil {
		t.Fatal(err)
	}
	window := &model.SampleStream{Metric: model.Metric{"namespace": "llm", "pod": "pod-a", "engine": "0", "saturation_adapter_metric": "vllm:num_requests_waiting"},
		Values: []model.SamplePair{{Timestamp: model.TimeFromUnixNano(t0.UnixNano()), Value: 99}}}
	rs, errs, err := ReadingsOf([]byte(matrix(t, append(streamsOf(t, familyBody, "pod-a", t0), window)...)), DefaultLabels(), e)
	if err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: "llm", Name: "pod-a"}
	if len(errs) != 0 || len(rs) != 1 || len(rs[key]) != 1 {
		t.Fatalf("readings %v, errors %v; want one reading of llm/pod-a", rs, errs)
	}
	got := rs[key][0]
	if len(got.Engines) != 1 || len(want.Engines) != 1 {
		t.Fatalf("engines: saved answer %d, body %d; want 1", len(got.Engines), len(want.Engines))
	}
	g, w := fmt.Sprint(got.Engines[0].Values), fmt.Sprint(want.Engines[0].Values)
	if g != w {
		t.Errorf("saved answer's engine %s, the body's %s", g, w)
	}
	if q, _ := got.Engines[0].Value(signals.QueueDepth); q != 0 {
		t.Errorf("saved answer's queue %g, want 0 (the waiting gauge)", q)
	}
}
