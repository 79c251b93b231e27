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

// OnStore: the results never change.
func (c cachedReadings) OnStore(func(types.NamespacedName, types.UID)) {}

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
	request := benchRequest(b, 1000, extra, metric)
	b.ReportAllocs()
	for b.Loop() {
		request()
	}
}

// BenchmarkGetExternalMetricPoolSize answers, interleaved in one run, the
// llm_saturation request over a 10-pod and over a 1,000-pod pool (each of
// twice as many pods in its namespace, cached readings of the real vLLM V1
// dump), without and with a TTFT p95 guardrail. It reports each pool's
// request cost (ns/req-10, ns/req-1000) and their ratio (ratio-1000/10):
// target (issue 22) at most 2, a request's cost must not grow with its pool.
func BenchmarkGetExternalMetricPoolSize(b *testing.B) {
	guard := policy.Policy{Name: "chat", Kind: policy.KindMean, UnknownSaturation: 1, Terms: append(policy.DefaultSetPoints().Terms(),
		policy.Term{Kind: policy.TermTTFT, SetPoint: 2, Quantile: 0.95, Window: time.Minute})}
	for _, tc := range []struct {
		name   string
		extra  *policy.Policy
		metric string
	}{{"saturation", nil, policy.MetricSaturation}, {"guardrail", &guard, "chat"}} {
		b.Run(tc.name, func(b *testing.B) {
			small := benchRequest(b, 10, tc.extra, tc.metric)
			large := benchRequest(b, 1000, tc.extra, tc.metric)
			// Each op is a batch of each, timed apart: both sizes see the same
			// machine (a shared 2-core VM's speed varies by tens of percent).
			const batch = 8
			var tSmall, tLarge time.Duration
			for b.Loop() {
				t0 := time.Now()
				for range batch {
					small()
				}
				t1 := time.Now()
				for range batch {
					large()
				}
				tSmall, tLarge = tSmall+t1.Sub(t0), tLarge+time.Since(t1)
			}
			n := float64(b.N * batch)
			b.ReportMetric(float64(tSmall.Nanoseconds())/n, "ns/req-10")
			b.ReportMetric(float64(tLarge.Nanoseconds())/n, "ns/req-1000")
			b.ReportMetric(float64(tLarge)/float64(tSmall), "ratio-1000/10")
		})
	}
}

// benchRequest returns one External metric request (metric over a pool of n
// pods selected by app=vllm, among 2n pods of namespace llm) answered from
// cached readings: two scrapes of the real vLLM V1 dump 15 s apart, the newer
// with 40 more first tokens. The built-in policies are served, and extra when
// set.
func benchRequest(b *testing.B, n int, extra *policy.Policy, metric string) func() {
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
	b.Cleanup(cancel)
	pools := startPools(b, ctx, catalog, clk, objs...)
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	p := New(Options{MaxAge: 6 * time.Second}, StaticCatalog{catalog}, pools, Scraped(cache, 0), clk, m)
	sel := labels.SelectorFromSet(labels.Set{"app": "vllm"})
	info := cmprovider.ExternalMetricInfo{Metric: metric}
	want := strconv.Itoa(n)
	return func() {
		before := p.fromAggs.Load()
		list, err := p.GetExternalMetric(ctx, "llm", sel, info)
		if err != nil {
			b.Fatal(err)
		}
		if got := list.Items[0].MetricLabels["pods"]; got != want {
			b.Fatalf("pods = %s, want %s", got, want)
		}
		if p.fromAggs.Load() == before {
			b.Fatal("the answer was folded, not read from the pool's aggregate")
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
