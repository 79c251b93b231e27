package config

import (
	"strings"
	"testing"

	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

// FuzzParse: any file is either rejected with a message or gives a catalog
// whose configured names are DNS-1123 labels; never a panic.
func FuzzParse(f *testing.F) {
	f.Add(Example())
	f.Add([]byte("apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies:\n- {name: a, kind: signal, signal: running}\n"))
	f.Add([]byte("apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies:\n- {name: b, kind: demand, queueCap: 5, terms: [{kind: ttft, slo: 1ms, quantile: 0.5, window: 1s, maxRatio: 1}], gateway: {selector: a=b, match: {x: y}}}\n"))
	f.Add([]byte("apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies: []\nprometheus: {matchers: '{cluster=\"a\"}', series: {'vllm:num_requests_waiting': 'x{y=~\"z.*\"}'}}\n"))
	f.Add([]byte("apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies:\n- {name: n, kind: mean, terms: [{kind: queueDepth, setPoint: .nan}]}\n"))
	f.Add([]byte("apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies:\n- {name: n, kind: mean, queueCap: 1e400, terms: [{kind: ttft, quantile: 1e-400}]}\n"))
	f.Add([]byte("apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies:\n- {name: t, kind: mean, terms: [{kind: demandRate, setPoint: 12, window: 30s}], trend: {window: 2m, lookahead: 4m}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatal("an empty error message")
			}
			return
		}
		c, err := file.Catalog(builtin())
		if err != nil {
			return
		}
		for _, p := range c.Policies()[len(builtin()):] {
			if !policy.ValidName(p.Name) {
				t.Fatalf("accepted policy name %q", p.Name)
			}
		}
	})
}
