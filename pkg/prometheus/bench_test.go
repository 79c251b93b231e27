package prometheus

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// BenchmarkNamespaceRefresh1000Pods is one cache period's work for a
// namespace of 1,000 vLLM pods: the engine series of the real V1 dump for each
// pod, three scrapes of each in the range, queried from an httptest Prometheus,
// decoded by client_golang, grouped by pod and built into the histories of one
// request's 1,000 members. Later requests in the period reuse them.
func BenchmarkNamespaceRefresh1000Pods(b *testing.B) {
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
	b.SetBytes(int64(len(answer)))
	b.ReportAllocs()
	for b.Loop() {
		clk.Step(DefaultCachePeriod)
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
}
