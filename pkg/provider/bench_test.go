package provider

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
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
	benchmark1000Pods(b, nil, policy.MetricSaturation)
}

// BenchmarkGetExternalMetric1000PodsGuardrail is the same request for a policy
// with a TTFT p95 guardrail beside the queue and KV terms: every pod's window
// of TTFT observations (two readings of the real dump, 15 s apart, with 40 new
// observations between them) is pooled into one quantile. Target (issue 14):
// at most 2 × BenchmarkGetExternalMetric1000Pods.
func BenchmarkGetExternalMetric1000PodsGuardrail(b *testing.B) {
	guard := policy.Policy{Name: "chat", Kind: policy.KindMean, UnknownSaturation: 1, Terms: append(policy.DefaultSetPoints().Terms(),
		policy.Term{Kind: policy.TermTTFT, SetPoint: 2, Quantile: 0.95, Window: time.Minute})}
	benchmark1000Pods(b, &guard, "chat")
}

func benchmark1000Pods(b *testing.B, extra *policy.Policy, metric string) {
	const n = 1000
	body := sample(b, "samples/vllm_v1-0.10-nvcr25.09_single-engine.prom")
	e := signals.NewExtractor()
	older, err := e.Extract([]byte(body))
	if err != nil {
		b.Fatal(err)
	}
	// The newer scrape: 40 more first tokens, all within 0.1 s.
	newer, err := e.Extract([]byte(strings.NewReplacer(
		`vllm:time_to_first_token_seconds_count{engine="0",model_name="Qwen/Qwen3-4B-Instruct-2507-FP8"} 6.0`,
		`vllm:time_to_first_token_seconds_count{engine="0",model_name="Qwen/Qwen3-4B-Instruct-2507-FP8"} 46.0`).Replace(bumpBuckets(body))))
	if err != nil {
		b.Fatal(err)
	}
	policies := policy.BuiltinPolicies(policy.DefaultSetPoints(), policy.DefaultUnknownSaturation, policy.DefaultHoldLastGood)
	if extra != nil {
		policies = append(policies, *extra)
	}
	catalog, err := policy.NewCatalog(policies...)
	if err != nil {
		b.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	hopts := history.HistoryOptions{Needs: catalog.Needs()}
	var objs []runtime.Object
	cache := cachedReadings{}
	for i := range n {
		p := makePod(podSpec{name: fmt.Sprintf("vllm-%04d", i), labels: map[string]string{"app": "vllm", "pod-template-hash": "abc"}})
		objs = append(objs, p)
		r0, r1 := older, newer
		r0.Time, r1.Time = clk.Now().Add(-15*time.Second), clk.Now()
		cache[p.UID] = &scrape.Result{History: history.NewHistory(hopts, &r0, &r1), Time: clk.Now()}
	}
	// Pods of another deployment in the namespace, which the selector must skip.
	for i := range n {
		objs = append(objs, makePod(podSpec{name: fmt.Sprintf("other-%04d", i), labels: map[string]string{"app": "other"}}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pools := startPools(b, ctx, catalog, clk, objs...)
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	p := New(Options{MaxAge: 6 * time.Second}, StaticCatalog{catalog}, pools, Scraped(cache, 0), clk, m)
	sel := labels.SelectorFromSet(labels.Set{"app": "vllm"})
	info := cmprovider.ExternalMetricInfo{Metric: metric}
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

// bumpBuckets adds 40 observations to every TTFT bucket of the real dump (all
// 40 in its first bucket, ≤ 1 ms... and so in every cumulative bucket after it).
func bumpBuckets(body string) string {
	var out strings.Builder
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, "vllm:time_to_first_token_seconds_bucket{"); ok {
			i := strings.LastIndexByte(rest, ' ')
			v, err := strconv.ParseFloat(rest[i+1:], 64)
			if err == nil {
				line = "vllm:time_to_first_token_seconds_bucket{" + rest[:i+1] + strconv.FormatFloat(v+40, 'f', 1, 64)
			}
		}
		out.WriteString(line)
		out.WriteByte('\n')
	}
	return out.String()
}
