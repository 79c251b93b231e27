package prometheus

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

// vllm returns the labels of a vLLM V1 series of pod in namespace llm, as a
// PodMonitor writes them.
func vllm(name, pod string, kv ...string) []string {
	return append([]string{"__name__", name, "namespace", "llm", "pod", pod, "job", "llm/vllm", "engine", "0", "model_name", "m"}, kv...)
}

func matrix(t testing.TB, ss ...*model.SampleStream) string { return envelope(t, model.Matrix(ss)) }

// Prometheus down, slow, erroring or answering nonsense is an error the HPA
// sees (and holds on), naming the cause in a bounded message, and counted by
// reason.
func TestPrometheusFailures(t *testing.T) {
	tests := []struct {
		name   string
		answer func(string) (int, string)
		delay  time.Duration
		closed bool
		reason ErrorReason
		msg    string
	}{
		{"HTTP 500 from a proxy", func(string) (int, string) { return 500, "<html>" + strings.Repeat("oops ", 2000) + "</html>" }, 0, false, ReasonHTTPStatus, "server error: 500"},
		{"the query is rejected", func(string) (int, string) {
			return 422, `{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory"}`
		}, 0, false, ReasonQuery, "too many samples"},
		{"401 from an auth gateway", func(string) (int, string) { return 401, "unauthorized" }, 0, false, ReasonHTTPStatus, "client error: 401"},
		{"not JSON", func(string) (int, string) { return 200, "<html>login</html>" }, 0, false, ReasonResponse, "not a Prometheus API response"},
		{"a scalar", func(string) (int, string) {
			return 200, `{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}`
		}, 0, false, ReasonResponse, `result type "scalar"`},
		{"slower than the timeout", ok(nil), 3 * time.Second, false, ReasonTimeout, "deadline exceeded"},
		{"down", ok(nil), 0, true, ReasonConnect, "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prom := newFakeProm(t, tt.answer)
			prom.delay = tt.delay
			f := newFixture(t, prom, fixtureOptions{opts: Options{Timeout: 500 * time.Millisecond}}, pod{name: "a", labels: map[string]string{"app": "x"}})
			if tt.closed {
				prom.srv.Close()
			}
			r := f.get(t, "llm", policy.MetricSaturation, "app=x")
			if r.code != http.StatusServiceUnavailable {
				t.Fatalf("HTTP %d (%s), want 503", r.code, r.status.Message)
			}
			for _, want := range []string{`namespace "llm"`, "querying Prometheus at " + prom.srv.URL, tt.msg} {
				if !strings.Contains(r.status.Message, want) {
					t.Errorf("message %q lacks %q", r.status.Message, want)
				}
			}
			if n := len(r.status.Message); n >= 1024 {
				t.Errorf("message is %d bytes, want under 1 KiB", n)
			}
			if got := testutil.ToFloat64(f.source.metrics.QueryErrors.WithLabelValues(string(tt.reason))); got < 1 {
				t.Errorf("query_errors_total{reason=%q} = %g, want at least 1", tt.reason, got)
			}
		})
	}
}

// Every request of a namespace within a cache period shares one answer, and
// a failure too: a Prometheus that is down is asked once per period. A request
// that finds the answer older than the period is served it while a refresh
// runs in the background; one older than the max age is an error.
func TestCachePeriod(t *testing.T) {
	prom := newFakeProm(t, ok(nil))
	f := newFixture(t, prom, fixtureOptions{}, pod{name: "a", labels: map[string]string{"app": "x"}}, pod{ns: "other", name: "a", labels: map[string]string{"app": "x"}})
	for range 5 {
		f.get(t, "llm", policy.MetricSaturation, "app=x")
		f.get(t, "llm", policy.MetricQueueDepth, "app=x")
	}
	if got := prom.count(); got["series"] != 1 || got["window"] != f.windowQueries() {
		t.Errorf("queries %v after 10 requests in one period, want one of each (%d window families)", got, f.windowQueries())
	}
	f.get(t, "other", policy.MetricSaturation, "app=x")
	if got := prom.count(); got["series"] != 2 {
		t.Errorf("queries %v after a request in another namespace, want its own", got)
	}
	f.clock.Step(DefaultCachePeriod)
	f.get(t, "llm", policy.MetricSaturation, "app=x")
	f.source.refreshing.Wait()
	if got := prom.count(); got["series"] != 3 {
		t.Errorf("queries %v after the period, want a new one", got)
	}
	prom.set(func(string) (int, string) { return 503, "down" })
	f.clock.Step(46 * time.Second) // past the max age (45 s)
	for i := range 3 {
		r := f.get(t, "llm", policy.MetricSaturation, "app=x")
		if r.code != http.StatusServiceUnavailable {
			t.Fatalf("HTTP %d, want 503 while Prometheus fails", r.code)
		}
		if !strings.Contains(r.status.Message, "is 46s old, older than the max age 45s") {
			t.Errorf("message %q does not give the answer's age", r.status.Message)
		}
		if i > 0 && !strings.Contains(r.status.Message, "the last refresh failed: querying Prometheus at "+prom.srv.URL) {
			t.Errorf("message %q does not name the failed refresh", r.status.Message)
		}
		f.source.refreshing.Wait()
	}
	if got := prom.count(); got["series"] != 4 {
		t.Errorf("queries %v after 3 requests to a failing Prometheus, want one more", got)
	}
}

// The previous answer is served while a refresh runs, not after one failed:
// within the max age, a request after a failed refresh fails naming
// Prometheus and the answer's age (the HPA holds), and once Prometheus
// answers again the next refresh serves.
func TestFailedRefreshIsNotHidden(t *testing.T) {
	prom := newFakeProm(t, ok(nil))
	f := newFixture(t, prom, fixtureOptions{}, pod{name: "a", labels: map[string]string{"app": "x"}})
	// Prometheus up: pod a's queue, sampled at the time of the query.
	live := func(q string) (int, string) {
		if queryKind(q) != "series" {
			return http.StatusOK, emptyVector
		}
		return http.StatusOK, matrix(t, stream(vllm("vllm:num_requests_waiting", "a"), f.clock.Now(), 10))
	}
	prom.set(live)
	if r := f.get(t, "llm", policy.MetricSaturation, "app=x"); r.code != http.StatusOK {
		t.Fatalf("HTTP %d (%s), want 200", r.code, r.status.Message)
	}
	prom.set(func(string) (int, string) { return 503, "down" })
	f.clock.Step(DefaultCachePeriod)
	// This request starts the refresh and is served the previous answer.
	if r := f.get(t, "llm", policy.MetricSaturation, "app=x"); r.code != http.StatusOK {
		t.Fatalf("HTTP %d (%s) while the refresh runs, want the previous answer", r.code, r.status.Message)
	}
	f.source.refreshing.Wait()
	r := f.get(t, "llm", policy.MetricSaturation, "app=x")
	if r.code != http.StatusServiceUnavailable {
		t.Fatalf("HTTP %d after the refresh failed, want 503", r.code)
	}
	for _, want := range []string{"is 2s old", "the last refresh failed: querying Prometheus at " + prom.srv.URL} {
		if !strings.Contains(r.status.Message, want) {
			t.Errorf("message %q lacks %q", r.status.Message, want)
		}
	}
	prom.set(live)
	f.clock.Step(DefaultCachePeriod)
	f.get(t, "llm", policy.MetricSaturation, "app=x") // starts the refresh
	f.source.refreshing.Wait()
	if r := f.get(t, "llm", policy.MetricSaturation, "app=x"); r.code != http.StatusOK {
		t.Errorf("HTTP %d (%s) once Prometheus answers again, want 200", r.code, r.status.Message)
	}
}

// A sample older than the max age by its own timestamp is stale, whatever the
// query's time; a pod whose series then vanish keeps its last good value for
// the hold, as in direct mode.
func TestStaleAndHeld(t *testing.T) {
	app := map[string]string{"app": "x"}
	prom := newFakeProm(t, ok(nil))
	f := newFixture(t, prom, fixtureOptions{opts: Options{MaxAge: 30 * time.Second}}, pod{name: "a", labels: app}, pod{name: "b", labels: app})
	now := f.clock.Now()
	prom.set(ok(map[string]string{"series": matrix(t,
		stream(vllm("vllm:num_requests_waiting", "a"), now.Add(-5*time.Second), 10),
		stream(vllm("vllm:num_requests_waiting", "b"), now.Add(-40*time.Second), 10),
	)}))
	r := f.get(t, "llm", policy.MetricSaturation, "app=x")
	if r.code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", r.code, r.status.Message)
	}
	// a: 10 / 5 = 2; b is stale: at least the unknown saturation 1, and its last
	// good 2 while within the hold. Mean 2.
	if got := r.list.Items[0].Value.String(); got != "2" || r.list.Items[0].MetricLabels["pods_held"] != "1" {
		t.Errorf("value %s, labels %v; want 2 with b held", got, r.list.Items[0].MetricLabels)
	}
	if !r.list.Items[0].Timestamp.Time.Equal(now.Add(-5 * time.Second)) {
		t.Errorf("timestamp %s, want a's sample time", r.list.Items[0].Timestamp.Time)
	}
	// Both pods' series vanish: each counts at its last good value (2), and,
	// nothing being fresh, the answer is an error naming the age.
	prom.set(ok(nil))
	f.step(31 * time.Second)
	r = f.get(t, "llm", policy.MetricSaturation, "app=x")
	if r.code != http.StatusServiceUnavailable || !strings.Contains(r.status.Message, "stale: its samples are timestamped 36s before now") ||
		!strings.Contains(r.status.Message, "no engine series in Prometheus for this pod") {
		t.Errorf("HTTP %d %q, want 503 naming the stale samples and the missing series", r.code, r.status.Message)
	}
}

// Only the counted pods of the selector are joined: series of a pod that is
// not Ready, of a pod that no longer exists, of another namespace and of a
// pod's predecessor under the same name (a series that ended) are ignored.
func TestJoinedToCountedPods(t *testing.T) {
	app := map[string]string{"app": "x"}
	prom := newFakeProm(t, ok(nil))
	f := newFixture(t, prom, fixtureOptions{}, pod{name: "a", labels: app}, pod{name: "warming", labels: app, notReady: true})
	now := f.clock.Now()
	other := vllm("vllm:num_requests_waiting", "a")
	other[3] = "elsewhere"
	prom.set(ok(map[string]string{"series": matrix(t,
		stream(vllm("vllm:num_requests_waiting", "a"), now.Add(-16*time.Second), 1, now.Add(-time.Second), 1),
		// the previous pod a (another IP), gone 45 s ago
		stream(vllm("vllm:num_requests_waiting", "a", "instance", "10.0.0.9:8000"), now.Add(-60*time.Second), 50, now.Add(-45*time.Second), 50),
		stream(vllm("vllm:num_requests_waiting", "warming"), now, 100),
		stream(vllm("vllm:num_requests_waiting", "deleted"), now, 100),
		stream(other, now, 100),
	)}))
	if got := f.value(t, "llm", policy.MetricQueueDepth, "app=x"); got != "1" {
		t.Errorf("queue %s, want 1: a's own series only", got)
	}
}

// Rate and latency terms come from the window query's increases; the pool
// takes the quantile of every pod's observations together, in Go.
func TestWindowTerms(t *testing.T) {
	catalog, err := policy.NewCatalog(policy.Policy{Name: "chat", Kind: policy.KindMean, UnknownSaturation: 1, Terms: []policy.Term{
		{Kind: policy.TermQueueDepth, SetPoint: 5},
		{Kind: policy.TermPreemptionRate, SetPoint: 0.1, Window: 2 * time.Minute},
		{Kind: policy.TermTTFT, SetPoint: 1, Quantile: 0.9, Window: 2 * time.Minute},
	}})
	if err != nil {
		t.Fatal(err)
	}
	app := map[string]string{"app": "x"}
	prom := newFakeProm(t, ok(nil))
	f := newFixture(t, prom, fixtureOptions{catalog: catalog}, pod{name: "a", labels: app}, pod{name: "b", labels: app})
	now := f.clock.Now()
	// An increase as Prometheus answers it: no metric name (PromQL's
	// functions drop it); family says which query it answers.
	type increase struct {
		family string
		*model.Sample
	}
	inc := func(pod, family string, v float64, kv ...string) increase {
		m := model.Metric{"namespace": "llm", "pod": model.LabelValue(pod), "engine": "0", "model_name": "m"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[model.LabelName(kv[i])] = model.LabelValue(kv[i+1])
		}
		return increase{family, &model.Sample{Metric: m, Value: model.SampleValue(v), Timestamp: model.TimeFromUnixNano(now.UnixNano())}}
	}
	const bucket = "vllm:time_to_first_token_seconds_bucket"
	increases := []increase{
		inc("a", "vllm:num_preemptions_total", 6),
		inc("a", bucket, 2, "le", "0.5"), inc("a", bucket, 3, "le", "1"), inc("a", bucket, 5, "le", "2.5"), inc("a", bucket, 5, "le", "+Inf"),
		inc("b", bucket, 0, "le", "0.5"), inc("b", bucket, 3, "le", "1"), inc("b", bucket, 5, "le", "2.5"), inc("b", bucket, 5, "le", "+Inf"),
	}
	series := matrix(t,
		stream(vllm("vllm:num_requests_waiting", "a"), now, 0), stream(vllm("vllm:num_requests_waiting", "b"), now, 0),
		stream(vllm("vllm:num_requests_running", "a"), now, 1), stream(vllm("vllm:num_requests_running", "b"), now, 1))
	// As Prometheus answers: each window query (one family) with that
	// family's increases only.
	answer := func(increases []increase) func(q string) (int, string) {
		return func(q string) (int, string) {
			if queryKind(q) == "series" {
				return http.StatusOK, series
			}
			var v model.Vector
			for _, smp := range increases {
				if queryKey(q) == "window "+smp.family {
					v = append(v, smp.Sample)
				}
			}
			return http.StatusOK, envelope(t, v)
		}
	}
	prom.set(answer(increases))
	// Pooled TTFT: 10 observations, 2 ≤ 0.5 s, 6 ≤ 1 s, 10 ≤ 2.5 s. p90: rank 9
	// in (1, 2.5] holding ranks 7..10: 1 + 1.5 × 3/4 = 2.125 s, 2.125 × the
	// SLO, above a's preemption rate (6 / 120 s = 0.05/s, 0.5 × its set point).
	if got := f.value(t, "llm", "chat", "app=x"); got != "2125m" {
		t.Errorf("chat = %s, want 2125m (the pooled TTFT guardrail)", got)
	}
	// A window query names its family itself and writes no label onto the
	// series: an engine whose own series carry a label of any name (here one
	// naming another family on pod a's) keeps it, and the increases are still
	// read as the query's family. (A query that label_replace'd a name label
	// over the series would make two that differ only in that label one
	// labelset, which Prometheus refuses for the whole query.)
	n := len(prom.sent())
	labelled := make([]increase, len(increases))
	for i, inc := range increases {
		smp := *inc.Sample
		smp.Metric = smp.Metric.Clone()
		smp.Metric["saturation_adapter_metric"] = map[model.LabelValue]model.LabelValue{"a": "vllm:num_requests_waiting", "b": "x"}[smp.Metric["pod"]]
		labelled[i] = increase{inc.family, &smp}
	}
	prom.set(answer(labelled))
	f.clock.Step(DefaultCachePeriod)
	f.get(t, "llm", "chat", "app=x") // the old answer, while the refresh runs
	f.source.refreshing.Wait()
	if got := f.value(t, "llm", "chat", "app=x"); got != "2125m" {
		t.Errorf("with an engine label on the increases, chat = %s, want 2125m", got)
	}
	if len(prom.sent()) == n {
		t.Fatal("no query after the cache period: the engine label was not read")
	}
	for _, q := range prom.sent() {
		if queryKind(q) == "window" && !strings.HasPrefix(q, "increase(") {
			t.Errorf("window query %s: want a bare increase()", q)
		}
	}
	// Two windows: the terms' 2 minutes, with the TTFT buckets only, and the
	// lost demand's minute, counters only.
	var long, short string
	for _, q := range prom.sent() {
		switch {
		case strings.Contains(q, "[120000ms]"):
			long += q + "\n"
		case strings.Contains(q, "[60000ms]"):
			short += q + "\n"
		}
	}
	for _, want := range []string{`increase(vllm:time_to_first_token_seconds_bucket{namespace="llm"}[120000ms])`, `increase(vllm:num_preemptions_total{namespace="llm"}[120000ms])`} {
		if !strings.Contains(long, want) {
			t.Errorf("2m window query lacks %s:\n%s", want, long)
		}
	}
	if strings.Contains(long, "e2e_request_latency") || strings.Contains(short, "_bucket") || !strings.Contains(short, "vllm:request_success_total") {
		t.Errorf("window queries read histograms no term needs:\n%s\n%s", long, short)
	}
}

// Engine states are judged on the range's samples by the History's own rules:
// requests waiting while no token is generated for the state window is wedged.
func TestEngineStatesFromRange(t *testing.T) {
	app := map[string]string{"app": "x"}
	prom := newFakeProm(t, ok(nil))
	f := newFixture(t, prom, fixtureOptions{opts: Options{StateWindow: 40 * time.Second}}, pod{name: "stuck", labels: app}, pod{name: "fine", labels: app})
	now := f.clock.Now()
	var ss []*model.SampleStream
	for _, p := range []string{"stuck", "fine"} {
		var q, tok []any
		for i := 3; i >= 0; i-- {
			at := now.Add(-time.Duration(i) * 15 * time.Second)
			q = append(q, at, 10)
			n := 100
			if p == "fine" {
				n += 50 * (3 - i)
			}
			tok = append(tok, at, n)
		}
		ss = append(ss, stream(vllm("vllm:num_requests_waiting", p), q...), stream(vllm("vllm:generation_tokens_total", p), tok...),
			stream(vllm("vllm:prompt_tokens_total", p), tok...))
	}
	prom.set(ok(map[string]string{"series": matrix(t, ss...)}))
	r := f.get(t, "llm", policy.MetricSaturation, "app=x")
	if r.code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", r.code, r.status.Message)
	}
	// fine: 10 / 5 = 2; stuck: wedged, at the unknown saturation 1. Mean 1.5.
	if got := r.list.Items[0].Value.String(); got != "1500m" || r.list.Items[0].MetricLabels["pods_wedged"] != "1" {
		t.Errorf("value %s, labels %v; want 1500m with one wedged pod", got, r.list.Items[0].MetricLabels)
	}
}

func TestQueries(t *testing.T) {
	catalog, err := policy.BuiltinCatalog(policy.DefaultSetPoints(), 1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Labels: Labels{Namespace: "kubernetes_namespace", Pod: "kubernetes_pod_name"}, MaxAge: 90 * time.Second, StateWindow: time.Minute},
		nil, catalog, Queries{Matchers: `{cluster="prod"}`, Series: map[string]string{"vllm:num_requests_waiting": `vllm_num_requests_waiting{job="vllm"}`}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	qs := s.gen.Load().plan.queries("llm")
	if len(qs) < 3 {
		t.Fatalf("%d queries, want the series, the overridden family and the lost-demand window's families: %+v", len(qs), qs)
	}
	if q := qs[0].expr; !strings.HasPrefix(q, `{__name__=~"vllm:num_requests_waiting_by_reason|vllm:num_requests_running|`) ||
		!strings.HasSuffix(q, `",kubernetes_namespace="llm",cluster="prod"}[90000ms]`) || strings.Contains(q, "|vllm:num_requests_waiting|") {
		t.Errorf("series query %s", q)
	}
	if q := qs[1]; q.family != "vllm:num_requests_waiting" || q.expr != `vllm_num_requests_waiting{job="vllm",kubernetes_namespace="llm",cluster="prod"}[90000ms]` {
		t.Errorf("overridden family's query %+v", q)
	}
	// One query per counter family of the window: no "or" for Prometheus to
	// join, no histogram bucket (no latency term).
	want := `increase(vllm:request_success_total{kubernetes_namespace="llm",cluster="prod"}[60000ms])`
	found := false
	for _, q := range qs[2:] {
		if q.kind != "window" || q.window != time.Minute || strings.Contains(q.expr, " or ") || strings.Contains(q.expr, "bucket") ||
			!strings.HasPrefix(q.expr, "increase("+q.family+"{") {
			t.Errorf("window query %+v", q)
		}
		found = found || q.expr == want
	}
	if !found {
		t.Errorf("no window query %s", want)
	}
	n := len(qs)
	for _, bad := range []Queries{{Matchers: `{__name__="x"}`}, {Matchers: `cluster=prod`}, {Series: map[string]string{"vllm:num_requests_waiting": "rate(x[1m])"}},
		{Series: map[string]string{"vllm:num_request_waiting": "x"}}} {
		if err := s.SetCatalog(catalog, bad); err == nil {
			t.Errorf("SetCatalog(%+v) = nil, want an error", bad)
		}
	}
	if qs := s.gen.Load().plan.queries("llm"); len(qs) != n {
		t.Errorf("a rejected SetCatalog changed the plan")
	}
}

// Concurrent requests that find no fresh answer wait for one query, not one
// each.
func TestConcurrentMissesCollapse(t *testing.T) {
	prom := newFakeProm(t, ok(nil))
	prom.delay = 300 * time.Millisecond
	f := newFixture(t, prom, fixtureOptions{}, pod{name: "a", labels: map[string]string{"app": "x"}})
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.get(t, "llm", policy.MetricSaturation, "app=x")
		}()
	}
	wg.Wait()
	if got := prom.count(); got["series"] != 1 || got["window"] != f.windowQueries() {
		t.Errorf("queries %v for 50 concurrent requests, want one of each (%d window families)", got, f.windowQueries())
	}
}

// A real Prometheus's answer (testdata/prometheus: five scrapes of two emulated
// vLLM pods under load) served as the engine series: the values explain
// prints for the same file (cmd/adapter/app/testdata/explain).
func TestRealAnswer(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "prometheus", "vllm-emulator_range.json"))
	if err != nil {
		t.Fatal(err)
	}
	prom := newFakeProm(t, ok(map[string]string{"series": string(b)}))
	app := map[string]string{"app": "vllm"}
	f := newFixture(t, prom, fixtureOptions{opts: Options{ScrapeInterval: 2 * time.Second, MaxAge: 6 * time.Second}},
		pod{name: "vllm-0", labels: app}, pod{name: "vllm-1", labels: app})
	f.clock.SetTime(time.Unix(1796152137, 0))
	for metric, want := range map[string]string{
		policy.MetricSaturation: "5400m", policy.MetricDemandReplicas: "10800m", policy.MetricQueueDepth: "54",
	} {
		if got := f.value(t, "llm", metric, "app=vllm"); got != want {
			t.Errorf("%s = %s, want %s", metric, got, want)
		}
	}
}
