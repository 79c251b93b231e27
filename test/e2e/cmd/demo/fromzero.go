package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/loadgen"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/nodeagent"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// The --from-zero story: a flow-controlled gateway pod (this binary in flowgate's pod
// mode) in front of a Deployment the HPA has scaled to zero, on a policy with a gateway
// input.
const (
	gatewayImage = "demo/flow-gateway"
	zeroPolicy   = "vllm-demand"
	zeroConfig   = `apiVersion: saturation-adapter.io/v1alpha1
kind: PolicyConfig
policies:
- name: vllm-demand
  kind: demand
  terms: [{kind: queueDepth, setPoint: 5}, {kind: kvCacheUsage, setPoint: 0.8}]
  gateway: {selector: app=vllm-gateway, match: {inference_pool: demo-pool}}
`
)

// zeroStackOptions adds what --from-zero needs to the stack: the policy file and the
// gateway's pod image.
func zeroStackOptions(so *stack.Options, dir string) error {
	cfg := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(cfg, []byte(zeroConfig), 0o600); err != nil {
		return err
	}
	so.Adapter.ExtraArgs = append(so.Adapter.ExtraArgs, "--config="+cfg)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	so.ExtraEngines = map[string]nodeagent.Engine{gatewayImage: {Binary: self, Args: []string{"gateway-addr=$(POD_IP):$(PORT)", "gateway-namespace=$(POD_NAMESPACE)"}}}
	return nil
}

// runFromZero is the --from-zero story: the pool scales itself to zero, then the load
// arrives at the gateway, which holds it while the HPA wakes the pool.
func (o *options) runFromZero(ctx context.Context, s *stack.Stack, reqs []loadgen.Request) error {
	sel, gw, err := o.deployFromZero(ctx, s)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.w, "replaying %d requests of the Azure conversation trace from %s through the gateway: %s at real speed, then a %gx burst\n\n",
		len(reqs), o.from, o.calm, o.speedup)
	lg := loadgen.New(stack.EmulatorGateway(func() []string { return []string{gw} }))
	return o.watchFromZero(ctx, s, lg, sel, reqs)
}

// deployFromZero creates the gateway, the engines at one replica and the HPA (minReplicas
// 0, AverageValue 1 on the gateway policy), and waits until the HPA has scaled the idle
// pool to zero itself (an admin-set 0 would be "scaling disabled" to the HPA). It returns
// the engines' selector and the gateway's endpoint.
func (o *options) deployFromZero(ctx context.Context, s *stack.Stack) (labels.Selector, string, error) {
	c := s.Cluster.Client
	gw := stack.EngineDeployment("vllm-gateway", 1, gatewayImage,
		"gateway-kubeconfig="+s.Cluster.AdminKubeconfig, "gateway-selector=app=vllm", "gateway-pool=demo-pool", "gateway-max-outstanding=8")
	if _, err := c.AppsV1().Deployments(s.Namespace).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		return nil, "", err
	}
	gwSel := labels.SelectorFromSet(gw.Spec.Selector.MatchLabels)
	dep := stack.EngineDeployment("vllm", 1, stack.EmulatorImage)
	if _, err := c.AppsV1().Deployments(s.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return nil, "", err
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
	hpa := demoHPA("vllm", zeroPolicy, dep.Spec.Selector.MatchLabels, autoscalingv2.AverageValueMetricType, 0, int32(o.maxReplicas))
	if _, err := c.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		return nil, "", err
	}
	fmt.Fprintf(o.w, "gateway vllm-gateway (flow control: holds requests while no engine has room); Deployment vllm (emulated vLLM)\n")
	fmt.Fprintf(o.w, "HPA vllm: %s (replicas needed by the engines, plus the gateway's queue / 5), type AverageValue, averageValue 1, %d–%d replicas\n", zeroPolicy, 0, o.maxReplicas)
	printBehavior(o.w, zeroBehavior)
	fmt.Fprintln(o.w, "waiting for the HPA to scale the idle pool to zero itself ...")
	var gwEndpoint string
	if err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		h, err := c.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Get(ctx, "vllm", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if eps := s.Endpoints(gwSel)(); len(eps) > 0 {
			gwEndpoint = eps[0]
		}
		return gwEndpoint != "" && h.Status.CurrentReplicas == 0 && conditionTrue(h, autoscalingv2.ScaledToZero), nil
	}); err != nil {
		return nil, "", err
	}
	fmt.Fprintln(o.w, "vllm is at 0 replicas (ScaledToZero=True); now the load arrives at the gateway")
	return sel, gwEndpoint, nil
}

// watchFromZero replays reqs through the gateway and prints the story: the gateway's
// queue, the demand the adapter serves, the replicas; until the pool is back at zero.
func (o *options) watchFromZero(ctx context.Context, s *stack.Stack, lg *loadgen.Gateway, sel labels.Selector, reqs []loadgen.Request) error {
	replayCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); lg.Run(replayCtx, reqs) }()
	header := fmt.Sprintf("%7s  %-5s  %6s  %7s  %5s  %12s  %13s  %6s  %9s  %8s", "time", "phase", "req/s", "desired", "ready", zeroPolicy, "gateway queue", "KV", "TTFT p95", "inflight")
	fmt.Fprintln(o.w, header)
	fmt.Fprintln(o.w, strings.Repeat("-", len(header)))
	var points []point
	var firstReady, drained, replayEnd time.Time
	prevT, prevSent := start, 0
	for {
		p := observe(ctx, s, lg, sel, zeroPolicy)
		if dt := p.T.Sub(prevT).Seconds(); dt > 0 {
			p.OfferedRPS = float64(lg.Sent()-prevSent) / dt
		}
		prevT, prevSent = p.T, lg.Sent()
		points = append(points, p)
		fmt.Fprintf(o.w, "%6.0fs  %-5s  %6.1f  %7s  %5d  %12s  %13s  %6s  %9s  %8d\n", p.T.Sub(start).Seconds(), o.phaseAt(p.T.Sub(start), !replayEnd.IsZero()),
			p.OfferedRPS, desired(p), p.Ready, num(p.Demand, 3), num(p.GatewayQueue, 0), pct(p.KV), secs(p.TTFTp95), lg.Inflight())
		if firstReady.IsZero() && p.Ready > 0 {
			firstReady = time.Now()
		}
		if !firstReady.IsZero() && drained.IsZero() && p.GatewayQueue == 0 {
			drained = time.Now()
		}
		if replayEnd.IsZero() {
			select {
			case <-done:
				replayEnd = time.Now()
				fmt.Fprintln(o.w, "-- load over; watching the pool go back to zero --")
			default:
			}
		} else if (p.Spec == 0 && p.Ready == 0) || time.Since(replayEnd) > scaleDownWait(o.maxReplicas) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(o.interval):
		}
	}
	return o.reportFromZero(start, lg, points, firstReady, drained, replayEnd)
}

// reportFromZero prints the scale-from-zero summary and writes the chart and the CSV.
func (o *options) reportFromZero(start time.Time, lg *loadgen.Gateway, points []point, firstReady, drained, replayEnd time.Time) error {
	all := loadgen.Summarize(lg.Results(), time.Time{})
	at := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return "+" + t.Sub(start).Round(time.Second).String()
	}
	last := points[len(points)-1]
	fmt.Fprintf(o.w, "\nsummary (scale from zero)\n  requests: %s\n  first request at +0s (held by the gateway), first Ready pod at %s, gateway queue drained at %s\n  %d replicas %s after the load\n",
		all, at(firstReady), at(drained), last.Spec, time.Since(replayEnd).Round(time.Second))
	fmt.Fprintln(o.w, "  At 0 pods the engines have nothing to say: the gateway's queue is the only demand signal, and the HPA computes ceil(value / 1) from it.")
	fmt.Fprint(o.w, milliNote)
	return o.writeOutputs(start, points, chartSpec{
		title:  fmt.Sprintf("HPA on %s (AverageValue 1, minReplicas 0) behind a flow-controlled gateway", zeroPolicy),
		metric: zeroPolicy,
		phases: o.phases(),
	})
}

func conditionTrue(h *autoscalingv2.HorizontalPodAutoscaler, typ autoscalingv2.HorizontalPodAutoscalerConditionType) bool {
	for _, c := range h.Status.Conditions {
		if c.Type == typ {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
