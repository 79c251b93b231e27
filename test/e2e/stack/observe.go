package stack

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	externalmetrics "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
)

// ExternalMetric reads one external metric through the aggregator exactly as the HPA
// controller does (GET /apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{metric}
// ?labelSelector=...) and returns the sum of its items. A non-nil error carries the API
// status message.
func (s *Stack) ExternalMetric(ctx context.Context, metric string, selector labels.Selector) (float64, *externalmetrics.ExternalMetricValueList, error) {
	req := s.Cluster.Client.CoreV1().RESTClient().Get().
		AbsPath("/apis/external.metrics.k8s.io/v1beta1/namespaces", s.Namespace, metric)
	if !selector.Empty() {
		req = req.Param("labelSelector", selector.String())
	}
	body, err := req.DoRaw(ctx)
	if err != nil {
		// client-go hides the message of some statuses (503: "the server is currently
		// unable to handle the request"); the adapter's own words are in the body.
		var st metav1.Status
		if json.Unmarshal(body, &st) == nil && st.Message != "" {
			return math.NaN(), nil, fmt.Errorf("%s (HTTP %d, %s)", st.Message, st.Code, st.Reason)
		}
		return math.NaN(), nil, err
	}
	var list externalmetrics.ExternalMetricValueList
	if err := json.Unmarshal(body, &list); err != nil {
		return math.NaN(), nil, fmt.Errorf("decoding %s: %w", metric, err)
	}
	sum := 0.0
	for _, it := range list.Items {
		sum += it.Value.AsApproximateFloat64()
	}
	return sum, &list, nil
}

// Sample is one observation of a scaled pool.
type Sample struct {
	T time.Time
	// Spec is the Deployment's spec.replicas, Desired the HPA's status.desiredReplicas,
	// Ready the Deployment's ready replicas.
	Spec, Desired, Ready int32
	// HPASynced is false until the HPA controller has reconciled the HPA once (its status
	// has no condition yet): Desired is then 0 whatever the pool needs.
	HPASynced bool
	// HPAValue is the metric value in the HPA's status (what it last used), NaN if none.
	HPAValue float64
	// Saturation, Demand, Queue (waiting requests, sum), KV (mean usage ratio) as served
	// by the adapter now; NaN when the adapter answers with an error.
	Saturation, Demand, Queue, KV float64
	// HPACondition is the message of a False ScalingActive or AbleToScale condition.
	HPACondition string
	// OfferedRPS is the request rate the gateway sent since the previous sample; Observe
	// leaves it 0 for the caller to fill in.
	OfferedRPS float64
}

// Observe takes one Sample of Deployment dep scaled by HPA hpa over pods matching selector.
func (s *Stack) Observe(ctx context.Context, dep, hpa string, selector labels.Selector) Sample {
	smp := Sample{T: time.Now(), HPAValue: math.NaN()}
	if d, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Get(ctx, dep, metav1.GetOptions{}); err == nil {
		if d.Spec.Replicas != nil {
			smp.Spec = *d.Spec.Replicas
		}
		smp.Ready = d.Status.ReadyReplicas
	}
	if h, err := s.Cluster.Client.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Get(ctx, hpa, metav1.GetOptions{}); err == nil {
		smp.Desired = h.Status.DesiredReplicas
		smp.HPASynced = len(h.Status.Conditions) > 0
		smp.HPAValue = HPAMetricValue(h)
		smp.HPACondition = HPAProblem(h)
	}
	smp.Saturation, _, _ = s.ExternalMetric(ctx, "llm_saturation", selector)
	smp.Demand, _, _ = s.ExternalMetric(ctx, "llm_demand_replicas", selector)
	smp.Queue, _, _ = s.ExternalMetric(ctx, "llm_num_requests_waiting", selector)
	smp.KV, _, _ = s.ExternalMetric(ctx, "llm_kv_cache_usage", selector)
	return smp
}

// HPAMetricValue returns the first External metric's current value (Value or
// AverageValue) from the HPA status, NaN if there is none.
func HPAMetricValue(h *autoscalingv2.HorizontalPodAutoscaler) float64 {
	for _, m := range h.Status.CurrentMetrics {
		if m.Type != autoscalingv2.ExternalMetricSourceType || m.External == nil {
			continue
		}
		if v := m.External.Current.Value; v != nil {
			return v.AsApproximateFloat64()
		}
		if v := m.External.Current.AverageValue; v != nil {
			return v.AsApproximateFloat64()
		}
	}
	return math.NaN()
}

// HPAProblem returns "Type/Reason: message" of the first False ScalingActive or
// AbleToScale condition, "" when both are True.
func HPAProblem(h *autoscalingv2.HorizontalPodAutoscaler) string {
	for _, c := range h.Status.Conditions {
		if (c.Type == autoscalingv2.ScalingActive || c.Type == autoscalingv2.AbleToScale) && c.Status == "False" {
			return fmt.Sprintf("%s/%s: %s", c.Type, c.Reason, c.Message)
		}
	}
	return ""
}
