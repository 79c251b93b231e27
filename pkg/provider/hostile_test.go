package provider

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	promconfig "github.com/prometheus/common/config"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/saturation-adapter/saturation-adapter/internal/testfixture"
	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// rawEngine answers every connection with response, byte for byte (a status
// line Go's server would never send), and returns its port.
func rawEngine(t *testing.T, response string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
					_, _ = io.WriteString(c, response)
				}
			}()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// getRaw GETs path from the fixture's API server and returns the status and
// the raw body.
func (f *fixture) getRaw(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(f.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// checkBounded fails unless body is an error Status whose message is at most
// MaxMessageBytes of printable UTF-8 without a pod address, and the whole
// body stays small.
func checkBounded(t *testing.T, code int, body []byte, want string) {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("HTTP %d, not a Status (%d bytes): %v", code, len(body), err)
	}
	msg := st.Message
	if code == http.StatusOK || st.Code != int32(code) {
		t.Errorf("HTTP %d, status code %d; want an error status", code, st.Code)
	}
	if len(msg) > MaxMessageBytes || !utf8.ValidString(msg) || strings.IndexFunc(msg, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		t.Errorf("message of %d bytes (valid UTF-8 %v), want printable and at most %d: %.300q", len(msg), utf8.ValidString(msg), MaxMessageBytes, msg)
	}
	if len(body) > 4*MaxMessageBytes {
		t.Errorf("error body of %d bytes", len(body))
	}
	if strings.Contains(msg, "127.0.0.1") || strings.Contains(msg, "token=") {
		t.Errorf("message shows a pod address or query: %.300q", msg)
	}
	if !strings.Contains(msg, want) {
		t.Errorf("message %.400q does not say %q", msg, want)
	}
}

// TestMessagesAreBounded is issue 12's text amplification (faults 3): hostile
// pods and requests must never make an API message (which the HPA copies into
// its conditions) larger than MaxMessageBytes, nor show a pod's address or
// annotation query to the caller (faults 6).
func TestMessagesAreBounded(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	invalidUTF8 := newEngine(t, strings.Repeat("\xff\xfe\x00", 4<<20/3))
	warnings := newEngine(t, `vllm:num_requests_waiting{engine="0",x="`+huge+`"} NaN`+"\n"+`vllm:kv_cache_usage_perc{engine="0",x="`+huge+`"} -1`+"\n")
	phrase := rawEngine(t, "HTTP/1.1 500 "+huge+"\r\nContent-Length: 0\r\n\r\n")
	failing := newEngine(t, "")
	failing.set(http.StatusInternalServerError, huge)
	specs := []object{
		podSpec{name: "invalid-utf8", labels: map[string]string{"app": "utf8"}, engine: invalidUTF8},
		podSpec{name: "warnings", labels: map[string]string{"app": "warnings"}, engine: warnings},
		podSpec{name: "phrase", labels: map[string]string{"app": "phrase"}, annot: map[string]string{podselect.AnnotationPort: phrase,
			podselect.AnnotationPath: "/metrics?token=s3cret"}},
		podSpec{name: "badpath", labels: map[string]string{"app": "badpath"}, annot: map[string]string{podselect.AnnotationPath: "metrics?token=s3cret"}},
	}
	// Thousands of failing pods with the longest names Kubernetes allows.
	for i := range 2000 {
		name := fmt.Sprintf("%s-%04d", strings.Repeat("p", 248), i)
		specs = append(specs, podSpec{name: name, labels: map[string]string{"app": "many"}, engine: failing})
	}
	f := newFixture(t, specs...)
	// The many pods fail: scrape them once (the cold scrape of a request is
	// bounded in time and would leave most "not scraped yet").
	var targets []scrape.Target
	for i := range 2000 {
		targets = append(targets, mustTarget(t, f, fmt.Sprintf("%s-%04d", strings.Repeat("p", 248), i)))
	}
	f.scraper.Scrape(context.Background(), targets)

	longSelector := "app=many,run notin (" + strings.Repeat("r", 60) + ")" + strings.Repeat(",x notin (y)", 100<<10/12)
	ext := "/apis/external.metrics.k8s.io/v1beta1/namespaces/"
	tests := []struct {
		name, path, want string
	}{
		{"4 MB body of invalid UTF-8", ext + "llm/llm_saturation?labelSelector=app%3Dutf8", "parsing exposition"},
		// A series line that long fails its scrape, with a short error naming the line.
		{"series with 1 MB label values", ext + "llm/llm_saturation?labelSelector=app%3Dwarnings", "more than 65536"},
		{"1 MB reason phrase, path with a token", ext + "llm/llm_saturation?labelSelector=app%3Dphrase", "HTTP 500 Internal Server Error"},
		{"bad path annotation with a token", ext + "llm/llm_saturation?labelSelector=app%3Dbadpath", "must be an absolute path"},
		{"2,000 failing pods with 253-byte names", ext + "llm/llm_saturation?labelSelector=app%3Dmany", "and 199"},
		{"100 KB selector", ext + "llm/llm_saturation?labelSelector=" + url.QueryEscape(longSelector), "none has fresh data"},
		{"100 KB selector matching nothing", ext + "llm/llm_saturation?labelSelector=" + url.QueryEscape("app=none"+longSelector[8:]), "no pods match"},
		{"unwatched 10 KB namespace", ext + strings.Repeat("n", 10<<10) + "/llm_saturation?labelSelector=app%3Dmany", "no pods match"},
		{"10 KB unknown metric", ext + "llm/" + strings.Repeat("m", 10<<10) + "?labelSelector=app%3Dmany", "could not find the metric"},
		{"per-pod, 100 KB selector", "/apis/custom.metrics.k8s.io/v1beta2/namespaces/llm/pods/*/llm_saturation?labelSelector=" + url.QueryEscape(longSelector), "none has fresh data"},
		{"per-pod, 10 KB pod name", "/apis/custom.metrics.k8s.io/v1beta2/namespaces/llm/pods/" + strings.Repeat("q", 10<<10) + "/llm_saturation", "no pods match"},
		{"per-pod, invalid UTF-8", "/apis/custom.metrics.k8s.io/v1beta2/namespaces/llm/pods/invalid-utf8/llm_saturation", "parsing exposition"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := f.getRaw(t, tt.path)
			checkBounded(t, code, body, tt.want)
			if testing.Verbose() {
				var st metav1.Status
				_ = json.Unmarshal(body, &st)
				t.Logf("HTTP %d, %d bytes: %s", code, len(st.Message), st.Message)
			}
		})
	}
}

// Issue 12, wrong numbers 9: 10,000 engines (40 pods of 250) at 1e9 waiting
// requests each with a 0.001 queue set point make a demand of 1e16 replicas,
// beyond what milli units hold. That answered HTTP 500 "Internal error"; it is a 503 saying the value
// is out of range, which the HPA shows (and holds on).
func TestOutOfRangeValue(t *testing.T) {
	catalog, err := policy.BuiltinCatalog(policy.SetPoints{QueueDepth: policy.MinSetPoint, KVCacheUsage: 0.8}, policy.DefaultUnknownSaturation)
	if err != nil {
		t.Fatal(err)
	}
	var body strings.Builder
	for e := range 250 {
		fmt.Fprintf(&body, "vllm:num_requests_waiting{engine=\"%d\"} 1e9\n", e)
	}
	e := newEngine(t, body.String())
	var specs []object
	for i := range 40 {
		specs = append(specs, podSpec{name: fmt.Sprintf("vllm-%d", i), labels: map[string]string{"app": "vllm"}, engine: e})
	}
	f := newFixtureCatalog(t, catalog, specs...)
	// 2.5e14 per pod is still servable as a mean; their sum is not.
	if got := f.value(t, "llm", policy.MetricSaturation, "app=vllm"); got != "250T" {
		t.Errorf("llm_saturation = %s, want 250T (2.5e14)", got)
	}
	code, raw := f.getRaw(t, "/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/llm_demand_replicas?labelSelector=app%3Dvllm")
	if code != http.StatusServiceUnavailable {
		t.Errorf("HTTP %d, want 503", code)
	}
	checkBounded(t, code, raw, "out of range")
	if got := testutil.ToFloat64(f.metrics.Requests.WithLabelValues(policy.MetricDemandReplicas, string(ResultError))); got != 1 {
		t.Errorf("requests_total{result=error} = %g, want 1", got)
	}
}

// Issue 12, faults 6: a pod re-created under the same name is a new pod (a new
// UID): the answer never carries its predecessor's reading, through the member
// cache, the scraper's results and the provider.
func TestRecreatedPodDoesNotInheritReading(t *testing.T) {
	busy := newEngine(t, "vllm:num_requests_waiting 40\n") // saturation 8
	idle := newEngine(t, "vllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	catalog := builtinCatalog(t)
	old := makePod(podSpec{name: "vllm-0", labels: map[string]string{"app": "vllm"}, engine: busy})
	old.UID = "first"
	client := fake.NewClientset(old)
	watches := testfixture.TrackWatches(client)
	inf, err := podselect.NewInformers(client, nil)
	if err != nil {
		t.Fatal(err)
	}
	pools := podselect.New(podselect.Options{Port: 1, Path: "/metrics", Scheme: "http", IdleTimeout: time.Minute,
		Serves: func(m string) bool { return catalog.Lookup(m) != nil }}, inf.Pods(), clk)
	if err := inf.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sm, err := scrape.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	pm, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	hc, err := scrape.NewHTTPClient(promconfig.TLSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sc := scrape.New(scrape.Options{Timeout: 2 * time.Second, MaxBodyBytes: 4 << 20, Concurrency: 4}, hc, scrape.Reader{Extractor: signals.NewExtractor()}, clk, sm)
	p := New(Options{MaxAge: 6 * time.Second}, StaticCatalog{catalog}, pools, Scraped(sc, 2*time.Second), clk, pm)
	sel := labels.SelectorFromSet(labels.Set{"app": "vllm"})
	info := cmprovider.ExternalMetricInfo{Metric: policy.MetricSaturation}
	value := func() string {
		t.Helper()
		list, err := p.GetExternalMetric(ctx, "llm", sel, info)
		if err != nil {
			t.Fatal(err)
		}
		return list.Items[0].Value.String()
	}
	if got := value(); got != "8" {
		t.Fatalf("first pod: %s, want 8", got)
	}
	watches.Wait(t, "pods", 1) // or the delete below may never reach the informer
	if err := client.CoreV1().Pods("llm").Delete(ctx, "vllm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := makePod(podSpec{name: "vllm-0", labels: map[string]string{"app": "vllm"}, engine: idle})
	again.UID = "second"
	if _, err := client.CoreV1().Pods("llm").Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got, err := inf.Pods().Get("llm", "vllm-0")
		return err == nil && got.UID == "second", nil
	}); err != nil {
		t.Fatal("the cache never showed the new pod")
	}
	// At once: the old pod's reading (its UID's) is still stored and fresh.
	if r, ok := sc.Latest("first"); !ok || r.Reading() == nil {
		t.Fatal("the old pod's reading is gone; the test would prove nothing")
	}
	if got := value(); got != "0" {
		t.Errorf("re-created pod: %s, want 0 (its own engine), never the old pod's 8", got)
	}
}

// Issue 12, faults 5: a flood of distinct selectors and 100 KB selectors from
// one client leaves the adapter's own series unchanged (their labels are the
// catalog's names and results, and HPAs the operator made) and its heap
// bounded. 10,000 selectors and 20 of 100 KB here, through the whole request
// path (ten times the default bound, more than the member cache holds);
// podselect's TestInterestsAreBounded sends the 58,000.
func TestSelectorFloodKeepsSeriesAndMemoryBounded(t *testing.T) {
	e := newEngine(t, "vllm:num_requests_waiting 1\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	catalog := builtinCatalog(t)
	pools := startPools(t, ctx, catalog, clk,
		makePod(podSpec{name: "vllm-0", labels: map[string]string{"app": "vllm"}, engine: e}),
		hpaSpec{name: "vllm", metric: policy.MetricSaturation, selector: map[string]string{"app": "vllm"}}.object())
	reg := prometheus.NewRegistry()
	sm, err := scrape.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := scrape.NewHTTPClient(promconfig.TLSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sc := scrape.New(scrape.Options{Timeout: 2 * time.Second, MaxBodyBytes: 4 << 20, Concurrency: 4}, hc, scrape.Reader{Extractor: signals.NewExtractor()}, clk, sm)
	p := New(Options{MaxAge: 6 * time.Second}, StaticCatalog{catalog}, pools, Scraped(sc, 2*time.Second), clk, pm)
	info := cmprovider.ExternalMetricInfo{Metric: policy.MetricSaturation}
	ask := func(selector string) {
		sel, err := labels.Parse(selector)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.GetExternalMetric(ctx, "llm", sel, info); err != nil {
			t.Fatalf("%.80s: %v", selector, err)
		}
	}
	ask("app=vllm") // the HPA's request
	series := func() int {
		n, err := testutil.GatherAndCount(reg)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	seriesBefore, heapBefore := series(), heap()
	for i := range 10000 {
		ask(fmt.Sprintf("app=vllm,run notin (r%d)", i))
	}
	long := strings.Repeat(",x notin (y)", 100<<10/12)
	for i := range 20 {
		ask(fmt.Sprintf("app=vllm,run notin (q%d)", i) + long)
	}
	seriesAfter, heapAfter := series(), heap()
	if seriesAfter != seriesBefore {
		t.Errorf("the adapter's series grew from %d to %d: a label takes request text", seriesBefore, seriesAfter)
	}
	// A sanity bound: what is kept per selector is bounded structurally
	// (podselect's TestInterestsAreBounded), so the heap does not follow the
	// number of selectors.
	if grown := int64(heapAfter) - int64(heapBefore); grown > 16<<20 {
		t.Errorf("heap grew by %d MiB", grown>>20)
	}
	if got := testutil.ToFloat64(pm.Requests.WithLabelValues(policy.MetricSaturation, string(ResultOK))); got != 10021 {
		t.Errorf("requests_total{ok} = %g, want 10021", got)
	}

}

// Issue 20: a raw signal with pods that never reported (3 of 4 failing from
// the start, the fourth idle) counted them at the known pod's 0, and an HPA on
// llm_num_requests_waiting (AverageValue 5) went 4 → 1. The answer is a 503
// naming them (the HPA holds) until they report; the saturation and demand
// metrics count them at the unknown-pod saturation.
func TestRawSignalWithPodsThatNeverReported(t *testing.T) {
	var specs []object
	for i := range 3 {
		e := newEngine(t, "")
		e.set(http.StatusInternalServerError, "")
		specs = append(specs, podSpec{name: fmt.Sprintf("dark-%d", i), labels: map[string]string{"app": "vllm"}, engine: e})
	}
	specs = append(specs, podSpec{name: "idle", labels: map[string]string{"app": "vllm"},
		engine: newEngine(t, "vllm:num_requests_waiting{engine=\"0\"} 0\nvllm:num_requests_running{engine=\"0\"} 0\nvllm:kv_cache_usage_perc{engine=\"0\"} 0\n")})
	f := newFixture(t, specs...)
	for _, m := range []string{policy.MetricQueueDepth, policy.MetricRunning, policy.MetricKVCacheUsage} {
		r := f.get(t, "llm", m, "app=vllm")
		if r.code != http.StatusServiceUnavailable || !strings.Contains(r.status.Message, "3 of the 4 Ready pods have no fresh data") {
			t.Errorf("%s: HTTP %d %q %v, want 503 naming the 3 pods without data", m, r.code, r.status.Message, r.list.Items)
		}
	}
	if got := f.value(t, "llm", policy.MetricDemandReplicas, "app=vllm"); got != "3" {
		t.Errorf("llm_demand_replicas = %s, want 3 (the dark pods at the unknown-pod saturation)", got)
	}
}
