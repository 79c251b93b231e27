package provider

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// Issue 8: a policy with a gateway input adds the gateway's queue to the demand,
// and a pool of zero pods is a state, not an error: it serves the gateway's
// demand so that an HPA at zero replicas wakes on the first waiting request.
func TestGatewayInput(t *testing.T) {
	gw := &signals.GatewayInput{Selector: "app=epp", Match: map[string]string{"inference_pool": "qwen3-32b-pool"}}
	catalog, err := signals.NewCatalog(append(signals.BuiltinPolicies(signals.DefaultSetPoints(), 1, 0),
		signals.Policy{Name: "gw-demand", Kind: signals.KindDemand, UnknownSaturation: 1, Terms: signals.DefaultSetPoints().Terms(), Gateway: gw},
		signals.Policy{Name: "gw-mean", Kind: signals.KindMean, UnknownSaturation: 1, Terms: signals.DefaultSetPoints().Terms(), Gateway: gw},
		signals.Policy{Name: "gw-typo", Kind: signals.KindDemand, UnknownSaturation: 1, Terms: signals.DefaultSetPoints().Terms(),
			Gateway: &signals.GatewayInput{Selector: "app=epq", Match: map[string]string{"inference_pool": "x"}}},
	)...)
	if err != nil {
		t.Fatal(err)
	}
	epp := newEngine(t, sample(t, "hazards/NC-04-epp.prom")) // 352 + 28 held for qwen3-32b-pool
	f := newFixtureCatalog(t, catalog,
		podSpec{name: "epp-0", labels: map[string]string{"app": "epp"}, engine: epp},
		podSpec{name: "vllm-a", labels: map[string]string{"app": "vllm"}, engine: newEngine(t, "vllm:num_requests_waiting{engine=\"0\"} 4\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.78\n")},
		podSpec{name: "vllm-b", labels: map[string]string{"app": "vllm"}, engine: newEngine(t, "vllm:num_requests_waiting{engine=\"0\"} 5\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.79\n")},
	)
	// Engines just under their set points (0.975 and 1.0) while 380 wait in the
	// gateway: 380 / 5 = 76 more replicas' worth (hazard NC-04).
	if got := f.value(t, "llm", "gw-demand", "app=vllm"); got != "77975m" {
		t.Errorf("gw-demand = %s, want 77975m (1.975 + 76)", got)
	}
	if got := f.value(t, "llm", "gw-mean", "app=vllm"); got != "38988m" {
		t.Errorf("gw-mean = %s, want 38988m ((1.975 + 76) / 2, rounded)", got)
	}
	r := f.get(t, "llm", "gw-demand", "app=vllm")
	if got := r.list.Items[0].MetricLabels["gateway_queue"]; got != "380" {
		t.Errorf("metricLabels gateway_queue = %q, want 380", got)
	}
	if got := f.value(t, "llm", signals.MetricDemandReplicas, "app=vllm"); got != "1975m" {
		t.Errorf("the engine-only llm_demand_replicas = %s, want 1975m: it does not see the gateway", got)
	}
	// Zero pods: the gateway's demand alone.
	if got := f.value(t, "llm", "gw-demand", "app=vllm-zero"); got != "76" {
		t.Errorf("zero pods: gw-demand = %s, want 76", got)
	}
	if got := f.value(t, "llm", "gw-mean", "app=vllm-zero"); got != "76" {
		t.Errorf("zero pods: gw-mean = %s, want 76 (the HPA computes ceil(value / target) at zero replicas)", got)
	}
	// Zero pods without a gateway input stays an error, and says why.
	r = f.get(t, "llm", signals.MetricDemandReplicas, "app=vllm-zero")
	if r.code != http.StatusNotFound || !strings.Contains(r.status.Message, "scale from zero needs a policy with a gateway input") {
		t.Errorf("zero pods, no gateway: HTTP %d %q", r.code, r.status.Message)
	}
	// No gateway pod: an error naming the input, never 0.
	r = f.get(t, "llm", "gw-typo", "app=vllm")
	if r.code != http.StatusServiceUnavailable || !strings.Contains(r.status.Message, "gateway input (pods app=epq in namespace llm)") {
		t.Errorf("no gateway pod: HTTP %d %q", r.code, r.status.Message)
	}
	// The gateway's metrics failing: unknown, an error.
	epp.set(http.StatusInternalServerError, "")
	f.clock.Step(10 * time.Second)
	r = f.get(t, "llm", "gw-demand", "app=vllm-zero")
	if r.code != http.StatusServiceUnavailable || !strings.Contains(r.status.Message, "the gateway's queue is unknown") {
		t.Errorf("gateway failing: HTTP %d %q", r.code, r.status.Message)
	}
}
