package advisor

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/saturation-adapter/saturation-adapter/internal/metricdocs"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

type staticCatalog struct{ c *policy.Catalog }

func (s staticCatalog) Catalog() *policy.Catalog { return s.c }

func catalog(t *testing.T) *policy.Catalog {
	t.Helper()
	c, err := policy.NewCatalog(append(policy.BuiltinPolicies(policy.DefaultSetPoints(), 1, 0),
		policy.Policy{Name: "gw-demand", Kind: policy.KindDemand, UnknownSaturation: 1, Terms: policy.DefaultSetPoints().Terms(),
			Gateway: &policy.GatewayInput{Selector: "app=epp", Match: map[string]string{"inference_pool": "pool-a"}}})...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func hpa(name string, min int32, current int32, metric string, target autoscalingv2.MetricTargetType) *autoscalingv2.HorizontalPodAutoscaler {
	mt := autoscalingv2.MetricTarget{Type: target}
	q := resource.MustParse("1")
	if target == autoscalingv2.ValueMetricType {
		mt.Value = &q
	} else {
		mt.AverageValue = &q
	}
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MinReplicas: ptr.To(min), MaxReplicas: 8, Metrics: []autoscalingv2.MetricSpec{{
			Type: autoscalingv2.ExternalMetricSourceType,
			External: &autoscalingv2.ExternalMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: metric, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "vllm"}}},
				Target: mt,
			},
		}}},
		Status: autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: current},
	}
}

func newAdvisor(t *testing.T) (*Advisor, *record.FakeRecorder, *Metrics) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rec := record.NewFakeRecorder(10)
	return New(rec, staticCatalog{catalog(t)}, m, nil), rec, m
}

func events(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// minReplicas 0 on a metric computed from pods: a Warning Event, once, and the
// gauge; on a gateway policy none.
func TestScaleToZeroWithoutGateway(t *testing.T) {
	a, rec, m := newAdvisor(t)
	h := a.HPAHandler()
	h.OnAdd(hpa("pods-only", 0, 0, "llm_saturation", autoscalingv2.ValueMetricType), false)
	h.OnUpdate(nil, hpa("pods-only", 0, 0, "llm_saturation", autoscalingv2.ValueMetricType))
	got := events(rec)
	if len(got) != 1 || !strings.Contains(got[0], "Warning NoZeroCapableInput minReplicas is 0 but llm_saturation is computed from the pods only") {
		t.Errorf("events %q, want one NoZeroCapableInput warning", got)
	}
	if v := testutil.ToFloat64(m.Warnings.WithLabelValues("llm", "pods-only", string(ReasonNoZeroCapableInput))); v != 1 {
		t.Errorf("gauge %g, want 1", v)
	}
	h.OnAdd(hpa("gateway", 0, 0, "gw-demand", autoscalingv2.AverageValueMetricType), false)
	h.OnAdd(hpa("min-one", 1, 1, "llm_saturation", autoscalingv2.ValueMetricType), false)
	if got := events(rec); len(got) != 0 {
		t.Errorf("events %q for an HPA with a gateway input or minReplicas 1", got)
	}
	// Fixed: the gauge drops; deleted: its series go.
	h.OnUpdate(nil, hpa("pods-only", 1, 1, "llm_saturation", autoscalingv2.ValueMetricType))
	if v := testutil.ToFloat64(m.Warnings.WithLabelValues("llm", "pods-only", string(ReasonNoZeroCapableInput))); v != 0 {
		t.Errorf("gauge after the fix %g, want 0", v)
	}
	h.OnDelete(hpa("pods-only", 1, 1, "llm_saturation", autoscalingv2.ValueMetricType))
	if n := testutil.CollectAndCount(m.Warnings); n != 2 {
		t.Errorf("%d warning series after the delete, want the 2 other HPAs' (0)", n)
	}
}

// A pool with demand and no Ready pod, read with a Value target by an HPA that has
// replicas: a Warning (NC-08); with AverageValue, or at zero replicas, none.
func TestValueTargetWithoutReadyPods(t *testing.T) {
	a, rec, _ := newAdvisor(t)
	h := a.HPAHandler()
	h.OnAdd(hpa("value", 1, 3, "gw-demand", autoscalingv2.ValueMetricType), false)
	h.OnAdd(hpa("average", 1, 3, "gw-demand", autoscalingv2.AverageValueMetricType), false)
	events(rec)
	v := 12.0
	a.Answered("llm", "gw-demand", labels.SelectorFromSet(labels.Set{"app": "vllm"}), policy.Pool{Pods: 0, Value: &v})
	got := events(rec)
	if len(got) != 1 || !strings.Contains(got[0], "Warning ValueTargetNoReadyPods gw-demand has demand 12 but no Ready pod") {
		t.Errorf("events %q, want one ValueTargetNoReadyPods warning for the Value HPA", got)
	}
	// Ready pods again: no warning, and no repeat.
	a.Answered("llm", "gw-demand", labels.SelectorFromSet(labels.Set{"app": "vllm"}), policy.Pool{Pods: 2, Value: &v})
	if got := events(rec); len(got) != 0 {
		t.Errorf("events %q with Ready pods", got)
	}
}

// Gateway series holding requests for a pool no policy matches are counted and
// logged; the matched pool's are not.
func TestGatewaySeen(t *testing.T) {
	a, _, m := newAdvisor(t)
	r := &signals.Reading{Gateway: []signals.GatewaySeries{
		{Metric: signals.DefaultGatewayQueueMetric, Labels: map[string]string{"inference_pool": "pool-a"}, Value: 30},
		{Metric: signals.DefaultGatewayQueueMetric, Labels: map[string]string{"inference_pool": "pool-b"}, Value: 7},
		{Metric: signals.DefaultGatewayQueueMetric, Labels: map[string]string{"inference_pool": "pool-c"}, Value: 0},
	}}
	a.GatewaySeen([]*signals.Reading{r})
	if v := testutil.ToFloat64(m.UnmatchedGatewaySeries); v != 1 {
		t.Errorf("unmatched series %g, want 1 (pool-b)", v)
	}
}

// The documented metric table documents these metrics.
func TestMetricsDocumented(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Reasons() {
		m.Warnings.WithLabelValues("ns", "h", string(r)).Set(1)
	}
	metricdocs.Check(t, reg, "../../", 2, "namespace", "hpa")
}

// Scale from zero in flight (issue 19): an HPA on a pool whose demand the
// adapter holds for a starting pod gets a Normal Event saying so, once per
// episode, whatever its target type.
func TestScaleFromZeroInFlightEvent(t *testing.T) {
	a, rec, _ := newAdvisor(t)
	h := a.HPAHandler()
	h.OnAdd(hpa("average", 0, 1, "gw-demand", autoscalingv2.AverageValueMetricType), false)
	events(rec)
	sel := labels.SelectorFromSet(labels.Set{"app": "vllm"})
	v := 1.0
	b := policy.Pool{Pods: 0, Value: &v, Starting: 1, InFlight: "scale-from-zero in flight: 1 pods starting, so the demand served is at least 1"}
	a.Answered("llm", "gw-demand", sel, b)
	a.Answered("llm", "gw-demand", sel, b)
	got := events(rec)
	if len(got) != 1 || !strings.Contains(got[0], "Normal ScaleUpInFlight scale-from-zero in flight") {
		t.Errorf("events %q, want one Normal ScaleUpInFlight event", got)
	}
	a.Answered("llm", "gw-demand", sel, policy.Pool{Pods: 1, Value: &v})
	a.Answered("llm", "gw-demand", sel, b)
	if got := events(rec); len(got) != 1 {
		t.Errorf("events %q, want one again for the next episode", got)
	}
}
