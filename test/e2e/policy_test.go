package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/loadgen"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// policyConfig is the adapter's --config in TestPolicies: a chat policy whose queue term
// tolerates 20 waiting, with a KV term and a TTFT p90 guardrail at 1.5 s.
const policyConfig = `apiVersion: saturation-adapter.io/v1alpha1
kind: PolicyConfig
policies:
- name: chat-ttft
  kind: mean
  terms:
  - {kind: queueDepth, setPoint: 20}
  - {kind: kvCacheUsage, setPoint: 0.8}
  - {kind: ttft, slo: 1500ms, quantile: 0.9, window: 30s}
`

// Engines whose prefill is the bottleneck but whose batch admits everything: a 16,384-token
// step budget at 200 µs per prefill token, 64 batch slots and a KV cache far larger than the
// load needs. 4,000-token prompts arriving at 1.1 requests/s (a Poisson process) are admitted
// at the next step, so one replica's queue stays at 0–4 (under the set point of 5) and its
// KV near 1 %, while the steps carrying their prefills make its p90 time to first token about
// 8 s; at half the rate per replica it is about 2.3 s (lab/emulator on its virtual clock,
// two minutes of the same load).
var prefillBoundArgs = []string{
	"--max-num-seqs=64", "--max-num-batched-tokens=16384", "--num-gpu-blocks=40000", "--max-model-len=16384",
	"--step-time-base=10ms", "--step-time-per-seq=1ms", "--step-time-per-prefill-token=200us",
}

// TestPolicies runs the policy features on one control plane, with the adapter on
// --config: a TTFT guardrail scales a Deployment whose queue stays short because its
// prompts are long, where the engine-only score would not; and a wedged engine (the
// emulator's freeze switch: requests queue, nothing completes) does not pin an HPA on
// llm_demand_replicas at maxReplicas.
func TestPolicies(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(cfg, []byte(policyConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startStack(t, stack.Options{
		ColdStart: 2 * time.Second,
		Adapter:   stack.AdapterOptions{ScrapeInterval: time.Second, ScrapeTimeout: 500 * time.Millisecond, ExtraArgs: []string{"--config=" + cfg}},
	})
	t.Run("TTFT guardrail scales a prefill-bound pool", func(t *testing.T) { testTTFTGuardrail(t, s) })
	t.Run("a wedged engine does not pin maxReplicas", func(t *testing.T) { testWedgedEngine(t, s) })
}

func testTTFTGuardrail(t *testing.T, s *stack.Stack) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const name = "chat-ttft"
	dep := stack.EngineDeployment(name, 1, stack.EmulatorImage, prefillBoundArgs...)
	if _, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
	waitReadyCount(t, s, name, sel, 1)
	hpa := stack.HPA(name, name, "chat-ttft", dep.Spec.Selector.MatchLabels, autoscalingv2.ValueMetricType, "1", 1, 4, 30*time.Second)
	if _, err := s.Cluster.Client.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gw := loadgen.New(stack.EmulatorGateway(s.Endpoints(sel)))
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	go gw.Run(loadCtx, loadgen.Poisson(0, 1.1, 4*time.Minute, 4000, 8, 1))

	// Until the HPA scales up: the guardrail policy's value, and the queue and KV of the pool.
	var guarded, queues, kvs []float64
	start := time.Now()
	for {
		smp := s.Observe(ctx, name, name, sel)
		if v, _, err := s.ExternalMetric(ctx, "chat-ttft", sel); err == nil {
			guarded = append(guarded, v)
		}
		queues, kvs = append(queues, smp.Queue), append(kvs, smp.KV)
		t.Logf("spec=%d desired=%d chat-ttft=%s llm_saturation=%.3f queue=%.0f kv=%.3f inflight=%d", smp.Spec, smp.Desired, lastOf(guarded), smp.Saturation, smp.Queue, smp.KV, gw.Inflight())
		if smp.Desired >= 2 {
			t.Logf("the TTFT guardrail scaled %s to %d after %s", name, smp.Desired, time.Since(start).Round(time.Second))
			break
		}
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("the TTFT guardrail policy did not scale up within 3 min (last sample %+v)", smp)
		}
		time.Sleep(time.Second)
	}
	// Neither the queue term (20 waiting) nor the KV term (0.8) ever reached its set point:
	// only the latency term can have asked for more replicas.
	if q, kv := maxOf(queues), maxOf(kvs); q >= 20 || kv >= 0.8 {
		t.Errorf("queue reached %.0f (set point 20) or KV %.3f (0.8): the test shows nothing about the guardrail", q, kv)
	}
	if m := maxOf(guarded); !(m > 1) {
		t.Errorf("chat-ttft never exceeded 1 (max %.3f), yet the HPA scaled", m)
	}
	t.Logf("queue at most %.0f, KV at most %.3f, chat-ttft up to %.3f: the TTFT guardrail scaled it", maxOf(queues), maxOf(kvs), maxOf(guarded))
}

func testWedgedEngine(t *testing.T, s *stack.Stack) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const name = "vllm-wedge"
	dep := stack.EngineDeployment(name, 3, stack.EmulatorImage, testEmulatorArgs...)
	if _, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
	waitReadyCount(t, s, name, sel, 3)
	hpa := stack.HPA(name, name, "llm_demand_replicas", dep.Spec.Selector.MatchLabels, autoscalingv2.AverageValueMetricType, "1", 3, 6, 0)
	if _, err := s.Cluster.Client.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wedged := s.Endpoints(sel)()[0]
	setFault(t, wedged, "freeze")
	// One request waits on the frozen engine until the adapter judges it wedged
	// (--engine-state-window, 10 s of no progress), then 40 more pile up: 41 waiting, a
	// raw demand of 8 replicas.
	reqCtx, stopReqs := context.WithCancel(ctx)
	defer stopReqs()
	var wg sync.WaitGroup
	defer wg.Wait()
	send := func(n int) {
		for range n {
			wg.Add(1)
			go func() { defer wg.Done(); postCompletion(reqCtx, wedged) }()
		}
	}
	send(1)
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, list, err := s.ExternalMetric(ctx, "llm_demand_replicas", sel)
		if err == nil && list.Items[0].MetricLabels["pods_wedged"] == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the adapter did not report the frozen engine as wedged within 60 s (answer %+v, err %v)", list, err)
		}
		time.Sleep(time.Second)
	}
	send(40)
	for start := time.Now(); time.Since(start) < 40*time.Second; time.Sleep(time.Second) {
		smp := s.Observe(ctx, name, name, sel)
		if smp.Spec > 3 || smp.Desired > 3 {
			t.Fatalf("the wedged engine's queue scaled the Deployment: spec %d desired %d, demand %.3f, queue %.0f", smp.Spec, smp.Desired, smp.Demand, smp.Queue)
		}
		if time.Since(start) > 5*time.Second && smp.Queue < 40 {
			t.Fatalf("the wedged engine's queue is %.0f, not the 41 sent: the test shows nothing", smp.Queue)
		}
	}
	v, list, err := s.ExternalMetric(ctx, "llm_demand_replicas", sel)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("41 requests stuck on a wedged engine: llm_demand_replicas %.3f %v; replicas held at 3 (max 6)", v, list.Items[0].MetricLabels)
	setFault(t, wedged, "none")
}

// setFault switches an emulated engine's fault mode.
func setFault(t *testing.T, endpoint, mode string) {
	t.Helper()
	resp, err := http.Post(endpoint+"/admin/fault?mode="+mode, "text/plain", nil)
	if err != nil {
		t.Fatalf("setting fault %s on %s: %v", mode, endpoint, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("setting fault %s on %s: %s", mode, endpoint, resp.Status)
	}
}

// postCompletion sends one completion straight to an engine and waits for it or ctx.
func postCompletion(ctx context.Context, endpoint string) {
	body, _ := json.Marshal(map[string]any{"model": stack.Model, "prompt": "x", "max_tokens": 8, "prompt_tokens": 100, "output_tokens": 8})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func lastOf(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	return fmtF(v[len(v)-1])
}
