package selfmetrics

import (
	"os"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetricsDocumented keeps the README's table of the adapter's own metrics and
// the registered metrics in step, names and types.
func TestMetricsDocumented(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	// Touch every vector so that it is gathered.
	m.ScrapeDuration.WithLabelValues("success").Observe(0.01)
	m.ScrapeErrors.WithLabelValues("timeout").Inc()
	m.InvalidSamples.WithLabelValues("nan").Inc()
	m.PoolPods.WithLabelValues("llm", "llm_saturation", "app=vllm", "counted").Set(1)
	m.ServedValue.WithLabelValues("llm", "llm_saturation", "app=vllm").Set(1)
	m.Requests.WithLabelValues("llm_saturation", "ok").Inc()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range fams {
		got[f.GetName()] = map[string]string{"COUNTER": "counter", "GAUGE": "gauge", "HISTOGRAM": "histogram"}[f.GetType().String()]
		if f.GetHelp() == "" {
			t.Errorf("%s has no help text", f.GetName())
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for _, row := range regexp.MustCompile("(?m)^\\| `(saturation_adapter_[a-z_]+)` \\| ([a-z]+) \\|").FindAllStringSubmatch(string(readme), -1) {
		documented[row[1]] = row[2]
	}
	if diff := cmp.Diff(documented, got); diff != "" {
		t.Errorf("README's metric table and the registry differ (-README +registry):\n%s", diff)
	}
	if len(got) != 7 {
		t.Errorf("gathered %d families, want the 7 documented", len(got))
	}
}

func TestForgetSelector(t *testing.T) {
	m, err := New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"a", "b"} {
		m.ServedValue.WithLabelValues(ns, "llm_saturation", "app=vllm").Set(1)
		m.PoolPods.WithLabelValues(ns, "llm_saturation", "app=vllm", "counted").Set(1)
		m.PoolPods.WithLabelValues(ns, "llm_saturation", "app=vllm", "unknown").Set(0)
	}
	m.ForgetSelector("a", "app=vllm")
	if got := testutil.CollectAndCount(m.ServedValue); got != 1 {
		t.Errorf("served_value series = %d, want 1 (namespace b's)", got)
	}
	if got := testutil.CollectAndCount(m.PoolPods); got != 2 {
		t.Errorf("pool_pods series = %d, want 2 (namespace b's)", got)
	}
}
