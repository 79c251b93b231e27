package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/loadgen"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// gatewayPolicies is the adapter's --config in TestGateway: replicas needed from the
// engines plus the flow-controlled gateway's queue for each pool.
const gatewayPolicies = `apiVersion: saturation-adapter.io/v1alpha1
kind: PolicyConfig
policies:
- name: zero-demand
  kind: demand
  terms: [{kind: queueDepth, setPoint: 5}, {kind: kvCacheUsage, setPoint: 0.8}]
  gateway: {selector: app=gw-zero, match: {inference_pool: pool-zero}}
- name: held-demand
  kind: demand
  terms: [{kind: queueDepth, setPoint: 5}, {kind: kvCacheUsage, setPoint: 0.8}]
  gateway: {selector: app=gw-held, match: {inference_pool: pool-held}}
`

// startGateway runs a flow-controlled gateway pod in front of the pods of app=pool
// and returns its endpoint. Each engine gets at most maxOutstanding requests at once.
func startGateway(t *testing.T, s *stack.Stack, name, app, pool string, maxOutstanding int) string {
	t.Helper()
	ctx := context.Background()
	dep := stack.EngineDeployment(name, 1, gatewayImage,
		"gateway-kubeconfig="+s.Cluster.AdminKubeconfig, "gateway-selector=app="+app, "gateway-pool="+pool,
		fmt.Sprintf("gateway-max-outstanding=%d", maxOutstanding))
	if _, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
	waitReadyCount(t, s, name, sel, 1)
	return s.Endpoints(sel)()[0]
}

// TestGateway (issue 8) on one control plane, with the adapter on --config:
//   - scale from zero: a Deployment at 0 replicas behind a flow-controlled gateway, an HPA
//     with minReplicas 0 on a demand policy with a gateway input. Load reaches the gateway,
//     which holds it; the adapter serves the gateway's queue as demand; the HPA goes
//     0 → N; every held request is served after the cold start; when the load stops it goes
//     back to 0 with the ScaledToZero condition;
//   - a pool whose engines sit at their set points while the gateway queue grows scales up
//     on the gateway policy, and not on the engine-only llm_demand_replicas.
func TestGateway(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(cfg, []byte(gatewayPolicies), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startStack(t, stack.Options{
		ColdStart:    5 * time.Second,
		Adapter:      stack.AdapterOptions{ScrapeInterval: time.Second, ScrapeTimeout: 500 * time.Millisecond, ExtraArgs: []string{"--config=" + cfg}},
		EmulatorArgs: testEmulatorArgs,
	})
	t.Run("scale from zero", func(t *testing.T) { testScaleFromZero(t, s) })
	t.Run("backlog held in the gateway", func(t *testing.T) { testHeldBacklog(t, s) })
}

func testScaleFromZero(t *testing.T, s *stack.Stack) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const name = "vllm-zero"
	gw := startGateway(t, s, "gw-zero", name, "pool-zero", 4)
	// One idle replica: the HPA itself scales it to zero (a Deployment an admin set to 0
	// is "scaling disabled" to the HPA, which then never wakes it).
	dep := stack.EngineDeployment(name, 1, stack.EmulatorImage)
	if _, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
	waitReadyCount(t, s, name, sel, 1)
	hpa := stack.HPA(name, name, "zero-demand", dep.Spec.Selector.MatchLabels, autoscalingv2.AverageValueMetricType, "1", 0, 4, 15*time.Second)
	hpa.Spec.MinReplicas = ptr.To[int32](0)
	if _, err := s.Cluster.Client.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitScaledToZero(t, s, name, 2*time.Minute)
	// Zero pods and nothing waiting is a legitimate 0, served as a value.
	waitValue(t, s, "zero-demand", sel, func(v float64) bool { return v == 0 })

	lg := loadgen.New(stack.EmulatorGateway(func() []string { return []string{gw} }))
	load := loadgen.Step(0, 4, 60*time.Second, testPrompt, testOutputTokens)
	first := time.Now()
	done := make(chan struct{})
	go func() { defer close(done); lg.Run(ctx, load) }()
	var firstReady, drained time.Time
	for end := time.Now().Add(4 * time.Minute); time.Now().Before(end); time.Sleep(time.Second) {
		smp := s.Observe(ctx, name, name, sel)
		held, _, _ := s.ExternalMetric(ctx, "zero-demand", sel)
		t.Logf("spec=%d ready=%d desired=%d zero-demand=%.3f inflight=%d", smp.Spec, smp.Ready, smp.Desired, held, lg.Inflight())
		if firstReady.IsZero() && smp.Ready > 0 {
			firstReady = time.Now()
		}
		if !firstReady.IsZero() && drained.IsZero() && lg.Inflight() <= int(smp.Ready)*4 {
			drained = time.Now()
		}
		select {
		case <-done:
			end = time.Now()
		default:
		}
	}
	<-done
	if firstReady.IsZero() {
		t.Fatal("no engine became Ready: the HPA never scaled up from zero")
	}
	results := lg.Results()
	failed := 0
	for _, r := range results {
		if r.Err != nil {
			failed++
		}
	}
	t.Logf("scale from zero: first request at 0s, first Ready pod at +%s, gateway queue drained at +%s; %d requests, %d failed",
		firstReady.Sub(first).Round(time.Second), drained.Sub(first).Round(time.Second), len(results), failed)
	if failed > 0 || len(results) != len(load) {
		t.Errorf("%d of %d held requests failed (or %d were not sent)", failed, len(results), len(load)-len(results))
	}
	// Load over: back to zero, with the HPA saying it scaled to zero.
	waitScaledToZero(t, s, name, 3*time.Minute)
	t.Logf("back to 0 replicas with ScaledToZero=True")
}

// waitScaledToZero waits until the HPA has scaled its target to zero itself.
func waitScaledToZero(t *testing.T, s *stack.Stack, name string, timeout time.Duration) {
	t.Helper()
	var last autoscalingv2.HorizontalPodAutoscalerStatus
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(time.Second) {
		h, err := s.Cluster.Client.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		last = h.Status
		if h.Status.CurrentReplicas == 0 && conditionTrue(h, autoscalingv2.ScaledToZero) {
			return
		}
	}
	t.Fatalf("%s not scaled to zero with ScaledToZero=True: %+v", name, last)
}

func testHeldBacklog(t *testing.T, s *stack.Stack) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	// Two identical pools, one gateway each holding requests once both engines run their
	// batch of 4: one HPA on the gateway policy, one on the engine-only llm_demand_replicas.
	type pool struct {
		name, metric string
		sel          labels.Selector
		lg           *loadgen.Gateway
	}
	pools := []*pool{{name: "vllm-held", metric: "held-demand"}, {name: "vllm-engine-only", metric: "llm_demand_replicas"}}
	for _, p := range pools {
		gwName := "gw-held"
		poolLabel := "pool-held"
		if p.metric == "llm_demand_replicas" {
			gwName, poolLabel = "gw-engine-only", "pool-engine-only"
		}
		gw := startGateway(t, s, gwName, p.name, poolLabel, 4)
		dep := stack.EngineDeployment(p.name, 2, stack.EmulatorImage)
		if _, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p.sel = labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
		waitReadyCount(t, s, p.name, p.sel, 2)
		hpa := stack.HPA(p.name, p.name, p.metric, dep.Spec.Selector.MatchLabels, autoscalingv2.AverageValueMetricType, "1", 2, 6, time.Minute)
		if _, err := s.Cluster.Client.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p.lg = loadgen.New(stack.EmulatorGateway(func() []string { return []string{gw} }))
	}
	loadCtx, stop := context.WithCancel(ctx)
	defer stop()
	for _, p := range pools {
		go p.lg.Run(loadCtx, loadgen.Step(0, 10, 3*time.Minute, testPrompt, testOutputTokens))
	}
	var scaled bool
	maxEngineOnly := int32(0)
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end) && !scaled; time.Sleep(time.Second) {
		held := s.Observe(ctx, pools[0].name, pools[0].name, pools[0].sel)
		engineOnly := s.Observe(ctx, pools[1].name, pools[1].name, pools[1].sel)
		maxEngineOnly = max(maxEngineOnly, engineOnly.Desired)
		t.Logf("gateway policy: desired=%d demand %.3f; engine-only: desired=%d demand %.3f queue %.0f; held in the gateways: %d / %d",
			held.Desired, held.HPAValue, engineOnly.Desired, engineOnly.Demand, engineOnly.Queue, pools[0].lg.Inflight(), pools[1].lg.Inflight())
		scaled = held.Desired > 2
	}
	if !scaled {
		t.Fatal("the gateway policy did not scale up while requests waited in the gateway")
	}
	if maxEngineOnly > 2 {
		t.Errorf("the engine-only policy scaled to %d: its engines were not at their set points, the test shows nothing", maxEngineOnly)
	}
}

// waitValue waits until an External metric's value satisfies cond.
func waitValue(t *testing.T, s *stack.Stack, metric string, sel labels.Selector, cond func(float64) bool) {
	t.Helper()
	var last float64
	var lastErr error
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		last, _, lastErr = s.ExternalMetric(context.Background(), metric, sel)
		if lastErr == nil && cond(last) {
			return
		}
	}
	t.Fatalf("%s never satisfied the condition: last %g, %v", metric, last, lastErr)
}

func conditionTrue(h *autoscalingv2.HorizontalPodAutoscaler, typ autoscalingv2.HorizontalPodAutoscalerConditionType) bool {
	for _, c := range h.Status.Conditions {
		if c.Type == typ {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
