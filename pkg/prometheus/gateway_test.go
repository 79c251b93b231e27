package prometheus

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

// A policy's gateway input reads the same through Prometheus as scraped: the
// endpoint picker's flow-control queue series, asked for with the engines'
// families (hazard NC-04's body: 352 + 28 held for qwen3-32b-pool), added to
// the engines' demand, and alone at zero pods.
func TestGatewayInput(t *testing.T) {
	gw := &policy.GatewayInput{Selector: "app=epp", Match: map[string]string{"inference_pool": "qwen3-32b-pool"}}
	catalog, err := policy.NewCatalog(append(policy.BuiltinPolicies(policy.DefaultSetPoints(), 1, 0),
		policy.Policy{Name: "gw-demand", Kind: policy.KindDemand, UnknownSaturation: 1, Terms: policy.DefaultSetPoints().Terms(), Gateway: gw})...)
	if err != nil {
		t.Fatal(err)
	}
	epp, err := os.ReadFile(filepath.Join("..", "..", "testdata", "hazards", "NC-04-epp.prom"))
	if err != nil {
		t.Fatal(err)
	}
	var streams []*model.SampleStream
	streams = append(streams, streamsOf(t, epp, "epp-0", t0)...)
	streams = append(streams, streamsOf(t, []byte("vllm:num_requests_waiting{engine=\"0\"} 4\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.78\n"), "vllm-a", t0)...)
	streams = append(streams, streamsOf(t, []byte("vllm:num_requests_waiting{engine=\"0\"} 5\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.79\n"), "vllm-b", t0)...)
	prom := newFakeProm(t, ok(map[string]string{"series": matrix(t, streams...)}))
	f := newFixture(t, prom, fixtureOptions{catalog: catalog},
		pod{name: "epp-0", labels: map[string]string{"app": "epp"}},
		pod{name: "vllm-a", labels: map[string]string{"app": "vllm"}},
		pod{name: "vllm-b", labels: map[string]string{"app": "vllm"}})
	if got := f.value(t, "llm", "gw-demand", "app=vllm"); got != "77975m" {
		t.Errorf("gw-demand = %s, want 77975m (1.975 + 380 / 5)", got)
	}
	if r := f.get(t, "llm", "gw-demand", "app=vllm"); r.code != http.StatusOK || r.list.Items[0].MetricLabels["gateway_queue"] != "380" {
		t.Errorf("gateway_queue label: HTTP %d %+v", r.code, r.list)
	}
	if got := f.value(t, "llm", "gw-demand", "app=vllm-zero"); got != "76" {
		t.Errorf("zero pods: gw-demand = %s, want 76", got)
	}
	// The series query asks for the gateway's family beside the engines'.
	prom.mu.Lock()
	defer prom.mu.Unlock()
	for _, q := range prom.queries {
		if queryKind(q) == "series" && !strings.Contains(q, "inference_extension_flow_control_queue_size") {
			t.Errorf("a series query does not ask for the gateway's queue: %s", q)
		}
	}
}

// NC-26 through Prometheus: the endpoint pickers' series carry no namespace
// label of their own, but the scrape target's namespace label (the source's
// --prometheus-namespace-label) ties each to its pod: team-a's HPA reads 40,
// team-b's 3, never the 43 of an answer grouped without it.
func TestGatewayDemandByNamespace(t *testing.T) {
	gw := &policy.GatewayInput{Selector: "app=epp", Match: map[string]string{"inference_pool": "qwen-pool"}}
	catalog, err := policy.NewCatalog(append(policy.BuiltinPolicies(policy.DefaultSetPoints(), 1, 0),
		policy.Policy{Name: "gw-demand", Kind: policy.KindDemand, UnknownSaturation: 1, Terms: policy.DefaultSetPoints().Terms(), Gateway: gw})...)
	if err != nil {
		t.Fatal(err)
	}
	var streams []*model.SampleStream
	for _, team := range []string{"a", "b"} {
		body, err := os.ReadFile(filepath.Join("..", "..", "testdata", "hazards", "NC-26-epp-team-"+team+".prom"))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range streamsOf(t, body, "epp-0", t0) {
			s.Metric["namespace"] = model.LabelValue("team-" + team)
			streams = append(streams, s)
		}
	}
	prom := newFakeProm(t, ok(map[string]string{"series": matrix(t, streams...)}))
	f := newFixture(t, prom, fixtureOptions{catalog: catalog},
		pod{ns: "team-a", name: "epp-0", labels: map[string]string{"app": "epp"}},
		pod{ns: "team-b", name: "epp-0", labels: map[string]string{"app": "epp"}})
	for ns, want := range map[string]string{"team-a": "8", "team-b": "600m"} {
		if got := f.value(t, ns, "gw-demand", "app=vllm"); got != want {
			t.Errorf("%s: gw-demand = %s, want %s (40 / 5 and 3 / 5)", ns, got, want)
		}
	}
}
