package hpa

import (
	"errors"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at returns t0 plus sec seconds.
func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

const gpu corev1.ResourceName = "nvidia.com/gpu"

// pod returns a pod named name in phase with the given Ready status, started at
// start and Ready (or not) since readySince, requesting 1 GPU and 1 CPU.
func pod(name string, phase corev1.PodPhase, ready corev1.ConditionStatus, start, readySince time.Time) *corev1.Pod {
	st := metav1.NewTime(start)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "vllm",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				gpu: resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("1"),
			}},
		}}},
		Status: corev1.PodStatus{
			Phase:      phase,
			StartTime:  &st,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, LastTransitionTime: metav1.NewTime(readySince)}},
		},
	}
}

func readyPod(name string) *corev1.Pod {
	return pod(name, corev1.PodRunning, corev1.ConditionTrue, at(-3600), at(-3500))
}

func unreadyPod(name string) *corev1.Pod {
	return pod(name, corev1.PodRunning, corev1.ConditionFalse, at(-60), at(-60))
}

func pendingPod(name string) *corev1.Pod {
	return pod(name, corev1.PodPending, corev1.ConditionFalse, at(-10), at(-10))
}

func terminatingPod(name string) *corev1.Pod {
	p := readyPod(name)
	d := metav1.NewTime(at(-5))
	p.DeletionTimestamp = &d
	return p
}

func pods(ps ...*corev1.Pod) []*corev1.Pod { return ps }

// fakeMetrics answers every query from fixed values (milli-units).
type fakeMetrics struct {
	external    map[string][]int64
	externalErr map[string]error
	raw         PodMetricsInfo
	resource    PodMetricsInfo
	object      int64
	err         error // for raw, resource and object queries
}

func (f *fakeMetrics) copy(m PodMetricsInfo) PodMetricsInfo {
	out := PodMetricsInfo{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (f *fakeMetrics) GetResourceMetric(corev1.ResourceName, labels.Selector, string) (PodMetricsInfo, time.Time, error) {
	if f.err != nil {
		return nil, time.Time{}, f.err
	}
	return f.copy(f.resource), t0, nil
}

func (f *fakeMetrics) GetRawMetric(string, labels.Selector, labels.Selector) (PodMetricsInfo, time.Time, error) {
	if f.err != nil {
		return nil, time.Time{}, f.err
	}
	return f.copy(f.raw), t0, nil
}

func (f *fakeMetrics) GetObjectMetric(string, autoscalingv2.CrossVersionObjectReference, labels.Selector) (int64, time.Time, error) {
	return f.object, t0, f.err
}

func (f *fakeMetrics) GetExternalMetric(name string, _ labels.Selector) ([]int64, time.Time, error) {
	if err := f.externalErr[name]; err != nil {
		return nil, time.Time{}, err
	}
	v, ok := f.external[name]
	if !ok {
		return nil, time.Time{}, errors.New("no such metric")
	}
	return v, t0, nil
}

// samples builds PodMetricsInfo from name/value pairs taken at t0.
func samples(kv ...any) PodMetricsInfo {
	m := PodMetricsInfo{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = PodMetric{Value: int64(kv[i+1].(int)), Timestamp: t0, Window: 30 * time.Second}
	}
	return m
}

// mustParse parses an HPA manifest or fails the test.
func mustParse(t *testing.T, manifest string) *autoscalingv2.HorizontalPodAutoscaler {
	t.Helper()
	h, err := Parse([]byte(manifest))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return h
}

// mustNew returns a controller of manifest with default options.
func mustNew(t *testing.T, manifest string) *Controller {
	t.Helper()
	c, err := New(mustParse(t, manifest), DefaultOptions())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// hpaYAML is an HPA header with min/max replicas; append metrics and behavior.
func hpaYAML(minReplicas, maxReplicas int, rest string) string {
	return "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: vllm}\n" +
		"spec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: vllm}\n" +
		"  minReplicas: " + itoa(minReplicas) + "\n  maxReplicas: " + itoa(maxReplicas) + "\n" + rest
}

func itoa(i int) string { return resource.NewQuantity(int64(i), resource.DecimalSI).String() }

const externalValue = `  metrics:
  - type: External
    external:
      metric: {name: llm_saturation, selector: {matchLabels: {app: vllm}}}
      target: {type: Value, value: "1"}
`

const externalAverage = `  metrics:
  - type: External
    external:
      metric: {name: llm_demand_replicas}
      target: {type: AverageValue, averageValue: "1"}
`
