package policy

// Edge cases of the idle-KV rule, the gateway
// input and their Prometheus path, found by review. Each test states the input, what was served
// and what is right.

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// TestIdleKVInvalidRunningOnOneEngine: a data-parallel pod whose rank 1
// holds 90 % of its KV cache while its running gauge is NaN (rejected), beside
// an idle rank 0 (running 0, KV 0.01). The fold's running is rank 0's alone (0),
// so idle() says "nothing runs" and the KV term counts 0: the pod is served as
// idle. The same rank alone in a pod keeps its KV term ("an engine that does
// not report running keeps its KV term"), so the rule must not fire when any
// engine's running is unknown.
func TestIdleKVInvalidRunningOnOneEngine(t *testing.T) {
	c := builtin(t, DefaultUnknownSaturation)
	body := "vllm:num_requests_waiting{engine=\"0\"} 0\nvllm:num_requests_running{engine=\"0\"} 0\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.01\n" +
		"vllm:num_requests_waiting{engine=\"1\"} 0\nvllm:num_requests_running{engine=\"1\"} NaN\nvllm:kv_cache_usage_perc{engine=\"1\"} 0.9\n"
	dp := pod{readings: []*signals.Reading{read(t, body, t0)}}
	alone := pod{readings: []*signals.Reading{read(t, "vllm:num_requests_waiting{engine=\"1\"} 0\nvllm:num_requests_running{engine=\"1\"} NaN\nvllm:kv_cache_usage_perc{engine=\"1\"} 0.9\n", t0)}}
	if p := poolOf(t, c, MetricDemandReplicas, t0, alone); p.Value == nil || !approx(*p.Value, 0.9/0.8) {
		t.Fatalf("control: rank 1 alone = %v, want 0.9/0.8 (its KV term kept)", deref(p.Value))
	}
	want := (0.01 + 0.9) / 2 / 0.8 // the pod's mean KV over its set point, as with running unknown
	if p := poolOf(t, c, MetricDemandReplicas, t0, dp); p.Value == nil || !approx(*p.Value, want) {
		t.Errorf("DP pod, rank 1 at KV 0.9 with an invalid running gauge: %s = %v, want %g (the idle rule hid rank 1's KV)",
			MetricDemandReplicas, deref(p.Value), want)
	}
}

// TestIdleKVInvalidWaiting: one engine, nothing running, its waiting
// gauge NaN (rejected: unknown, not 0), KV 0.9 (a P/D decode engine whose
// waiting requests hold blocks for incoming KV). idle() reads the absent queue
// as 0 and zeroes the KV term: served 0, a pod with unknown waiting and 90 % KV
// counted as idle. Unknown waiting must keep the KV term, as unknown running
// does.
func TestIdleKVInvalidWaiting(t *testing.T) {
	c := builtin(t, DefaultUnknownSaturation)
	p := pod{readings: []*signals.Reading{read(t, "vllm:num_requests_waiting{engine=\"0\"} NaN\nvllm:num_requests_running{engine=\"0\"} 0\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.9\n", t0)}}
	if got := poolOf(t, c, MetricDemandReplicas, t0, p); got.Value == nil || !approx(*got.Value, 0.9/0.8) {
		t.Errorf("waiting NaN, running 0, KV 0.9: %s = %v, want %g (KV kept while waiting is unknown)", MetricDemandReplicas, deref(got.Value), 0.9/0.8)
	}
}

// TestGatewayMatchLabelAbsent: the endpoint picker's queue series carry
// no inference_pool label at all (upstream GIE's flow_control_queue_size is
// labelled fairness_id and priority only, PR #1714), 50 requests held, and the
// input matches {inference_pool: qwen}. Queue answered 0 with no error: the HPA
// is served "nothing waits" and a pool at zero never wakes. A match label that
// no series of the metric carries is a configuration that cannot match, not an
// empty queue: it must be "no data" (ok false), as a missing metric is.
func TestGatewayMatchLabelAbsent(t *testing.T) {
	g := &GatewayInput{Metric: signals.DefaultGatewayQueueMetric, Match: map[string]string{"inference_pool": "qwen"}}
	e := signals.NewExtractorWith(signals.ExtractOptions{GatewayMetrics: []string{signals.DefaultGatewayQueueMetric}})
	r, err := e.Extract([]byte(signals.DefaultGatewayQueueMetric + "{fairness_id=\"a\",priority=\"0\"} 50\n"))
	if err != nil {
		t.Fatal(err)
	}
	if q, err := g.Queue(&r); err == nil {
		t.Errorf("no series has the label inference_pool, 50 held: Queue = %g with no error, want an error (unknown, never a silent 0)", q)
	}
}

// TestGatewayDuplicateMonitors: through Prometheus, the endpoint picker
// scraped by two monitors (a PodMonitor and the chart's ServiceMonitor) gives
// each queue series twice, differing only in job/endpoint. Engines' duplicates
// "count once" (README, BC-05); the gateway's are summed: 380 held requests
// read as 760, 76 replicas of demand served as 152.
func TestGatewayDuplicateMonitors(t *testing.T) {
	g := &GatewayInput{Metric: signals.DefaultGatewayQueueMetric, Match: map[string]string{"inference_pool": "qwen"}}
	e := signals.NewExtractorWith(signals.ExtractOptions{GatewayMetrics: []string{signals.DefaultGatewayQueueMetric}})
	series := func(job string) signals.Sample {
		return signals.Sample{Labels: labels.FromStrings("__name__", signals.DefaultGatewayQueueMetric, "namespace", "gw", "pod", "epp-0", "job", job,
			"fairness_id", "a", "priority", "0", "inference_pool", "qwen"), Value: 380, T: t0}
	}
	r, err := e.ExtractSamples([]signals.Sample{series("podmonitor/gw/epp"), series("serviceMonitor/gw/epp")})
	if err != nil {
		t.Fatal(err)
	}
	if q, err := g.Queue(&r); err != nil || q != 380 {
		t.Errorf("one series from two monitors: Queue = %g %v, want 380 (duplicates count once, as engines' do)", q, err)
	}
}

// TestGatewayDemandWithUnknownPods: two Ready pods, both wedged (or
// both stale: a scrape outage), while the gateway holds 380 requests for the
// pool. The pool has no known pod, so Pool() gives no value and the HPA gets a
// 503 and holds, though the data it has (the gateway's queue, and each
// unknown pod at the unknown-pod saturation) supports a scale-up to at least
// 2 + 76 replicas; at zero pods the same queue is served (76). Missing engine
// data should dampen, never cancel, what the gateway says.
func TestGatewayDemandWithUnknownPods(t *testing.T) {
	gw := &GatewayInput{Selector: "app=epp", Match: map[string]string{"inference_pool": "qwen"}}
	c, err := NewCatalog(Policy{Name: "gw-demand", Kind: KindDemand, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(), Gateway: gw})
	if err != nil {
		t.Fatal(err)
	}
	stale := pod{readings: []*signals.Reading{read(t, vllm(4, 8, 0.7), t0.Add(-time.Minute))}, why: "scrape failing: timed out"}
	b := c.Lookup("gw-demand").NewPool(t0, maxAge)
	b.Add(stale.history(), stale.why)
	b.Add(stale.history(), stale.why)
	b.AddGateway(380)
	if p := b.Pool(); p.Value == nil || *p.Value < 78 {
		t.Errorf("two unknown pods, 380 held in the gateway: demand %v, want at least 78 (2 × 1 + 380/5)", deref(p.Value))
	}
}

// TestGatewayQueueEvidence: an endpoint picker whose flows are all idle and
// collected exports no queue series but keeps its pool-saturation gauge: its
// queue is 0. Without any flow-control family, or with another queue-size
// family than the configured one, the queue is unknown, with the reason.
func TestGatewayQueueEvidence(t *testing.T) {
	e := signals.NewExtractorWith(signals.ExtractOptions{GatewayMetrics: []string{"llm_d_epp_flow_control_queue_size"}})
	g := &GatewayInput{Metric: "llm_d_epp_flow_control_queue_size", Match: map[string]string{"inference_pool": "qwen"}}
	cases := []struct {
		name, body, err string
	}{
		{"idle, flows collected", "llm_d_epp_flow_control_pool_saturation{inference_pool=\"qwen\"} 0\n", ""},
		{"upstream name only", "inference_extension_flow_control_queue_size{inference_pool=\"qwen\"} 12\n", "exports inference_extension_flow_control_queue_size, not llm_d_epp_flow_control_queue_size"},
		{"no flow control", "inference_pool_ready_pods{name=\"qwen\"} 2\nvllm:num_requests_waiting 0\n", "no llm_d_epp_flow_control_queue_size series and no flow-control family"},
	}
	for _, c := range cases {
		r, err := e.Extract([]byte(c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		q, err := g.Queue(&r)
		switch {
		case c.err == "" && (err != nil || q != 0):
			t.Errorf("%s: Queue = %g, %v; want 0, nil", c.name, q, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: Queue = %g, %v; want an error containing %q", c.name, q, err, c.err)
		}
	}
	if _, err := g.Queue(); err == nil {
		t.Error("no reading at all: Queue gave no error")
	}
	// Through Prometheus: the evidence family is asked for and read.
	if !slices.ContainsFunc(e.Families(), func(f signals.Family) bool { return f.Name == "llm_d_epp_flow_control_pool_saturation" }) {
		t.Errorf("Families() = %v: a time-series database is not asked for the pool-saturation gauge", e.Families())
	}
	r, err := e.ExtractSamples([]signals.Sample{{Labels: labels.FromStrings("__name__", "inference_extension_flow_control_pool_saturation",
		"namespace", "gw", "pod", "epp-0", "inference_pool", "qwen"), Value: 0.2, T: t0}})
	if err != nil {
		t.Fatal(err)
	}
	if q, err := g.Queue(&r); err != nil || q != 0 || !r.SampleTime.Equal(t0) {
		t.Errorf("Prometheus, flows collected: Queue = %g, %v, sample time %v; want 0, nil, %v", q, err, r.SampleTime, t0)
	}
}
