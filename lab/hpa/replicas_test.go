package hpa

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestProposals checks the replica calculator's proposal (before stabilization
// and limits) for each metric type and readiness rule, on hand-computed cases.
// Values are milli-units, as the metrics APIs return them.
func TestProposals(t *testing.T) {
	const podsMetric = `  metrics:
  - type: Pods
    pods:
      metric: {name: llm_num_requests_waiting}
      target: {type: AverageValue, averageValue: "5"}
`
	const gpuUtil = `  metrics:
  - type: Resource
    resource:
      name: nvidia.com/gpu
      target: {type: Utilization, averageUtilization: 50}
`
	const gpuAverage = `  metrics:
  - type: Resource
    resource:
      name: nvidia.com/gpu
      target: {type: AverageValue, averageValue: 500m}
`
	const cpuUtil = `  metrics:
  - type: Resource
    resource:
      name: cpu
      target: {type: Utilization, averageUtilization: 50}
`
	const objectValue = `  metrics:
  - type: Object
    object:
      describedObject: {apiVersion: v1, kind: Service, name: gateway}
      metric: {name: queue}
      target: {type: Value, value: "10"}
`
	const tolerant = `  behavior:
    scaleUp: {tolerance: 500m}
    scaleDown: {tolerance: 50m}
`
	tests := []struct {
		name    string
		spec    string
		scale   Scale
		pods    []*corev1.Pod
		metrics fakeMetrics
		want    int32
		wantErr string
	}{
		// External Value: ceil(ratio × Ready pods), ratio = sum / target.
		{
			name: "external value: 2.5 × 2 ready pods", spec: externalValue,
			scale: Scale{SpecReplicas: 2, StatusReplicas: 2}, pods: pods(readyPod("a"), readyPod("b")),
			metrics: fakeMetrics{external: map[string][]int64{"llm_saturation": {2500}}}, want: 5,
		},
		{
			name: "external value: items are summed", spec: externalValue,
			scale: Scale{SpecReplicas: 2, StatusReplicas: 2}, pods: pods(readyPod("a"), readyPod("b")),
			metrics: fakeMetrics{external: map[string][]int64{"llm_saturation": {1000, 1000}}}, want: 4,
		},
		{
			name: "external value: multiplies by Ready pods only, not by spec replicas", spec: externalValue,
			scale: Scale{SpecReplicas: 3, StatusReplicas: 3}, pods: pods(readyPod("a"), readyPod("b"), unreadyPod("c")),
			metrics: fakeMetrics{external: map[string][]int64{"llm_saturation": {2000}}}, want: 4,
		},
		{
			name: "external value: within the default 10 % tolerance", spec: externalValue,
			scale: Scale{SpecReplicas: 3, StatusReplicas: 3}, pods: pods(readyPod("a"), readyPod("b"), readyPod("c")),
			metrics: fakeMetrics{external: map[string][]int64{"llm_saturation": {1100}}}, want: 3,
		},
		{
			name: "external value: just outside the tolerance", spec: externalValue,
			scale: Scale{SpecReplicas: 3, StatusReplicas: 3}, pods: pods(readyPod("a"), readyPod("b"), readyPod("c")),
			metrics: fakeMetrics{external: map[string][]int64{"llm_saturation": {1101}}}, want: 4,
		},
		{
			name: "external value: below target scales down", spec: externalValue,
			scale: Scale{SpecReplicas: 4, StatusReplicas: 4}, pods: pods(readyPod("a"), readyPod("b"), readyPod("c"), readyPod("d")),
			metrics: fakeMetrics{external: map[string][]int64{"llm_saturation": {400}}}, want: 2,
		},
		{
			name: "per-HPA scale-up tolerance 0.5 holds a ratio of 1.4", spec: externalValue + tolerant,
			scale: Scale{SpecReplicas: 2, StatusReplicas: 2}, pods: pods(readyPod("a"), readyPod("b")),
			metrics: fakeMetrics{external: map[string][]int64{"llm_saturation": {1400}}}, want: 2,
		},
		{
			name: "per-HPA scale-up tolerance 0.5 lets 1.6 through", spec: externalValue + tolerant,
			scale: Scale{SpecReplicas: 2, StatusReplicas: 2}, pods: pods(readyPod("a"), readyPod("b")),
			metrics: fakeMetrics{external: map[string][]int64{"llm_saturation": {1600}}}, want: 4,
		},
		{
			name: "per-HPA scale-down tolerance 0.05 lets 0.9 through", spec: externalValue + tolerant,
			scale: Scale{SpecReplicas: 10, StatusReplicas: 10}, pods: tenReady(),
			metrics: fakeMetrics{external: map[string][]int64{"llm_saturation": {900}}}, want: 9,
		},
		{
			name: "the default tolerance holds 0.9", spec: externalValue,
			scale: Scale{SpecReplicas: 10, StatusReplicas: 10}, pods: tenReady(),
			metrics: fakeMetrics{external: map[string][]int64{"llm_saturation": {900}}}, want: 10,
		},
		{
			name: "external value: no pods at all is an error", spec: externalValue,
			scale:   Scale{SpecReplicas: 2, StatusReplicas: 0},
			metrics: fakeMetrics{external: map[string][]int64{"llm_saturation": {2000}}}, wantErr: "no pods returned by selector",
		},
		{
			name: "external metric error", spec: externalValue,
			scale: Scale{SpecReplicas: 2, StatusReplicas: 2}, pods: pods(readyPod("a"), readyPod("b")),
			metrics: fakeMetrics{externalErr: map[string]error{"llm_saturation": errors.New("503 no fresh data")}}, wantErr: "503 no fresh data",
		},

		// External AverageValue: ratio = sum / (target × status replicas); proposal ceil(sum / target).
		{
			name: "external average: ceil(12 / 5)", spec: strings.Replace(externalAverage, `averageValue: "1"`, `averageValue: "5"`, 1),
			scale: Scale{SpecReplicas: 2, StatusReplicas: 2}, pods: pods(readyPod("a"), readyPod("b")),
			metrics: fakeMetrics{external: map[string][]int64{"llm_demand_replicas": {12000}}}, want: 3,
		},
		{
			name: "external average: tolerance divides by status replicas (starting pods count)", spec: externalAverage,
			scale: Scale{SpecReplicas: 4, StatusReplicas: 4}, pods: pods(readyPod("a"), readyPod("b"), unreadyPod("c"), unreadyPod("d")),
			metrics: fakeMetrics{external: map[string][]int64{"llm_demand_replicas": {4300}}}, want: 4, // 4.3 / 4 = 1.075
		},
		{
			name: "external average: scales down to ceil(sum)", spec: externalAverage,
			scale: Scale{SpecReplicas: 6, StatusReplicas: 6}, pods: pods(readyPod("a")),
			metrics: fakeMetrics{external: map[string][]int64{"llm_demand_replicas": {2100}}}, want: 3,
		},

		// Object Value: like External Value.
		{
			name: "object value", spec: objectValue,
			scale: Scale{SpecReplicas: 1, StatusReplicas: 1}, pods: pods(readyPod("a")),
			metrics: fakeMetrics{object: 35000}, want: 4,
		},

		// Pods metrics (calcPlainMetricReplicas): the integer mean against the target.
		{
			name: "pods: mean 10 / target 5 over 2 ready pods", spec: podsMetric,
			scale: Scale{SpecReplicas: 2, StatusReplicas: 2}, pods: pods(readyPod("a"), readyPod("b")),
			metrics: fakeMetrics{raw: samples("a", 10000, "b", 10000)}, want: 4,
		},
		{
			name: "pods: a missing pod counts 0 in a scale-up", spec: podsMetric,
			scale: Scale{SpecReplicas: 3, StatusReplicas: 3}, pods: pods(readyPod("a"), readyPod("b"), readyPod("c")),
			// ratio 2; with c at 0: 20000/3 = 6666 -> 1.3332 -> ceil(1.3332 × 3) = 4
			metrics: fakeMetrics{raw: samples("a", 10000, "b", 10000)}, want: 4,
		},
		{
			name: "pods: a missing pod counts at the target in a scale-down", spec: podsMetric,
			scale: Scale{SpecReplicas: 3, StatusReplicas: 3}, pods: pods(readyPod("a"), readyPod("b"), readyPod("c")),
			// ratio 0.2; with c at 5000: 7000/3 = 2333 -> 0.4666 -> ceil(1.3998) = 2
			metrics: fakeMetrics{raw: samples("a", 1000, "b", 1000)}, want: 2,
		},
		{
			name: "pods: a pending pod counts 0 in a scale-up, and the change falls within tolerance", spec: podsMetric,
			scale: Scale{SpecReplicas: 2, StatusReplicas: 2}, pods: pods(readyPod("a"), pendingPod("b")),
			// ratio 2; with b at 0: 10000/2 = 5000 -> 1.0 -> within tolerance: keep 2
			metrics: fakeMetrics{raw: samples("a", 10000)}, want: 2,
		},
		{
			name: "pods: a pending pod is left out of a scale-down", spec: podsMetric,
			scale: Scale{SpecReplicas: 4, StatusReplicas: 4}, pods: pods(readyPod("a"), readyPod("b"), pendingPod("c"), pendingPod("d")),
			// ratio 0.2 over a and b only: ceil(0.2 × 2) = 1
			metrics: fakeMetrics{raw: samples("a", 1000, "b", 1000)}, want: 1,
		},
		{
			name: "pods: missing pods that flip the direction keep the current count", spec: podsMetric,
			scale: Scale{SpecReplicas: 3, StatusReplicas: 3}, pods: pods(readyPod("a"), readyPod("b"), readyPod("c")),
			// ratio 1.2 (6000); c at 0: 12000/3 = 4000 -> 0.8: direction flips
			metrics: fakeMetrics{raw: samples("a", 6000, "b", 6000)}, want: 3,
		},
		{
			name: "pods: terminating pods are ignored", spec: podsMetric,
			scale: Scale{SpecReplicas: 2, StatusReplicas: 2}, pods: pods(readyPod("a"), terminatingPod("b")),
			metrics: fakeMetrics{raw: samples("a", 10000, "b", 0)}, want: 2,
		},
		{
			name: "pods: not-ready pods with samples count for non-cpu metrics", spec: podsMetric,
			scale: Scale{SpecReplicas: 2, StatusReplicas: 2}, pods: pods(readyPod("a"), unreadyPod("b")),
			// the Ready condition matters for cpu only: mean (10000+0)/2 = 5000 -> within tolerance
			metrics: fakeMetrics{raw: samples("a", 10000, "b", 0)}, want: 2,
		},
		{
			name: "pods: no samples at all", spec: podsMetric,
			scale: Scale{SpecReplicas: 2, StatusReplicas: 2}, pods: pods(pendingPod("a")),
			metrics: fakeMetrics{raw: samples()}, wantErr: "did not receive metrics",
		},

		// Resource utilization: sum(usage) × 100 / sum(requests), truncated.
		{
			name: "gpu utilization 80 % against 50 %", spec: gpuUtil,
			scale: Scale{SpecReplicas: 2, StatusReplicas: 2}, pods: pods(readyPod("a"), readyPod("b")),
			metrics: fakeMetrics{resource: samples("a", 900, "b", 700)}, want: 4,
		},
		{
			name: "gpu utilization: a starting pod with a sample of 0 pulls the mean down", spec: gpuUtil,
			scale: Scale{SpecReplicas: 3, StatusReplicas: 3}, pods: pods(readyPod("a"), readyPod("b"), unreadyPod("c")),
			// (1000+1000+0) × 100 / 3000 = 66 -> ratio 1.32 -> ceil(3.96) = 4
			metrics: fakeMetrics{resource: samples("a", 1000, "b", 1000, "c", 0)}, want: 4,
		},
		{
			name: "gpu utilization: a missing pod at 100 % of its request flips a scale-down", spec: gpuUtil,
			scale: Scale{SpecReplicas: 2, StatusReplicas: 2}, pods: pods(readyPod("a"), readyPod("b")),
			// 10 % -> 0.2; b at 1000: 1100 × 100 / 2000 = 55 -> 1.1: direction flips, keep 2
			metrics: fakeMetrics{resource: samples("a", 100)}, want: 2,
		},
		{
			name: "gpu utilization truncates to whole percent", spec: gpuUtil,
			scale: Scale{SpecReplicas: 1, StatusReplicas: 1}, pods: pods(readyPod("a")),
			// 554 × 100 / 1000 = 55 (55.4 truncated) -> 1.1: within tolerance
			metrics: fakeMetrics{resource: samples("a", 554)}, want: 1,
		},
		{
			name: "gpu average value", spec: gpuAverage,
			scale: Scale{SpecReplicas: 2, StatusReplicas: 2}, pods: pods(readyPod("a"), readyPod("b")),
			metrics: fakeMetrics{resource: samples("a", 900, "b", 700)}, want: 4, // mean 800 / 500 = 1.6 -> ceil(3.2)
		},
		{
			name: "cpu: a pod not Ready within the initialization period is unready", spec: cpuUtil,
			scale: Scale{SpecReplicas: 2, StatusReplicas: 2}, pods: pods(readyPod("a"), unreadyPod("b")),
			// a at 100 % -> ratio 2; b unready counts 0 in a scale-up: 1000/2000 = 50 % -> 1.0 -> keep 2
			metrics: fakeMetrics{resource: samples("a", 1000, "b", 1000)}, want: 2,
		},
		{
			name: "cpu: a pod Ready for long is counted", spec: cpuUtil,
			scale: Scale{SpecReplicas: 2, StatusReplicas: 2}, pods: pods(readyPod("a"), readyPod("b")),
			metrics: fakeMetrics{resource: samples("a", 1000, "b", 1000)}, want: 4,
		},
		{
			name: "resource query error", spec: gpuUtil,
			scale: Scale{SpecReplicas: 2, StatusReplicas: 2}, pods: pods(readyPod("a")),
			metrics: fakeMetrics{err: errors.New("metrics API down")}, wantErr: "metrics API down",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustNew(t, hpaYAML(1, 100, tt.spec))
			res := c.Sync(t0, tt.scale, tt.pods, &tt.metrics)
			if tt.wantErr != "" {
				if res.Err == nil || !strings.Contains(res.Err.Error(), tt.wantErr) {
					t.Fatalf("Sync error = %v, want one containing %q", res.Err, tt.wantErr)
				}
				if res.MetricReplicas != -1 || res.Rescale {
					t.Errorf("Sync on a failing metric = %+v, want no proposal and no rescale", res)
				}
				return
			}
			if res.Err != nil {
				t.Fatalf("Sync error = %v", res.Err)
			}
			if res.MetricReplicas != tt.want {
				t.Errorf("proposal = %d, want %d", res.MetricReplicas, tt.want)
			}
		})
	}
}

func tenReady() []*corev1.Pod {
	var ps []*corev1.Pod
	for _, n := range "abcdefghij" {
		ps = append(ps, readyPod(string(n)))
	}
	return ps
}
