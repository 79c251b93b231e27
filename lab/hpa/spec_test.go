package hpa

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestParseDefaults(t *testing.T) {
	h := mustParse(t, `apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: vllm}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: vllm}
  maxReplicas: 8
  behavior:
    scaleUp: {stabilizationWindowSeconds: 30}
    scaleDown: {tolerance: 50m}
`)
	if *h.Spec.MinReplicas != 1 {
		t.Errorf("minReplicas = %d, want the default 1", *h.Spec.MinReplicas)
	}
	u := int32(80)
	wantMetrics := []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
		Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: &u},
	}}}
	if diff := cmp.Diff(wantMetrics, h.Spec.Metrics); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	thirty, zeroTol := int32(30), resource.MustParse("50m")
	maxP := autoscalingv2.MaxChangePolicySelect
	want := &autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleUp: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &thirty, SelectPolicy: &maxP, Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15}, {Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
		}},
		ScaleDown: &autoscalingv2.HPAScalingRules{SelectPolicy: &maxP, Tolerance: &zeroTol, Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
		}},
	}
	if diff := cmp.Diff(want, h.Spec.Behavior, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("behavior (-want +got):\n%s", diff)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"not YAML", "{", []string{"decoding HorizontalPodAutoscaler"}},
		{"unknown field", hpaYAML(1, 2, "  maxReplica: 3\n"), []string{`unknown field "maxReplica"`}},
		{"wrong kind", strings.Replace(hpaYAML(1, 2, ""), "HorizontalPodAutoscaler", "Deployment", 1), []string{"want apiVersion autoscaling/v2"}},
		{"v1", strings.Replace(hpaYAML(1, 2, ""), "autoscaling/v2", "autoscaling/v1", 1), []string{"want apiVersion autoscaling/v2"}},
		{"every error at once", hpaYAML(5, 2, `  metrics:
  - type: External
    external:
      metric: {name: ""}
      target: {type: Value, value: "1", averageValue: "-1"}
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 0}}
  - type: Pods
  behavior:
    scaleUp: {selectPolicy: Fastest, stabilizationWindowSeconds: 4000, policies: [{type: Pods, value: 0, periodSeconds: 0}]}
    scaleDown: {policies: [], tolerance: "-1"}
`), []string{
			"spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`",
			"spec.metrics[0].external.metric.name: Required value",
			"spec.metrics[0].external.target.averageValue: Invalid value: \"-1\": must be positive",
			"spec.metrics[0].external.target.value: Forbidden",
			"spec.metrics[1].resource.target.averageUtilization: Invalid value: 0",
			"spec.metrics[2].pods: Required value",
			"spec.behavior.scaleUp.stabilizationWindowSeconds: Invalid value: 4000",
			`spec.behavior.scaleUp.selectPolicy: Unsupported value: "Fastest"`,
			"spec.behavior.scaleUp.policies[0].value: Invalid value: 0",
			"spec.behavior.scaleUp.policies[0].periodSeconds: Invalid value: 0",
			"spec.behavior.scaleDown.policies: Required value",
			"spec.behavior.scaleDown.tolerance: Invalid value",
		}},
		{"scale to zero needs an Object or External metric", hpaYAML(0, 2, `  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}
`), []string{"spec.metrics: Forbidden: must specify at least one Object or External metric to support scaling to zero replicas"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

// FuzzParse: any input either fails with an error or yields an HPA that New
// accepts and that survives a reconcile without panicking.
func FuzzParse(f *testing.F) {
	f.Add([]byte(hpaYAML(1, 8, externalValue)))
	f.Add([]byte(hpaYAML(0, 8, externalAverage+"  behavior:\n    scaleUp: {stabilizationWindowSeconds: 30}\n")))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := Parse(data)
		if err != nil {
			return
		}
		c, err := New(h, DefaultOptions())
		if err != nil {
			t.Fatalf("Parse accepted an HPA that New rejects: %v", err)
		}
		m := &fakeMetrics{external: map[string][]int64{}, raw: samples("a", 1000), resource: samples("a", 1000), object: 1000}
		for _, s := range h.Spec.Metrics {
			if s.External != nil {
				m.external[s.External.Metric.Name] = []int64{1500}
			}
		}
		res := c.Sync(t0, Scale{SpecReplicas: 1, StatusReplicas: 1}, pods(readyPod("a")), m)
		if res.DesiredReplicas < 0 {
			t.Fatalf("negative replicas %d", res.DesiredReplicas)
		}
	})
}
