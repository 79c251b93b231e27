package app

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExplainConfigWarnings (issue 19, item 4): explain prints the policy
// file's warnings, as the server logs them when it loads the file (a queue
// set point at or above the admission cap, hazard NC-02: the queue term can
// never exceed its set point), and says that a role: policy cannot filter
// pods offline. The engine dump is NC-02's, scraped at the cap.
func TestExplainConfigWarnings(t *testing.T) {
	dir := t.TempDir()
	cfg := writePolicies(t, dir, `- name: capped
  kind: demand
  queueCap: 166
  terms: [{kind: queueDepth, setPoint: 200}]
- name: decode
  kind: demand
  role: decode
  terms: [{kind: queueDepth, setPoint: 5}]
`)
	body := filepath.Join("..", "..", "..", "testdata", "hazards", "NC-02-t0.prom")
	for _, tt := range []struct {
		policy string
		want   []string
	}{
		{"capped", []string{"policy capped: queue depth set point 200 is at or above the admission cap 166"}},
		{"decode", []string{"policy capped: queue depth set point 200", "policy decode counts only pods labelled llm-d.ai/role=decode; explain cannot read pod labels offline"}},
	} {
		t.Run(tt.policy, func(t *testing.T) {
			var ex Explanation
			out := runExplain(t, "--config="+cfg, "--policy="+tt.policy, body)
			if err := json.Unmarshal(out, &ex); err != nil {
				t.Fatalf("explain: %s", out)
			}
			if len(ex.Warnings) != len(tt.want) {
				t.Fatalf("warnings %q, want %d", ex.Warnings, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(ex.Warnings[i], w) {
					t.Errorf("warning %d = %q, want it to say %q", i, ex.Warnings[i], w)
				}
			}
			table := string(runExplain(t, "--config="+cfg, "--policy="+tt.policy, "-o", "table", body))
			if !strings.Contains(table, "config: warning: "+tt.want[0]) {
				t.Errorf("the table lacks %q:\n%s", tt.want[0], table)
			}
		})
	}
}

// TestExplainScaleFromZeroInFlight: explain --starting says "scale-from-zero
// in flight" and serves what the server would while the pod loads: the idle
// endpoint picker (llm-d-router, flows collected) holds nothing, the demand
// is the starting pod's 1.
func TestExplainScaleFromZeroInFlight(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "policies.yaml")
	epp := filepath.Join(dir, "epp.prom")
	for f, body := range map[string]string{
		cfg: "apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies:\n- name: qwen-demand\n  kind: demand\n" +
			"  terms: [{kind: queueDepth, setPoint: 5}]\n  gateway: {selector: app=epp, match: {inference_pool: qwen-pool}}\n",
		epp: "llm_d_epp_flow_control_pool_saturation{inference_pool=\"qwen-pool\",stage=\"effective\"} 0\n",
	} {
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var ex Explanation
	out := runExplain(t, "--config="+cfg, "--policy=qwen-demand", "--gateway="+epp, "--starting=1")
	if err := json.Unmarshal(out, &ex); err != nil {
		t.Fatalf("explain: %s", out)
	}
	if ex.Pool.Value == nil || *ex.Pool.Value != 1 || ex.Pool.Starting != 1 || !strings.HasPrefix(ex.Pool.InFlight, "scale-from-zero in flight") {
		t.Errorf("pool %+v, want 1 with scale-from-zero in flight", ex.Pool)
	}
	table := string(runExplain(t, "--config="+cfg, "--policy=qwen-demand", "--gateway="+epp, "--starting=1", "-o", "table"))
	if !strings.Contains(table, "pool qwen-demand: scale-from-zero in flight") {
		t.Errorf("the table does not say it:\n%s", table)
	}
}

// TestExplainPrometheusWithoutNamespace (hazard NC-26): an answer whose
// endpoint-picker series were grouped without the namespace label (team-a's
// 40 and team-b's 3 merged into 43) is refused, naming the labels, never
// read as one pool's 43.
func TestExplainPrometheusWithoutNamespace(t *testing.T) {
	out := string(runExplain(t, "--prometheus-response", filepath.Join("..", "..", "..", "testdata", "hazards", "NC-26-prometheus.json")))
	if !strings.HasPrefix(out, "error: ") || !strings.Contains(out, "no series with the labels namespace and pod") {
		t.Errorf("explain of an answer without namespace labels: %s", out)
	}
}
