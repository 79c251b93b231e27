package simulate

import (
	"errors"
	"fmt"
	"strconv"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/saturation-adapter/saturation-adapter/lab/hpa"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

// Targets are the targets of the built-in autoscalers: the adapter's set
// points, which the keda-queue and kv HPAs aim at too (the one set-point type of
// the adapter and the lab), and the GPU-utilization HPA's averageUtilization,
// which is not a set point of the adapter.
type Targets struct {
	// SetPoints are the queue-depth (requests per pod) and KV-cache usage
	// (ratio) set points.
	SetPoints policy.SetPoints
	// GPUUtilizationPercent is the gpu-util HPA's averageUtilization, percent.
	GPUUtilizationPercent int32
}

// DefaultTargets returns the adapter's default set points
// (policy.DefaultSetPoints: queue 5, KV 0.8) and 80 % GPU utilization.
func DefaultTargets() Targets {
	return Targets{SetPoints: policy.DefaultSetPoints(), GPUUtilizationPercent: 80}
}

// Validate reports every invalid target.
func (t Targets) Validate() error {
	var errs []error
	if err := t.SetPoints.Validate(); err != nil {
		errs = append(errs, err)
	}
	if t.GPUUtilizationPercent < 1 {
		errs = append(errs, fmt.Errorf("GPU utilization target must be >= 1 percent, got %d", t.GPUUtilizationPercent))
	}
	return errors.Join(errs...)
}

// RecommendedBehavior is the HPA behavior the README recommends and every
// built-in autoscaler uses, so that they differ only in their signal: scale up
// after 30 s of agreement by at most 2 pods per 60 s, scale down after 300 s by
// at most 1 pod per 120 s (DOMAIN.md section 5: scale up fast, down slowly; vLLM's
// cold start is minutes).
func RecommendedBehavior() *autoscalingv2.HorizontalPodAutoscalerBehavior {
	up, down := int32(30), int32(300)
	return &autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleUp: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &up,
			Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 2, PeriodSeconds: 60}}},
		ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &down,
			Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 120}}},
	}
}

// BuiltinAutoscalerNames lists the built-in autoscalers in report order.
func BuiltinAutoscalerNames() []string {
	return []string{"gpu-util", "keda-queue", "keda-queue-cached", "kv", "saturation", "demand-replicas"}
}

// BuiltinAutoscalers returns the named built-in autoscalers (all when names is empty),
// each an HPA with RecommendedBehavior, minReplicas minReplicas and maxReplicas 0
// (twice the oracle's peak, see Policy.HPA):
//
//   - gpu-util: Resource nvidia.com/gpu, averageUtilization GPUUtilization, the
//     GPU busy fraction scraped by Prometheus;
//   - keda-queue: External llm_num_requests_waiting (the total queue, as KEDA's
//     prometheus trigger on sum(vllm:num_requests_waiting)), AverageValue
//     QueueDepth, via Prometheus queried at each HPA sync (KEDA's default
//     useCachedMetrics: false);
//   - keda-queue-cached: the same with useCachedMetrics: true, the HPA reading
//     the value KEDA polled every 30 s;
//   - kv: External llm_kv_cache_usage, Value KVCacheUsage, from the adapter;
//   - saturation: External llm_saturation, Value 1, from the adapter;
//   - demand-replicas: External llm_demand_replicas, AverageValue 1, from the adapter.
func BuiltinAutoscalers(t Targets, minReplicas int32, names ...string) ([]Autoscaler, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	sp := t.SetPoints
	if len(names) == 0 {
		names = BuiltinAutoscalerNames()
	}
	var out []Autoscaler
	for _, name := range names {
		var (
			m    autoscalingv2.MetricSpec
			path = PathAdapter
			desc string
		)
		switch name {
		case "gpu-util":
			u := t.GPUUtilizationPercent
			m = GPUUtilizationMetric(u)
			path = PathPrometheus
			desc = fmt.Sprintf("HPA on GPU utilization (busy fraction, as NVML counts it) at %d %%, Prometheus every 15 s", u)
		case "keda-queue":
			m = ExternalMetric(MetricQueueDepth, autoscalingv2.AverageValueMetricType, sp.QueueDepth)
			path = PathPrometheus
			desc = fmt.Sprintf("KEDA prometheus trigger at its default useCachedMetrics false: total waiting / %g per pod, Prometheus 15 s, queried at each HPA sync", sp.QueueDepth)
		case "keda-queue-cached":
			m = ExternalMetric(MetricQueueDepth, autoscalingv2.AverageValueMetricType, sp.QueueDepth)
			path = PathKEDA
			desc = fmt.Sprintf("KEDA prometheus trigger with useCachedMetrics true: total waiting / %g per pod, Prometheus 15 s + KEDA polling 30 s, cached", sp.QueueDepth)
		case "kv":
			m = ExternalMetric(MetricKVCacheUsage, autoscalingv2.ValueMetricType, sp.KVCacheUsage)
			desc = fmt.Sprintf("HPA on mean KV-cache usage, Value %g, adapter scraping every 2 s", sp.KVCacheUsage)
		case "saturation":
			m = ExternalMetric(MetricSaturation, autoscalingv2.ValueMetricType, 1)
			desc = "HPA on llm_saturation (mean of max(queue/set point, KV/set point)), Value 1, adapter"
		case "demand-replicas":
			m = ExternalMetric(MetricDemandReplicas, autoscalingv2.AverageValueMetricType, 1)
			desc = "HPA on llm_demand_replicas (sum of per-pod saturations), AverageValue 1, adapter"
		default:
			return nil, fmt.Errorf("unknown built-in autoscaler %q, want one of %v", name, BuiltinAutoscalerNames())
		}
		out = append(out, Autoscaler{Name: name, Description: desc, HPA: NewHPA(name, minReplicas, RecommendedBehavior(), m), Path: path})
	}
	return out, nil
}

// NewHPA returns an HPA of the Deployment vllm named name with the metrics,
// minReplicas, maxReplicas 0 (twice the oracle's peak, see Autoscaler.HPA)
// and behavior, with the API server's defaults applied.
func NewHPA(name string, minReplicas int32, behavior *autoscalingv2.HorizontalPodAutoscalerBehavior, metrics ...autoscalingv2.MetricSpec) *autoscalingv2.HorizontalPodAutoscaler {
	minR := minReplicas
	h := &autoscalingv2.HorizontalPodAutoscaler{
		TypeMeta:   metav1.TypeMeta{APIVersion: "autoscaling/v2", Kind: "HorizontalPodAutoscaler"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "vllm"},
			MinReplicas:    &minR,
			Metrics:        metrics,
			Behavior:       behavior,
		},
	}
	hpa.SetDefaults(h)
	return h
}

// ExternalMetric returns an External metric spec of metric (selector
// app=vllm) with a target of type typ (Value or AverageValue) at v. v must be
// finite and >= 0: its callers take it from validated set points
// (setpoints.Flags, scoreboard.Grid.Validate), and a NaN or Inf panics in
// resource.MustParse.
func ExternalMetric(metric string, typ autoscalingv2.MetricTargetType, v float64) autoscalingv2.MetricSpec {
	q := resource.MustParse(strconv.FormatFloat(v, 'f', -1, 64))
	t := autoscalingv2.MetricTarget{Type: typ}
	if typ == autoscalingv2.ValueMetricType {
		t.Value = &q
	} else {
		t.AverageValue = &q
	}
	return autoscalingv2.MetricSpec{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
		Metric: autoscalingv2.MetricIdentifier{Name: metric, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "vllm"}}},
		Target: t,
	}}
}

// GPUUtilizationMetric returns the Resource metric spec of the GPU (one per
// pod) at averageUtilization percent: what an HPA on NVML's utilization.gpu
// through a resource metrics pipeline asks for.
func GPUUtilizationMetric(percent int32) autoscalingv2.MetricSpec {
	u := percent
	return autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
		Name: GPUResource, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: &u}}}
}
