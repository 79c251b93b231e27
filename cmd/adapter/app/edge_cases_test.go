package app

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestExplainMirroredGatewayFamilies: llm-d's endpoint picker exports
// every flow-control queue series twice, under llm_d_epp_flow_control_queue_size
// and the deprecated inference_extension_flow_control_queue_size (same value,
// llm-d-router pkg/epp/metrics IncFlowControlQueueSize). A policy that follows
// the deprecation and reads llm_d_epp_flow_control_queue_size counts all 40
// held requests, yet explain always also reads the default family and warns
// that "the gateway holds 40 requests ... that qwen-demand does not count": a
// false alarm telling the operator the HPA misses demand it sees. The server's
// advisor reads only the catalog's metrics and says nothing.
func TestExplainMirroredGatewayFamilies(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "policies.yaml")
	epp := filepath.Join(dir, "epp.prom")
	files := map[string]string{
		cfg: `apiVersion: saturation-adapter.io/v1alpha1
kind: PolicyConfig
policies:
- name: qwen-demand
  kind: demand
  terms: [{kind: queueDepth, setPoint: 5}]
  gateway: {selector: app=epp, metric: llm_d_epp_flow_control_queue_size, match: {inference_pool: qwen}}
`,
		epp: `llm_d_epp_flow_control_queue_size{fairness_id="a",inference_pool="qwen",priority="0"} 40
inference_extension_flow_control_queue_size{fairness_id="a",inference_pool="qwen",priority="0"} 40
`,
	}
	for f, body := range files {
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var ex Explanation
	out := runExplain(t, "--config="+cfg, "--policy=qwen-demand", "--gateway="+epp)
	if err := json.Unmarshal(out, &ex); err != nil {
		t.Fatalf("explain: %s", out)
	}
	if ex.Pool.Value == nil || *ex.Pool.Value != 8 {
		t.Fatalf("control: qwen-demand = %+v, want 8 (40 / 5)", ex.Pool)
	}
	if len(ex.Pool.Warnings) != 0 {
		t.Errorf("every held request is counted (40 of 40), yet explain warns: %q", ex.Pool.Warnings)
	}
}
