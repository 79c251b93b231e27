package simulate

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/saturation-adapter/saturation-adapter/lab/hpa"
)

// HPATargets are the metric targets of the built-in HPAs.
type HPATargets struct {
	// QueueDepth is the waiting requests per pod the queue-only trigger aims at
	// (the KEDA trigger's threshold); KVCacheUsage the KV-cache usage ratio the
	// KV-only HPA aims at (use the adapter's set points for a like-for-like
	// comparison). The fused score's set points live in the MetricSource.
	QueueDepth, KVCacheUsage float64
	// GPUUtilization is the GPU-utilization HPA's averageUtilization, percent.
	GPUUtilization int32
}

// DefaultHPATargets returns the adapter's default set points (queue 5, KV 0.8;
// policy.DefaultSetPoints) and 80 % GPU utilization.
func DefaultHPATargets() HPATargets {
	q, kv := adapterSetPoints()
	return HPATargets{QueueDepth: q, KVCacheUsage: kv, GPUUtilization: 80}
}

// Validate reports every invalid target.
func (s HPATargets) Validate() error {
	var errs []error
	if !(s.QueueDepth >= 0.001) || math.IsInf(s.QueueDepth, 0) {
		errs = append(errs, fmt.Errorf("queue depth target must be a finite number >= 0.001, got %g", s.QueueDepth))
	}
	if !(s.KVCacheUsage >= 0.001 && s.KVCacheUsage <= 1) {
		errs = append(errs, fmt.Errorf("KV-cache usage target must be in [0.001, 1], got %g", s.KVCacheUsage))
	}
	if s.GPUUtilization < 1 {
		errs = append(errs, fmt.Errorf("GPU utilization target must be >= 1 percent, got %d", s.GPUUtilization))
	}
	return errors.Join(errs...)
}

// RecommendedBehavior is the HPA behavior the README recommends and every
// built-in policy uses, so that the policies differ only in their signal: scale up
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

// BuiltinAutoscalerNames lists the built-in policies in report order.
func BuiltinAutoscalerNames() []string {
	return []string{"gpu-util", "keda-queue", "kv", "saturation", "demand-replicas"}
}

// BuiltinAutoscalers returns the named built-in policies (all when names is empty),
// each an HPA with RecommendedBehavior, minReplicas minReplicas and maxReplicas 0
// (twice the oracle's peak, see Policy.HPA):
//
//   - gpu-util: Resource nvidia.com/gpu, averageUtilization GPUUtilization, the
//     GPU busy fraction scraped by Prometheus;
//   - keda-queue: External llm_num_requests_waiting (the total queue, as KEDA's
//     prometheus trigger on sum(vllm:num_requests_waiting)), AverageValue
//     QueueDepth, via Prometheus and KEDA polling;
//   - kv: External llm_kv_cache_usage, Value KVCacheUsage, from the adapter;
//   - saturation: External llm_saturation, Value 1, from the adapter;
//   - demand-replicas: External llm_demand_replicas, AverageValue 1, from the adapter.
func BuiltinAutoscalers(sp HPATargets, minReplicas int32, names ...string) ([]Autoscaler, error) {
	if err := sp.Validate(); err != nil {
		return nil, err
	}
	if len(names) == 0 {
		names = BuiltinAutoscalerNames()
	}
	external := func(metric string, typ autoscalingv2.MetricTargetType, v float64) autoscalingv2.MetricSpec {
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
	var out []Autoscaler
	for _, name := range names {
		var (
			m    autoscalingv2.MetricSpec
			path = PathAdapter
			desc string
		)
		switch name {
		case "gpu-util":
			u := sp.GPUUtilization
			m = autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name: GPUResource, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: &u}}}
			path = PathPrometheus
			desc = fmt.Sprintf("HPA on GPU utilization (busy fraction, as NVML counts it) at %d %%, Prometheus every 15 s", u)
		case "keda-queue":
			m = external(MetricQueueDepth, autoscalingv2.AverageValueMetricType, sp.QueueDepth)
			path = PathKEDA
			desc = fmt.Sprintf("KEDA-style queue trigger: total waiting / %g per pod, Prometheus 15 s + KEDA polling 30 s", sp.QueueDepth)
		case "kv":
			m = external(MetricKVCacheUsage, autoscalingv2.ValueMetricType, sp.KVCacheUsage)
			desc = fmt.Sprintf("HPA on mean KV-cache usage, Value %g, adapter scraping every 2 s", sp.KVCacheUsage)
		case "saturation":
			m = external(MetricSaturation, autoscalingv2.ValueMetricType, 1)
			desc = "HPA on llm_saturation (mean of max(queue/set point, KV/set point)), Value 1, adapter"
		case "demand-replicas":
			m = external(MetricDemandReplicas, autoscalingv2.AverageValueMetricType, 1)
			desc = "HPA on llm_demand_replicas (sum of per-pod saturations), AverageValue 1, adapter"
		default:
			return nil, fmt.Errorf("unknown built-in policy %q, want one of %v", name, BuiltinAutoscalerNames())
		}
		minR := minReplicas
		h := &autoscalingv2.HorizontalPodAutoscaler{
			TypeMeta:   metav1.TypeMeta{APIVersion: "autoscaling/v2", Kind: "HorizontalPodAutoscaler"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
				ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "vllm"},
				MinReplicas:    &minR,
				Metrics:        []autoscalingv2.MetricSpec{m},
				Behavior:       RecommendedBehavior(),
			},
		}
		hpa.SetDefaults(h)
		out = append(out, Autoscaler{Name: name, Description: desc, HPA: h, Path: path})
	}
	return out, nil
}
