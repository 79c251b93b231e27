package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// holdReplicas checks for d that the Deployment keeps want replicas, sampling every second,
// and returns the last HPA problem seen.
func holdReplicas(t *testing.T, s *stack.Stack, name string, sel labels.Selector, want int32, d time.Duration) string {
	t.Helper()
	var problem string
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Second) {
		smp := s.Observe(context.Background(), name, name, sel)
		if smp.Spec != want || (smp.Desired != 0 && smp.Desired != want) {
			t.Fatalf("replicas moved: spec %d desired %d, want %d (HPA: %s)", smp.Spec, smp.Desired, want, smp.HPACondition)
		}
		if smp.HPACondition != "" {
			problem = smp.HPACondition
		}
	}
	return problem
}

// waitProblem waits until the HPA reports a False ScalingActive/AbleToScale condition and
// returns it.
func waitProblem(t *testing.T, s *stack.Stack, hpa string, timeout time.Duration) string {
	t.Helper()
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(time.Second) {
		h, err := s.Cluster.Client.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Get(context.Background(), hpa, metav1.GetOptions{})
		if err == nil {
			if p := stack.HPAProblem(h); p != "" {
				return p
			}
		}
	}
	t.Fatalf("HPA %s reported no problem within %s", hpa, timeout)
	return ""
}

// TestFailStatic: when every engine's /metrics fails, the HPA's condition names the
// adapter's error and the replica count does not drop; when they recover, the HPA scales
// down as it would have.
func TestFailStatic(t *testing.T) {
	t.Parallel()
	s := scaleStack(t)
	ctx := context.Background()
	const name = "vllm-fault"
	dep := stack.EngineDeployment(name, 3, stack.EmulatorImage)
	if _, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
	waitReadyCount(t, s, name, sel, 3)
	for _, ep := range s.Endpoints(sel)() {
		setMetricsFault(t, ep, true)
	}
	// The adapter may hold good samples from before the fault for up to its max sample
	// age; create the HPA only once the adapter itself answers with an error.
	var adapterErr error
	for end := time.Now().Add(30 * time.Second); adapterErr == nil; time.Sleep(500 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("adapter still serves llm_saturation 30 s after every engine's /metrics started failing")
		}
		_, _, adapterErr = s.ExternalMetric(ctx, "llm_saturation", sel)
	}
	t.Logf("adapter error with every /metrics failing: %v", adapterErr)
	hpa := stack.HPA(name, name, "llm_saturation", dep.Spec.Selector.MatchLabels, autoscalingv2.ValueMetricType, "1", 1, 6, 0)
	if _, err := s.Cluster.Client.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	problem := waitProblem(t, s, name, 60*time.Second)
	t.Logf("HPA condition: %s", problem)
	if !strings.Contains(problem, "FailedGetExternalMetric") {
		t.Errorf("HPA condition %q does not say the external metric failed", problem)
	}
	// The adapter's message starts "<metric> in namespace ... for selector ...: <what is
	// wrong>: <per-pod details>"; the HPA must pass on at least the first two parts.
	parts := strings.SplitN(strings.TrimSpace(strings.SplitN(adapterErr.Error(), " (HTTP ", 2)[0]), ": ", 3)
	if want := strings.Join(parts[:min(2, len(parts))], ": "); !strings.Contains(problem, want) {
		t.Errorf("HPA condition %q does not carry the adapter's error %q", problem, want)
	}
	last := holdReplicas(t, s, name, sel, 3, 30*time.Second)
	t.Logf("replicas held at 3 for 30 s; last HPA condition: %s", last)

	for _, ep := range s.Endpoints(sel)() {
		setMetricsFault(t, ep, false)
	}
	start := time.Now()
	for {
		smp := s.Observe(ctx, name, name, sel)
		if smp.Spec == 1 {
			t.Logf("metrics back: scaled 3→1 in %s", time.Since(start).Round(time.Second))
			break
		}
		if time.Since(start) > 90*time.Second {
			t.Fatalf("did not scale down after metrics recovered: %+v", smp)
		}
		time.Sleep(time.Second)
	}
}

// TestSelectorMatchesNothing: an HPA whose metric selector matches no pod gets an
// actionable condition from the adapter and does not scale down.
func TestSelectorMatchesNothing(t *testing.T) {
	t.Parallel()
	s := scaleStack(t)
	ctx := context.Background()
	const name = "vllm-typo"
	dep := stack.EngineDeployment(name, 2, stack.EmulatorImage)
	if _, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
	waitReadyCount(t, s, name, sel, 2)
	hpa := stack.HPA(name, name, "llm_saturation", map[string]string{"app": "vllm-typ0"}, autoscalingv2.ValueMetricType, "1", 1, 6, 0)
	if _, err := s.Cluster.Client.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	problem := waitProblem(t, s, name, 60*time.Second)
	t.Logf("HPA condition: %s", problem)
	if !strings.Contains(problem, "app=vllm-typ0") {
		t.Errorf("HPA condition %q does not name the selector that matched nothing", problem)
	}
	holdReplicas(t, s, name, sel, 2, 20*time.Second)
	t.Logf("replicas held at 2 for 20 s")
	checkNoNamespacePaths(t, s)
}

// checkNoNamespacePaths: requests without a namespace, as a person sends them through
// the aggregator (docs/troubleshooting.md). The API serves External metrics under
// /namespaces/{ns}/ only, so the cluster-wide path `kubectl get --raw` sends matches no
// route: 404 NotFound. Only an empty namespace segment, which kubectl's path cleaning
// never sends (a plain HTTP client here), reaches the adapter's own 400.
func checkNoNamespacePaths(t *testing.T, s *stack.Stack) {
	t.Helper()
	ctx := context.Background()
	const clusterWide = "/apis/external.metrics.k8s.io/v1beta1/llm_saturation"
	var code int
	res := s.Cluster.Client.CoreV1().RESTClient().Get().RequestURI(clusterWide).Do(ctx).StatusCode(&code)
	if code != http.StatusNotFound || !apierrors.IsNotFound(res.Error()) {
		t.Errorf("GET %s through the aggregator: HTTP %d (%v), want 404 NotFound", clusterWide, code, res.Error())
	}
	t.Logf("GET %s through the aggregator: HTTP %d: %v", clusterWide, code, res.Error())
	client, err := rest.HTTPClientFor(s.Cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	const emptySegment = "/apis/external.metrics.k8s.io/v1beta1/namespaces//llm_saturation"
	resp, err := client.Get(s.Cluster.URL + emptySegment)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "a namespace is required") {
		t.Errorf("GET %s through the aggregator: HTTP %d %s, want the adapter's 400 asking for a namespace", emptySegment, resp.StatusCode, body)
	}
}

func waitReadyCount(t *testing.T, s *stack.Stack, name string, sel labels.Selector, n int32) {
	t.Helper()
	for end := time.Now().Add(90 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if smp := s.Observe(context.Background(), name, name, sel); smp.Ready == n && len(s.ReadyPods(sel)) == int(n) {
			return
		}
	}
	t.Fatalf("%s: %d Ready replicas not reached", name, n)
}
