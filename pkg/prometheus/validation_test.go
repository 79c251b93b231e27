package prometheus

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// Issue 20: duplicate series of one pod that disagree (2 and 200: a stale
// job beside a live one) were folded to their maximum with no warning, so
// 200 was served. By the one duplicate rule (signals.DuplicateOutcome) the
// series with the newest sample wins; the older is dropped and counted.
func TestStaleDuplicateJobDropped(t *testing.T) {
	counted := map[signals.DuplicateOutcome]int{}
	live := stream(vllm("vllm:num_requests_waiting", "a", "job", "llm/vllm"), t0.Add(-30*time.Second), 2, t0.Add(-15*time.Second), 2, t0, 2)
	stale := stream(vllm("vllm:num_requests_waiting", "a", "job", "llm/vllm-old"), t0.Add(-30*time.Second), 200, t0.Add(-20*time.Second), 200)
	kv := stream(vllm("vllm:kv_cache_usage_perc", "a"), t0.Add(-30*time.Second), 0.1, t0.Add(-15*time.Second), 0.1, t0, 0.1)
	prom := newFakeProm(t, ok(map[string]string{"series": matrix(t, live, stale, kv)}))
	f := newFixture(t, prom, fixtureOptions{opts: Options{Count: func(r *signals.Reading) {
		for o, n := range r.Duplicates {
			counted[o] += n
		}
	}}}, pod{name: "a", labels: map[string]string{"app": "x"}})
	if got := f.value(t, "llm", policy.MetricQueueDepth, "app=x"); got != "2" {
		t.Errorf("llm_num_requests_waiting = %s, want 2: the stale job's older sample is not the pod's queue", got)
	}
	if counted[signals.DuplicateOlder] < 1 {
		t.Errorf("duplicates counted %v, want the older one counted", counted)
	}
	// Both jobs live, at the same time, disagreeing: their maximum, counted.
	both := stream(vllm("vllm:num_requests_waiting", "a", "job", "llm/vllm-old"), t0.Add(-15*time.Second), 200, t0, 200)
	prom.set(ok(map[string]string{"series": matrix(t, live, both, kv)}))
	f.step(DefaultCachePeriod)
	if got := f.value(t, "llm", policy.MetricQueueDepth, "app=x"); got != "200" {
		t.Errorf("equally new disagreeing duplicates: %s, want their maximum 200", got)
	}
	if counted[signals.DuplicateDisagree] < 1 {
		t.Errorf("duplicates counted %v, want the disagreement counted", counted)
	}
}

// Issue 20: the gateway's values read through Prometheus follow the engines'
// rules too: NaN, negative, absurd or infinite is a 503 naming the rejection,
// never a queue of 0.
func TestGatewayInvalidThroughPrometheus(t *testing.T) {
	gw := &policy.GatewayInput{Selector: "app=epp", Match: map[string]string{"inference_pool": "pool"}}
	catalog, err := policy.NewCatalog(append(policy.BuiltinPolicies(policy.DefaultSetPoints(), 1, 0),
		policy.Policy{Name: "gw-demand", Kind: policy.KindDemand, UnknownSaturation: 1, Terms: policy.DefaultSetPoints().Terms(), Gateway: gw})...)
	if err != nil {
		t.Fatal(err)
	}
	engine := func() []*model.SampleStream {
		return streamsOf(t, []byte("vllm:num_requests_waiting{engine=\"0\"} 1\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.1\n"), "vllm-a", t0)
	}
	gateway := func(v string) []*model.SampleStream {
		return streamsOf(t, []byte("inference_extension_flow_control_queue_size{inference_pool=\"pool\"} "+v+"\n"+
			"inference_extension_flow_control_pool_saturation{inference_pool=\"pool\"} 1\n"), "epp-0", t0)
	}
	prom := newFakeProm(t, ok(map[string]string{"series": matrix(t, append(engine(), gateway("50")...)...)}))
	f := newFixture(t, prom, fixtureOptions{catalog: catalog},
		pod{name: "epp-0", labels: map[string]string{"app": "epp"}}, pod{name: "vllm-a", labels: map[string]string{"app": "vllm"}})
	if got := f.value(t, "llm", "gw-demand", "app=vllm"); got != "10200m" {
		t.Fatalf("gw-demand = %s, want 10200m (0.2 + 50 / 5)", got)
	}
	for _, tc := range []struct{ value, reason string }{{"NaN", "nan"}, {"-3", "negative"}, {"1e300", "above_range"}, {"+Inf", "inf"}} {
		prom.set(ok(map[string]string{"series": matrix(t, append(engine(), gateway(tc.value)...)...)}))
		f.step(DefaultCachePeriod)
		r := f.get(t, "llm", "gw-demand", "app=vllm")
		if r.code != http.StatusServiceUnavailable || !strings.Contains(r.status.Message, "rejected ("+tc.reason+")") {
			t.Errorf("gateway queue %s through Prometheus: HTTP %d %q, want 503 naming the rejection", tc.value, r.code, r.status.Message)
		}
	}
}
