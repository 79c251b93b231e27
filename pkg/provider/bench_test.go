package provider

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"

	"github.com/prometheus/client_golang/prometheus"
)

// cachedReadings serves one stored result per pod, as the scraper's store does.
type cachedReadings map[types.UID]*scrape.Result

func (c cachedReadings) Latest(uid types.UID) (*scrape.Result, bool) {
	r, ok := c[uid]
	return r, ok
}
func (c cachedReadings) Scrape(context.Context, []scrape.Target) {}

// BenchmarkGetExternalMetric1000Pods answers one llm_saturation request over a
// 1,000-pod selector from cached readings of the real vLLM V1 dump, through the
// informer cache's lister. Target (issue 2): ≤ 100 µs.
func BenchmarkGetExternalMetric1000Pods(b *testing.B) {
	const n = 1000
	reading, err := signals.NewExtractor().Extract([]byte(sample(b, "samples/vllm_v1-0.10-nvcr25.09_single-engine.prom")))
	if err != nil {
		b.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	var objs []runtime.Object
	cache := cachedReadings{}
	for i := range n {
		p := makePod(podSpec{name: fmt.Sprintf("vllm-%04d", i), labels: map[string]string{"app": "vllm", "pod-template-hash": "abc"}})
		objs = append(objs, p)
		r := reading
		r.Time = clk.Now()
		cache[p.UID] = &scrape.Result{History: signals.NewHistory(signals.HistoryOptions{}, &r), Time: clk.Now()}
	}
	// Pods of another deployment in the namespace, which the selector must skip.
	for i := range n {
		objs = append(objs, makePod(podSpec{name: fmt.Sprintf("other-%04d", i), labels: map[string]string{"app": "other"}}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	catalog := builtinCatalog(b)
	pools := startPools(b, ctx, catalog, clk, objs...)
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	p := New(Options{MaxAge: 6 * time.Second}, StaticCatalog{catalog}, pools, cache, clk, m)
	sel := labels.SelectorFromSet(labels.Set{"app": "vllm"})
	info := cmprovider.ExternalMetricInfo{Metric: signals.MetricSaturation}
	b.ReportAllocs()
	for b.Loop() {
		list, err := p.GetExternalMetric(ctx, "llm", sel, info)
		if err != nil {
			b.Fatal(err)
		}
		if list.Items[0].MetricLabels["pods"] != "1000" {
			b.Fatalf("pods = %s", list.Items[0].MetricLabels["pods"])
		}
	}
}
