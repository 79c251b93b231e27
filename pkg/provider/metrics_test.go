package provider

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	"github.com/saturation-adapter/saturation-adapter/internal/metricdocs"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

// TestMetricsDocumented keeps the documented metric table and this package's
// metrics in step: names, types, labels and every value of a fixed label.
func TestMetricsDocumented(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Results() {
		m.request("llm_saturation", r)
	}
	m.served("llm", []string{"vllm"}, "llm_saturation", 1, policy.Pool{Pods: 2, Known: 1})
	// namespace, hpa and metric take the operator's names; the rest are fixed.
	metricdocs.Check(t, reg, "../../", 4, "namespace", "hpa", "metric")
}

// Requests through the real handlers leave this exposition: per-HPA series only
// for requests an HPA makes, request counts by catalog name, and no series
// labelled by request text.
func TestMetricsExposition(t *testing.T) {
	dp := newEngine(t, sample(t, "hazards/BC-06.prom")) // saturation 7.4
	f := newFixture(t,
		podSpec{name: "dp", labels: map[string]string{"app": "vllm"}, engine: dp},
		hpaSpec{name: "vllm", metric: "llm_saturation", selector: map[string]string{"app": "vllm"}},
	)
	f.value(t, "llm", "llm_saturation", "app=vllm")       // the HPA's request
	f.value(t, "llm", "llm_demand_replicas", "app=vllm")  // no HPA uses it: counted, not a served value
	f.get(t, "llm", "llm_saturation", "app=nothing-"+"x") // no pods
	f.get(t, "llm", "made_up_"+"metric", "app=vllm")      // not in the catalog
	const want = `
# HELP saturation_adapter_pool_pods Pods behind the last External answer to a HorizontalPodAutoscaler, by state (counted, unknown, held, and by engine state).
# TYPE saturation_adapter_pool_pods gauge
saturation_adapter_pool_pods{hpa="vllm",metric="llm_saturation",namespace="llm",state="clipped"} 0
saturation_adapter_pool_pods{hpa="vllm",metric="llm_saturation",namespace="llm",state="counted"} 1
saturation_adapter_pool_pods{hpa="vllm",metric="llm_saturation",namespace="llm",state="frozen"} 0
saturation_adapter_pool_pods{hpa="vllm",metric="llm_saturation",namespace="llm",state="held"} 0
saturation_adapter_pool_pods{hpa="vllm",metric="llm_saturation",namespace="llm",state="sleeping"} 0
saturation_adapter_pool_pods{hpa="vllm",metric="llm_saturation",namespace="llm",state="unknown"} 0
saturation_adapter_pool_pods{hpa="vllm",metric="llm_saturation",namespace="llm",state="wedged"} 0
# HELP saturation_adapter_requests_total External and per-pod metric requests, by metric and result (ok, not_found, no_pods, no_data, error).
# TYPE saturation_adapter_requests_total counter
saturation_adapter_requests_total{metric="llm_demand_replicas",result="ok"} 1
saturation_adapter_requests_total{metric="llm_saturation",result="no_pods"} 1
saturation_adapter_requests_total{metric="llm_saturation",result="ok"} 1
saturation_adapter_requests_total{metric="unknown",result="not_found"} 1
# HELP saturation_adapter_served_value Last External metric value served to a HorizontalPodAutoscaler, by its namespace and name and the metric.
# TYPE saturation_adapter_served_value gauge
saturation_adapter_served_value{hpa="vllm",metric="llm_saturation",namespace="llm"} 7.4
`
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want),
		"saturation_adapter_pool_pods", "saturation_adapter_requests_total", "saturation_adapter_served_value"); err != nil {
		t.Error(err)
	}
	f.metrics.ForgetHPA(types.NamespacedName{Namespace: "llm", Name: "vllm"})
	if n := testutil.CollectAndCount(f.metrics.ServedValue) + testutil.CollectAndCount(f.metrics.PoolPods); n != 0 {
		t.Errorf("%d series left after the HPA was forgotten", n)
	}
}
