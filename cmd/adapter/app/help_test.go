package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/saturation-adapter/saturation-adapter/internal/shdoc"
	"github.com/saturation-adapter/saturation-adapter/internal/testfixture"
)

// The examples `adapter explain --help` shows run as written, in a directory
// holding the files they name (captured bodies standing in for the pods').
func TestExplainHelpExamples(t *testing.T) {
	dir := t.TempDir()
	files := map[string][]byte{
		"a.prom":      testfixture.Sample(t, "vllm_v1-0.10-nvcr25.09_single-engine.prom"),
		"a1.prom":     testfixture.Sample(t, "vllm_v1-0.10-nvcr25.09_single-engine.prom"),
		"a2.prom":     testfixture.Sample(t, "llm-d-inference-sim_v0.10.2_load.prom"),
		"a3.prom":     testfixture.Sample(t, "llm-d-inference-sim_v0.10.2_load.prom"),
		"a4.prom":     testfixture.Sample(t, "llm-d-inference-sim_v0.10.2_load.prom"),
		"b.prom":      testfixture.Sample(t, "sglang_v0.4-docs.prom"),
		"epp.prom":    testfixture.Hazard(t, "NC-04-epp.prom"),
		"answer.json": testfixture.Read(t, "testdata/prometheus/vllm-emulator_range.json"),
		"policies.yaml": []byte(`apiVersion: saturation-adapter.io/v1alpha1
kind: PolicyConfig
policies:
- name: chat-saturation
  kind: mean
  terms:
  - {kind: queueDepth, setPoint: 4, maxRatio: 10}
  - {kind: kvCacheUsage, setPoint: 0.8}
`),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	cmd := NewCommand(t.Context())
	explain, _, err := cmd.Find([]string{"explain"})
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, line := range shdoc.Commands(explain.Example) {
		if !strings.HasPrefix(line, "adapter explain ") {
			continue // the curl that fetched a.prom
		}
		words, err := shdoc.Words(line)
		if err != nil {
			t.Fatal(err)
		}
		out, errOut, err := runRoot(words[1:]...)
		if err != nil || out == "" {
			t.Errorf("%s: %v\nstdout %q\nstderr %s", line, err, out, errOut)
		}
		ran++
	}
	if ran != 4 {
		t.Errorf("ran %d examples, want the 4 of explain --help", ran)
	}
}
