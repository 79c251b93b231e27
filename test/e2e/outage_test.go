package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// setStubWaiting sets a stub engine's queue depth.
func setStubWaiting(t *testing.T, endpoint string, waiting int) {
	t.Helper()
	resp, err := http.Post(fmt.Sprintf("%s/admin/set?waiting=%d", endpoint, waiting), "text/plain", nil)
	if err != nil {
		t.Fatalf("setting the queue of %s: %v", endpoint, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("setting the queue of %s: %s", endpoint, resp.Status)
	}
}

// TestPartialOutageHolds (issue 12, "partial data scales the HPA down"), one HPA per metric
// kind: a mean (llm_saturation, Value 1), replicas needed (llm_demand_replicas,
// AverageValue 1) and a raw sum (llm_num_requests_waiting, AverageValue 5). Four pods each
// hold 10 waiting requests (saturation 2.0), so every HPA wants 8 and sits at its maximum,
// 4. Then three pods' /metrics fail and the fourth reads idle. Counting only the pods that
// report, each HPA would scale down (to 3, 3 and 1); the dark pods keep their last good
// values, so every HPA holds 4, with scale-down stabilization 0 so the test cannot pass by
// waiting.
func TestPartialOutageHolds(t *testing.T) {
	t.Parallel()
	s := startStack(t, stack.Options{ColdStart: time.Second, Adapter: stack.AdapterOptions{ScrapeInterval: time.Second, ScrapeTimeout: 500 * time.Millisecond}})
	ctx := context.Background()
	// full is each metric's value once every pod has reported 10 waiting
	// (saturation 10 / 5 = 2 each).
	kinds := []struct {
		name, metric string
		typ          autoscalingv2.MetricTargetType
		target       string
		full         float64
	}{
		{"outage-mean", "llm_saturation", autoscalingv2.ValueMetricType, "1", 2},
		{"outage-demand", "llm_demand_replicas", autoscalingv2.AverageValueMetricType, "1", 8},
		{"outage-sum", "llm_num_requests_waiting", autoscalingv2.AverageValueMetricType, "5", 40},
	}
	sels := map[string]labels.Selector{}
	for _, k := range kinds {
		dep := stack.EngineDeployment(k.name, 4, stubImage, "stub-waiting=10")
		if _, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		sels[k.name] = labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
	}
	for _, k := range kinds {
		waitReadyCount(t, s, k.name, sels[k.name], 4)
		hpa := stack.HPA(k.name, k.name, k.metric, map[string]string{"app": k.name}, k.typ, k.target, 1, 4, 0)
		if _, err := s.Cluster.Client.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Each HPA has read its metric and wants more than it may have, and every
	// pod has reported: a pod that never reported before the outage has no
	// last good value to hold, and counts as unknown.
	for _, k := range kinds {
		err := wait.PollUntilContextTimeout(ctx, time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
			if v, _, err := s.ExternalMetric(ctx, k.metric, sels[k.name]); err != nil || v != k.full {
				return false, nil
			}
			h, err := s.Cluster.Client.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Get(ctx, k.name, metav1.GetOptions{})
			return err == nil && h.Status.DesiredReplicas == 4 && len(h.Status.CurrentMetrics) > 0 && stack.HPAProblem(h) == "", nil
		})
		if err != nil {
			t.Fatalf("%s: HPA never settled at 4 on %s: %v", k.name, k.metric, err)
		}
	}
	// The outage: three pods of each Deployment fail, the fourth goes idle.
	for _, k := range kinds {
		eps := s.Endpoints(sels[k.name])()
		if len(eps) != 4 {
			t.Fatalf("%s: %d endpoints, want 4", k.name, len(eps))
		}
		for _, ep := range eps[:3] {
			setMetricsFault(t, ep, true)
		}
		setStubWaiting(t, eps[3], 0)
	}
	outage := time.Now()
	for time.Since(outage) < 40*time.Second {
		for _, k := range kinds {
			smp := s.Observe(ctx, k.name, k.name, sels[k.name])
			if smp.Spec < 4 || (smp.Desired != 0 && smp.Desired < 4) {
				t.Fatalf("%s (%s): scaled down on missing data %s into the outage: spec %d desired %d, HPA value %g (%s)",
					k.name, k.metric, time.Since(outage).Round(time.Second), smp.Spec, smp.Desired, smp.HPAValue, smp.HPACondition)
			}
		}
		time.Sleep(time.Second)
	}
	for _, k := range kinds {
		v, _, err := s.ExternalMetric(ctx, k.metric, sels[k.name])
		t.Logf("%s after 40 s of outage: %s = %g (err %v), replicas held at 4", k.name, k.metric, v, err)
	}
}
