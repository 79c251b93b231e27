package provider

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/saturation-adapter/saturation-adapter/pkg/discovery"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
	"github.com/saturation-adapter/saturation-adapter/pkg/selfmetrics"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"

	"github.com/prometheus/client_golang/prometheus"
)

// cachedReadings serves one stored result per pod key, as the scraper's store does.
type cachedReadings map[types.NamespacedName]*scrape.Result

func (c cachedReadings) Latest(key types.NamespacedName) (*scrape.Result, bool) {
	r, ok := c[key]
	return r, ok
}
func (c cachedReadings) ScrapeAll(context.Context, []scrape.Target, bool) {}

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
		cache[discovery.Key(p)] = &scrape.Result{Reading: &reading, Fusion: signals.Fuse(&reading, signals.DefaultTargets()), Time: clk.Now()}
	}
	// Pods of another deployment in the namespace, which the selector must skip.
	for i := range n {
		objs = append(objs, makePod(podSpec{name: fmt.Sprintf("other-%04d", i), labels: map[string]string{"app": "other"}}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf := discovery.NewInformers(fake.NewClientset(objs...), nil)
	if err := inf.Start(ctx); err != nil {
		b.Fatal(err)
	}
	m, err := selfmetrics.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	disc := discovery.New(discovery.Options{Port: 8000, Path: "/metrics", Scheme: "http", IdleTimeout: time.Minute, Metrics: Catalog()}, inf.Pods(), nil, clk)
	p := New(Options{UnknownSaturation: 1, MaxAge: 6 * time.Second}, disc, cache, clk, m)
	sel := labels.SelectorFromSet(labels.Set{"app": "vllm"})
	info := cmprovider.ExternalMetricInfo{Metric: MetricSaturation}
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
