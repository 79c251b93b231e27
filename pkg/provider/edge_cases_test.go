package provider

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

func reviewGatewayCatalog(t *testing.T) *policy.Catalog {
	t.Helper()
	gw := &policy.GatewayInput{Selector: "app=epp", Match: map[string]string{"inference_pool": "qwen3-32b-pool"}}
	c, err := policy.NewCatalog(append(policy.BuiltinPolicies(policy.DefaultSetPoints(), 1, 0),
		policy.Policy{Name: "gw-demand", Kind: policy.KindDemand, UnknownSaturation: 1, Terms: policy.DefaultSetPoints().Terms(), Gateway: gw})...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const reviewIdleVLLM = "vllm:num_requests_waiting{engine=\"0\"} 0\nvllm:num_requests_running{engine=\"0\"} 0\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.0012\n"

// TestGatewayIdleFlowsCollected: the endpoint picker garbage-collects an
// idle flow after FlowGCTimeout (5 min by default) and deletes its series
// (llm-d-router pkg/epp/metrics DeleteFlowControlFlowSeries, called by the flow
// registry's gcFlows): an idle gateway exposes no
// inference_extension_flow_control_queue_size series at all, only its other
// metrics. The extractor then fails the gateway pod's scrape ("no LLM engine
// saturation metrics found") and the input answers 503, so an idle pool behind
// a healthy gateway is served an error instead of 0: the HPA holds its replicas
// and never scales to zero once the flows are collected (the README's own
// scale-down, 600 s stabilization, outlasts the 5 min GC).
func TestGatewayIdleFlowsCollected(t *testing.T) {
	epp := newEngine(t, "# HELP llm_d_epp_flow_control_pool_saturation Pool saturation.\n# TYPE llm_d_epp_flow_control_pool_saturation gauge\n"+
		"llm_d_epp_flow_control_pool_saturation{inference_pool=\"qwen3-32b-pool\"} 0\n"+
		"# HELP inference_pool_ready_pods Ready pods.\n# TYPE inference_pool_ready_pods gauge\ninference_pool_ready_pods{name=\"qwen3-32b-pool\"} 1\n")
	f := newFixtureCatalog(t, reviewGatewayCatalog(t),
		podSpec{name: "epp-0", labels: map[string]string{"app": "epp"}, engine: epp},
		podSpec{name: "vllm-a", labels: map[string]string{"app": "vllm"}, engine: newEngine(t, reviewIdleVLLM)},
	)
	r := f.get(t, "llm", "gw-demand", "app=vllm")
	if r.code != http.StatusOK {
		t.Fatalf("idle pool, gateway up with no live flow: HTTP %d %q, want 200 with value 0 (nothing waits)", r.code, r.status.Message)
	}
	if got := r.list.Items[0].Value.String(); got != "0" {
		t.Errorf("idle pool: gw-demand = %s, want 0", got)
	}
}

// TestGatewayPodInEnginePool: the HPA's selector (part-of=qwen, a Helm
// release label) matches the engine pods and the endpoint picker's pod alike.
// The gateway pod is pooled as an engine: its reading (dialect "gateway") has
// no term, so it counts at the unknown-pod saturation, 1: an idle pool with an
// empty gateway queue is served demand 1 (one replica forever, never zero),
// where the adapter knows the pod is the policy's gateway.
func TestGatewayPodInEnginePool(t *testing.T) {
	epp := newEngine(t, "inference_extension_flow_control_queue_size{fairness_id=\"a\",inference_pool=\"qwen3-32b-pool\",priority=\"0\"} 0\n")
	f := newFixtureCatalog(t, reviewGatewayCatalog(t),
		podSpec{name: "epp-0", labels: map[string]string{"app": "epp", "part-of": "qwen"}, engine: epp},
		podSpec{name: "vllm-a", labels: map[string]string{"app": "vllm", "part-of": "qwen"}, engine: newEngine(t, reviewIdleVLLM)},
	)
	if got := f.value(t, "llm", "gw-demand", "app=vllm"); got != "0" {
		t.Fatalf("control: engines only: gw-demand = %s, want 0", got)
	}
	if got := f.value(t, "llm", "gw-demand", "part-of=qwen"); got != "0" {
		t.Errorf("idle engine + the gateway's own pod in the selector, nothing queued: gw-demand = %s, want 0 (the gateway pod is no engine)", got)
	}
}

// TestGatewayMeanPerPod: a mean policy with a gateway input is served per
// pod too (custom.metrics.k8s.io, PerPod is true for every mean policy), but
// the per-pod path evaluates without the gateway: with 380 requests held by
// the endpoint picker, two pods at 0.975 and 1.0 are served as such, and an
// HPA of type Pods on gw-mean (averageValue 1) sees "at target" while the
// External answer for the same policy and pods is 38.988 (hazard NC-04, the
// very case the gateway input exists for). The gateway's demand must be in the
// per-pod values (e.g. shared over the pods) or the policy refused per pod.
func TestGatewayMeanPerPod(t *testing.T) {
	gw := &policy.GatewayInput{Selector: "app=epp", Match: map[string]string{"inference_pool": "qwen3-32b-pool"}}
	c, err := policy.NewCatalog(append(policy.BuiltinPolicies(policy.DefaultSetPoints(), 1, 0),
		policy.Policy{Name: "gw-mean", Kind: policy.KindMean, UnknownSaturation: 1, Terms: policy.DefaultSetPoints().Terms(), Gateway: gw})...)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureCatalog(t, c,
		podSpec{name: "epp-0", labels: map[string]string{"app": "epp"}, engine: newEngine(t, sample(t, "hazards/NC-04-epp.prom"))},
		podSpec{name: "vllm-a", labels: map[string]string{"app": "vllm"}, engine: newEngine(t, "vllm:num_requests_waiting{engine=\"0\"} 4\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.78\n")},
		podSpec{name: "vllm-b", labels: map[string]string{"app": "vllm"}, engine: newEngine(t, "vllm:num_requests_waiting{engine=\"0\"} 5\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.79\n")},
	)
	if got := f.value(t, "llm", "gw-mean", "app=vllm"); got != "38988m" {
		t.Fatalf("control: External gw-mean = %s, want 38988m", got)
	}
	resp, err := http.Get(f.srv.URL + "/apis/custom.metrics.k8s.io/v1beta2/namespaces/llm/pods/*/gw-mean?labelSelector=" + url.QueryEscape("app=vllm"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return // refusing a gateway policy per pod is a correct answer
	}
	var list struct {
		Items []struct {
			Value string `json:"value"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	var vals []string
	for _, it := range list.Items {
		vals = append(vals, it.Value)
	}
	if len(vals) != 2 || vals[0] == "975m" || vals[0] == "1" {
		t.Errorf("per-pod gw-mean = %v: the engines' own saturation, the 380 held requests dropped (External: 38988m)", vals)
	}
}

// TestGatewayWakeRoundedAway: a batch policy with queueSetPoint 5000 (a
// deep-queue workload) at zero pods, one request held by the gateway: the
// pool's demand is 1/5000 = 0.0002, which MilliQuantity rounds to "0", so the
// HPA at zero replicas computes ceil(0) = 0 and never wakes for it (nor for two
// requests: 0.0004). At zero pods any waiting request must be served as at
// least 1m: the HPA then computes 1 replica.
func TestGatewayWakeRoundedAway(t *testing.T) {
	gw := &policy.GatewayInput{Selector: "app=epp", Match: map[string]string{"inference_pool": "batch"}, QueueSetPoint: 5000}
	c, err := policy.NewCatalog(append(policy.BuiltinPolicies(policy.DefaultSetPoints(), 1, 0),
		policy.Policy{Name: "batch-demand", Kind: policy.KindDemand, UnknownSaturation: 1, Terms: []policy.Term{{Kind: policy.TermQueueDepth, SetPoint: 5000}}, Gateway: gw})...)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureCatalog(t, c,
		podSpec{name: "epp-0", labels: map[string]string{"app": "epp"}, engine: newEngine(t, "inference_extension_flow_control_queue_size{fairness_id=\"a\",inference_pool=\"batch\",priority=\"0\"} 1\n")},
	)
	if got := f.value(t, "llm", "batch-demand", "app=batch-engine"); got == "0" {
		t.Errorf("zero pods, 1 request held: batch-demand = %s, want at least 1m (the HPA computes ceil(value / target) from zero)", got)
	}
}
