package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/loadgen"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// TestHarness checks the harness alone: the control plane runs Deployments, the node agent
// gives their pods loopback IPs, starts engines and makes them Ready, and scaling down
// drains and removes pods and their processes.
func TestHarness(t *testing.T) {
	t.Parallel()
	s := startStack(t, stack.Options{NoAdapter: true, ColdStart: 500 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	out, err := s.Cluster.Kubectl(ctx, "version", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "gitVersion: v1.37.2") {
		t.Errorf("kubectl version does not report v1.37.2:\n%s", out)
	}

	dep := stack.EngineDeployment("stub", 3, stubImage)
	if _, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
	waitReady := func(n int) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
			d, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Get(ctx, "stub", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return len(s.ReadyPods(sel)) == n && d.Status.ReadyReplicas == int32(n) && len(s.Agent.Pods()) == n, nil
		})
		if err != nil {
			t.Fatalf("waiting for %d ready pods: %v (ready %d, agent %d)", n, err, len(s.ReadyPods(sel)), len(s.Agent.Pods()))
		}
	}
	start := time.Now()
	waitReady(3)
	t.Logf("3 pods Ready after %s", time.Since(start).Round(time.Millisecond))

	ips := map[string]bool{}
	for _, p := range s.ReadyPods(sel) {
		if !strings.HasPrefix(p.Status.PodIP, "127.") || ips[p.Status.PodIP] {
			t.Errorf("pod %s has IP %q, want a unique 127.x.y.z", p.Name, p.Status.PodIP)
		}
		ips[p.Status.PodIP] = true
	}
	for _, ep := range s.Endpoints(sel)() {
		if err := httpGet(ctx, ep+"/metrics"); err != nil {
			t.Errorf("engine endpoint: %v", err)
		}
	}

	// Scale down: the agent drains, stops the processes and removes the pods.
	before := s.Agent.Pods()
	if _, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Patch(ctx, "stub", "application/merge-patch+json",
		[]byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	waitReady(1)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := s.Cluster.Client.CoreV1().Pods(s.Namespace).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 1, nil
	})
	if err != nil {
		t.Fatalf("pods not removed after scale-down: %v", err)
	}
	t.Logf("scaled 3→1 in %s", time.Since(start).Round(time.Millisecond))
	stopped := 0
	for _, p := range before {
		if !processAlive(p.PID) {
			stopped++
		}
	}
	if stopped != 2 {
		t.Errorf("%d engine processes stopped after scale-down, want 2", stopped)
	}
}

// TestDrain: a pod deleted while its engine still serves requests leaves the gateway's
// pool at once, but its engine keeps running until those requests finish.
func TestDrain(t *testing.T) {
	t.Parallel()
	s := startStack(t, stack.Options{NoAdapter: true, EmulatorArgs: testEmulatorArgs})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dep := stack.EngineDeployment("drain", 2, stack.EmulatorImage)
	if _, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		return len(s.ReadyPods(sel)) == 2, nil
	}); err != nil {
		t.Fatalf("2 Ready pods: %v", err)
	}
	// 8 requests of 150 output tokens (about 5 s each at 30 ms a step), spread over both
	// pods by the gateway, then scale to 1 while they run.
	gw := loadgen.New(stack.EmulatorGateway(s.Endpoints(sel)))
	done := make(chan struct{})
	go func() {
		defer close(done)
		gw.Run(ctx, loadgen.Step(0, 20, 400*time.Millisecond, 100, 150))
	}()
	time.Sleep(time.Second)
	if _, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Patch(ctx, "drain", "application/merge-patch+json",
		[]byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	<-done
	sum := loadgen.Summarize(gw.Results(), time.Time{})
	t.Logf("requests across the scale-down: %s", sum)
	if sum.Requests != 8 || sum.Errors != 0 {
		t.Fatalf("want 8 requests without error across the scale-down, got %s", sum)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := s.Cluster.Client.CoreV1().Pods(s.Namespace).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 1, nil
	}); err != nil {
		t.Fatalf("drained pod not removed: %v", err)
	}
}
