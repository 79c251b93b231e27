package policy

import (
	"strings"
	"testing"

	"github.com/saturation-adapter/saturation-adapter/internal/testfixture"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// The gateways of 2026 (issue 19, item 3), on the hazards' bodies.

// gatewayReading reads a gateway body as the server does for a catalog with
// this input.
func gatewayReading(t *testing.T, g *GatewayInput, body []byte) *signals.Reading {
	t.Helper()
	c, err := NewCatalog(Policy{Name: "p", Kind: KindDemand, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(), Gateway: g})
	if err != nil {
		t.Fatal(err)
	}
	r, err := signals.NewExtractorWith(signals.ExtractOptions{GatewayMetrics: c.Needs().GatewayMetrics}).Extract(body)
	if err != nil {
		t.Fatal(err)
	}
	return &r
}

// NC-20: llm-d-router v0.10 exports each queue series twice; the default
// input counts it once (212 + 35 = 247), works with only the new names, and
// says when stale endpoints stopped dispatch.
func TestLLMDRouterEndpointPicker(t *testing.T) {
	g := &GatewayInput{Metric: signals.DefaultGatewayQueueMetric, Match: map[string]string{"inference_pool": "qwen-pool"}}
	both := testfixture.Read(t, "testdata/hazards/NC-20-epp.prom")
	var newOnly []string
	for line := range strings.Lines(string(both)) {
		if !strings.Contains(line, "inference_extension_") && !strings.Contains(line, "inference_pool_") {
			newOnly = append(newOnly, line)
		}
	}
	for name, body := range map[string][]byte{"both names": both, "llm_d_epp names only": []byte(strings.Join(newOnly, ""))} {
		r := gatewayReading(t, g, body)
		if q, err := g.Queue(r); err != nil || q != 247 {
			t.Errorf("%s: queue %g, %v; want 247 (212 + 35, once)", name, q, err)
		}
		if notes := g.Notes(r); len(notes) != 0 {
			t.Errorf("%s: notes %q, want none (no stale endpoint)", name, notes)
		}
	}
	stale := gatewayReading(t, g, testfixture.Read(t, "testdata/hazards/NC-20-epp-stale.prom"))
	if q, err := g.Queue(stale); err != nil || q != 281 {
		t.Errorf("stale: queue %g, %v; want 281", q, err)
	}
	if notes := g.Notes(stale); len(notes) != 1 || !strings.Contains(notes[0], "4 endpoints saturated because their metrics are missing or stale") {
		t.Errorf("stale: notes %q, want the 4 stale endpoints said", notes)
	}
	// Pool saturation is a ratio per stage, never a queue (nor a sum of stages).
	bad := Policy{Name: "p", Kind: KindDemand, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(),
		Gateway: &GatewayInput{Metric: "llm_d_epp_flow_control_pool_saturation", Selector: "app=epp"}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "not a queue") {
		t.Errorf("pool saturation as the gateway metric: %v, want it refused", err)
	}
}

// NC-25: the Dynamo frontend's backlog is its router queue (37 decode
// requests held), never the queued count (58, which includes requests
// prefilling on the workers); without the router's gauge, no queue: 0, said.
func TestDynamoFrontend(t *testing.T) {
	g := &GatewayInput{Metric: DynamoRouterQueueMetric, Selector: "app=dynamo-frontend", Match: map[string]string{"worker_type": "decode"}}
	frontend := testfixture.Read(t, "testdata/hazards/NC-25-frontend.prom")
	r := gatewayReading(t, g, frontend)
	if q, err := g.Queue(r); err != nil || q != 37 || len(g.Notes(r)) != 0 {
		t.Errorf("router queue %g, %v, notes %q; want 37", q, err, g.Notes(r))
	}
	var off []string
	for line := range strings.Lines(string(frontend)) {
		if !strings.Contains(line, DynamoRouterQueueMetric) {
			off = append(off, line)
		}
	}
	r = gatewayReading(t, g, []byte(strings.Join(off, "")))
	if q, err := g.Queue(r); err != nil || q != 0 {
		t.Errorf("router queueing off: %g, %v; want 0", q, err)
	}
	if notes := g.Notes(r); len(notes) != 1 || !strings.Contains(notes[0], "router does not queue") {
		t.Errorf("router queueing off: notes %q, want it said", notes)
	}
	bad := Policy{Name: "p", Kind: KindDemand, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(),
		Gateway: &GatewayInput{Metric: DynamoQueuedMetric, Selector: "app=dynamo-frontend"}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), DynamoRouterQueueMetric) {
		t.Errorf("the frontend's queued count as the gateway metric: %v, want it refused, naming the router queue", err)
	}
}

// NC-26: two namespaces' endpoint pickers with the same pool name and no
// namespace label: each input reads its own namespace's pods (the provider
// finds them in the input's namespace, else the HPA's), so team-a reads 40
// and team-b 3, never 43.
func TestGatewayDemandByNamespace(t *testing.T) {
	g := &GatewayInput{Metric: signals.DefaultGatewayQueueMetric, Match: map[string]string{"inference_pool": "qwen-pool"}}
	for team, want := range map[string]float64{"a": 40, "b": 3} {
		r := gatewayReading(t, g, testfixture.Read(t, "testdata/hazards/NC-26-epp-team-"+team+".prom"))
		if q, err := g.Queue(r); err != nil || q != want {
			t.Errorf("team-%s: %g, %v; want %g", team, q, err, want)
		}
	}
}
