package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/loadgen"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// behavior is an HPA behavior the documentation recommends. The demo's own differs in
// its periods only (demoBehavior), and the demo prints both (printBehavior).
type behavior struct {
	// doc names the document (and section) that recommends it.
	doc string
	// upWindow, upPods, upPeriod: scale-up stabilization window (s), at most +upPods
	// pods per upPeriod (s).
	upWindow, upPods, upPeriod int32
	// downWindow, downPods, downPeriod: scale-down stabilization window (s), at most
	// −downPods pods per downPeriod (s).
	downWindow, downPods, downPeriod int32
}

// The documentation's recommendations: the README's "Your first HPA" for the burst
// story, docs/scale-to-zero.md's HPA for --from-zero (no scale-up window: the first
// request already waits a whole cold start).
var (
	burstBehavior = behavior{doc: "README (Your first HPA)", upWindow: 30, upPods: 2, upPeriod: 60, downWindow: 300, downPods: 1, downPeriod: 120}
	zeroBehavior  = behavior{doc: "docs/scale-to-zero.md", upWindow: 0, upPods: 4, upPeriod: 60, downWindow: 600, downPods: 1, downPeriod: 120}
)

// demoBehavior is the demo's HPA behavior. The documented periods are sized for vLLM's
// model load (minutes); the emulator loads in --cold-start (5 s) and the replay lasts 3
// minutes, so the demo scales up without a window by up to 4 pods per 15 s and down after
// a 60 s window by 1 pod per 20 s.
var demoBehavior = behavior{upWindow: 0, upPods: 4, upPeriod: 15, downWindow: 60, downPods: 1, downPeriod: 20}

// demoHPA is an HPA of Deployment name on an External metric with target 1 of
// targetType, minR–maxR replicas and the demo's behavior.
func demoHPA(name, metric string, selector map[string]string, targetType autoscalingv2.MetricTargetType, minR, maxR int32) *autoscalingv2.HorizontalPodAutoscaler {
	b := demoBehavior
	h := stack.HPA(name, name, metric, selector, targetType, "1", minR, maxR, time.Duration(b.downWindow)*time.Second)
	h.Spec.MinReplicas = ptr.To(minR)
	h.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleUp: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To(b.upWindow),
			Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: b.upPods, PeriodSeconds: b.upPeriod}}},
		ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To(b.downWindow),
			Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: b.downPods, PeriodSeconds: b.downPeriod}}},
	}
	return h
}

func (b behavior) up() string {
	return fmt.Sprintf("%d s window, at most +%d pods per %d s", b.upWindow, b.upPods, b.upPeriod)
}

func (b behavior) down() string {
	return fmt.Sprintf("%d s window, at most -%d pod per %d s", b.downWindow, b.downPods, b.downPeriod)
}

// printBehavior prints the demo's HPA behavior beside the documented recommendation,
// and why they differ.
func printBehavior(w io.Writer, documented behavior) {
	fmt.Fprintf(w, "  %-10s  %-38s  %s\n", "behavior", documented.doc, "this demo")
	fmt.Fprintf(w, "  %-10s  %-38s  %s\n", "scale up", documented.up(), demoBehavior.up())
	fmt.Fprintf(w, "  %-10s  %-38s  %s\n", "scale down", documented.down(), demoBehavior.down())
	fmt.Fprintf(w, "  the documented periods are sized for vLLM's model load (minutes); the emulator loads in seconds and the replay lasts minutes\n")
}

// scaleDownWait bounds the watch after the load: the scale-down window, one step per pod
// above one, and a minute of slack.
func scaleDownWait(maxReplicas int) time.Duration {
	b := demoBehavior
	return time.Duration(int(b.downWindow)+(maxReplicas-1)*int(b.downPeriod)+60) * time.Second
}

// point is one row of the demo's timeline.
type point struct {
	stack.Sample
	// TTFTp95 is the p95 time to first token, in seconds, of the requests whose first
	// token came in the last 30 s (as a histogram's rate over a 30 s window sees them);
	// NaN when none did.
	TTFTp95 float64
	// GatewayQueue is the flow-controlled gateway's queue as the adapter serves it
	// (the gateway_queue label of metric), NaN without one.
	GatewayQueue float64
}

// observe takes one point of Deployment and HPA "vllm" over sel; with gatewayMetric set,
// it also reads that metric's gateway_queue label and its value into Demand.
func observe(ctx context.Context, s *stack.Stack, lg *loadgen.Gateway, sel labels.Selector, gatewayMetric string) point {
	p := point{Sample: s.Observe(ctx, "vllm", "vllm", sel), TTFTp95: math.NaN(), GatewayQueue: math.NaN()}
	cut := time.Now().Add(-30 * time.Second)
	var recent []loadgen.Result
	for _, r := range lg.Results() {
		if r.Err == nil && r.Start.Add(r.TTFT).After(cut) {
			recent = append(recent, r)
		}
	}
	if len(recent) > 0 {
		p.TTFTp95 = loadgen.Summarize(recent, time.Time{}).TTFTp95.Seconds()
	}
	if gatewayMetric != "" {
		v, list, _ := s.ExternalMetric(ctx, gatewayMetric, sel)
		p.Demand = v
		if list != nil && len(list.Items) == 1 {
			if q, err := strconv.ParseFloat(list.Items[0].MetricLabels["gateway_queue"], 64); err == nil {
				p.GatewayQueue = q
			}
		}
	}
	return p
}
