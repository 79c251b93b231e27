package prometheus

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/provider"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// BenchmarkNamespaceRefresh1000Pods is one cache period's work for a
// namespace of 1,000 vLLM pods: the engine series of the real V1 dump for each
// pod, three scrapes of each in the range, queried from an httptest Prometheus,
// decoded as the answer streams in, grouped by pod and built into the
// histories of its 1,000 pods, then read by one request. Requests in the
// period reuse them. allocs/pod is the refresh's allocations per pod.
func BenchmarkNamespaceRefresh1000Pods(b *testing.B) {
	src, members, clk := refreshFixture(b)
	b.ReportAllocs()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	mallocs := ms.Mallocs
	for b.Loop() {
		clk.Step(DefaultCachePeriod)
		src.refreshAll(clk.Now())
		src.refreshing.Wait()
		histories, err := src.Histories(context.Background(), "llm", members)
		if err != nil {
			b.Fatal(err)
		}
		for i := range members {
			if h, why := histories(&members[i]); h == nil {
				b.Fatalf("%s: %s", members[i].Pod, why)
			}
		}
	}
	goruntime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.Mallocs-mallocs)/float64(b.N)/float64(len(members)), "allocs/pod")
}

// BenchmarkPrometheusRequestDuringRefresh answers llm_saturation over the
// 1,000-pod namespace of refreshFixture through the provider (pods from the
// informer, histories from the Source), interleaved in one run: requests one
// after another while the namespace's answer is younger than the cache
// period ("outside" a refresh), for as long as the last refresh took; then,
// once the clock passed the cache period, requests one after another until
// the refresh the first of them started is over (its query, decoding,
// histories and the pool aggregates' update), at least 16 of each. It
// reports each kind's mean request cost (ns/req-outside, ns/req-during), the
// requests answered during a refresh (req-during/op), the slowest request of
// each kind (ns/req-during-max, ns/req-outside-max: wall-clock figures, the
// machine's scheduling included) and the ratio of the means
// (ratio-during/outside): target at most 2, no request waits on a refresh.
// The refresh takes a core meanwhile: on a machine whose other work leaves
// the process less than two, requests during a refresh share what is left.
func BenchmarkPrometheusRequestDuringRefresh(b *testing.B) {
	src, members, clk := refreshFixture(b)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	var objs []runtime.Object
	for _, m := range members {
		objs = append(objs, pod{name: m.Pod.Name, labels: map[string]string{"app": "vllm"}}.object())
	}
	catalog, err := policy.BuiltinCatalog(policy.DefaultSetPoints(), policy.DefaultUnknownSaturation)
	if err != nil {
		b.Fatal(err)
	}
	inf, err := podselect.NewInformers(fake.NewClientset(objs...), nil)
	if err != nil {
		b.Fatal(err)
	}
	sel := podselect.New(podselect.Options{Port: 8000, Path: "/metrics", Scheme: "http", IdleTimeout: time.Minute,
		Serves: func(m string) bool { return catalog.Lookup(m) != nil }}, inf.Pods(), clk)
	if err := inf.Start(ctx); err != nil {
		b.Fatal(err)
	}
	pm, err := provider.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	prov := provider.New(provider.Options{MaxAge: 45 * time.Second}, provider.StaticCatalog{C: catalog}, sel, src, clk, pm)
	selector := labels.SelectorFromSet(labels.Set{"app": "vllm"})
	info := cmprovider.ExternalMetricInfo{Metric: policy.MetricSaturation}
	var slowest time.Duration // the slowest request of the batch
	request := func() {
		t := time.Now()
		defer func() { slowest = max(slowest, time.Since(t)) }()
		list, err := prov.GetExternalMetric(ctx, "llm", selector, info)
		if err != nil {
			b.Fatal(err)
		}
		if got := list.Items[0].MetricLabels["pods"]; got != "1000" {
			b.Fatalf("pods = %s", got)
		}
	}
	request()
	const batch = 16
	var outside, during time.Duration
	var nOutside, nDuring int
	var maxDuring, maxOutside time.Duration
	window := time.Duration(0) // the last refresh's length
	for b.Loop() {
		// Outside: back to back for as long as the last refresh took (at
		// least a batch), so that both kinds sample the machine over as
		// long a time.
		slowest = 0
		t0 := time.Now()
		for n := 0; n < batch || time.Since(t0) < window; n++ {
			request()
			nOutside++
		}
		outside += time.Since(t0)
		maxOutside = max(maxOutside, slowest)
		clk.Step(DefaultCachePeriod)
		slowest = 0
		t1 := time.Now()
		request() // starts the refresh
		done := make(chan struct{})
		go func() { src.refreshing.Wait(); close(done) }()
		n := 1
	loop:
		for {
			select {
			case <-done:
				if n >= batch {
					break loop
				}
			default:
			}
			request()
			n++
		}
		window = time.Since(t1)
		during += window
		nDuring += n
		maxDuring = max(maxDuring, slowest)
	}
	mOutside := float64(outside.Nanoseconds()) / float64(nOutside)
	mDuring := float64(during.Nanoseconds()) / float64(nDuring)
	b.ReportMetric(mOutside, "ns/req-outside")
	b.ReportMetric(mDuring, "ns/req-during")
	b.ReportMetric(float64(nDuring)/float64(b.N), "req-during/op")
	b.ReportMetric(float64(maxDuring.Nanoseconds()), "ns/req-during-max")
	b.ReportMetric(float64(maxOutside.Nanoseconds()), "ns/req-outside-max")
	b.ReportMetric(mDuring/mOutside, "ratio-during/outside")
}

// refreshFixture is a Source over an httptest Prometheus whose series query
// answers, for a namespace of 1,000 vLLM pods, the engine series of the real
// V1 dump, three scrapes 15 s apart each (2.8 MB of JSON), with the 1,000
// pods as members, and its fake clock.
func refreshFixture(b *testing.B) (*Source, []podselect.Member, *clocktesting.FakeClock) {
	const n = 1000
	body, err := os.ReadFile(filepath.Join("..", "..", "testdata", "samples", "vllm_v1-0.10-nvcr25.09_single-engine.prom"))
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(1767225600, 0)
	read := map[string]bool{}
	for _, f := range signals.NewExtractorWith(signals.ExtractOptions{}).Families() {
		read[f.Name] = true
	}
	var one []*model.SampleStream
	for _, s := range streamsOf(b, body, "x", now) {
		if read[string(s.Metric[model.MetricNameLabel])] {
			one = append(one, s)
		}
	}
	var all model.Matrix
	members := make([]podselect.Member, n)
	for i := range n {
		pod := fmt.Sprintf("vllm-%04d", i)
		members[i] = podselect.Member{Pod: types.NamespacedName{Namespace: "llm", Name: pod}, UID: types.UID(pod), Counted: true}
		for _, s := range one {
			m := s.Metric.Clone()
			m["namespace"], m["pod"], m["job"] = "llm", model.LabelValue(pod), "llm/vllm"
			var vs []model.SamplePair
			for k := 2; k >= 0; k-- {
				vs = append(vs, model.SamplePair{Timestamp: model.TimeFromUnixNano(now.Add(-time.Duration(k) * 15 * time.Second).UnixNano()), Value: s.Values[0].Value})
			}
			all = append(all, &model.SampleStream{Metric: m, Values: vs})
		}
	}
	answer := envelope(b, all)
	prom := newFakeProm(b, func(q string) (int, string) {
		if queryKind(q) == "series" {
			return http.StatusOK, answer
		}
		return http.StatusOK, emptyVector
	})
	catalog, err := policy.BuiltinCatalog(policy.DefaultSetPoints(), policy.DefaultUnknownSaturation)
	if err != nil {
		b.Fatal(err)
	}
	api, err := NewClient(ClientOptions{URL: prom.srv.URL, MaxResponseBytes: DefaultMaxResponseBytes})
	if err != nil {
		b.Fatal(err)
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(now)
	src, err := New(Options{URL: prom.srv.URL, Timeout: 30 * time.Second, CachePeriod: DefaultCachePeriod, ScrapeInterval: 15 * time.Second,
		MaxAge: 45 * time.Second}, api, catalog, Queries{}, clk, m)
	if err != nil {
		b.Fatal(err)
	}
	return src, members, clk
}
