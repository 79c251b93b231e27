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

// behavior is an HPA behavior the README recommends, and the demo's shortened
// scale-down (so that it ends in minutes; the demo prints both, printBehavior).
type behavior struct {
	// section names the README section that recommends it.
	section string
	// upWindow, upPods, upPeriod: scale-up stabilization window (s), at most +upPods
	// pods per upPeriod (s).
	upWindow, upPods, upPeriod int32
	// downWindow, downPeriod: the README's scale-down window (s) and −1 pod per
	// downPeriod (s).
	downWindow, downPeriod int32
}

// The README's recommendations: "Run it against a cluster" for the burst story, "Scale to
// zero and the gateway's queue" for --from-zero (no scale-up window: the first request
// already waits a whole cold start).
var (
	burstBehavior = behavior{section: "Run it against a cluster", upWindow: 30, upPods: 2, upPeriod: 60, downWindow: 300, downPeriod: 120}
	zeroBehavior  = behavior{section: "Scale to zero", upWindow: 0, upPods: 4, upPeriod: 60, downWindow: 600, downPeriod: 120}
)

// The demo's scale-down: a 60 s window, at most −1 pod per 20 s.
const demoDownWindow, demoDownPeriod = 60, 20

// demoHPA is an HPA of Deployment name on an External metric with target 1 of
// targetType, minR–maxR replicas, b's scale-up and the demo's scale-down.
func demoHPA(name, metric string, selector map[string]string, targetType autoscalingv2.MetricTargetType, minR, maxR int32, b behavior) *autoscalingv2.HorizontalPodAutoscaler {
	h := stack.HPA(name, name, metric, selector, targetType, "1", minR, maxR, demoDownWindow*time.Second)
	h.Spec.MinReplicas = ptr.To(minR)
	h.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleUp: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To(b.upWindow),
			Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: b.upPods, PeriodSeconds: b.upPeriod}}},
		ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](demoDownWindow),
			Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: demoDownPeriod}}},
	}
	return h
}

// printBehavior prints the HPA's behavior beside the README's recommendation.
func printBehavior(w io.Writer, b behavior) {
	fmt.Fprintf(w, "  %-10s  %-38s  %s\n", "behavior", fmt.Sprintf("README (%s)", b.section), "this demo")
	fmt.Fprintf(w, "  %-10s  %-38s  %s\n", "scale up", fmt.Sprintf("%d s window, at most +%d pods per %d s", b.upWindow, b.upPods, b.upPeriod), "the same")
	fmt.Fprintf(w, "  %-10s  %-38s  %s\n", "scale down", fmt.Sprintf("%d s window, at most -1 pod per %d s", b.downWindow, b.downPeriod),
		fmt.Sprintf("%d s window, at most -1 pod per %d s, so that the demo ends in minutes", demoDownWindow, demoDownPeriod))
}

// scaleDownWait bounds the watch after the load: the scale-down window, one step per pod
// above one, and a minute of slack.
func scaleDownWait(maxReplicas int) time.Duration {
	return time.Duration(demoDownWindow+(maxReplicas-1)*demoDownPeriod+60) * time.Second
}

// point is one row of the demo's timeline.
type point struct {
	stack.Sample
	// TTFTp95 is the p95 time to first token, in seconds, of the requests that started
	// in the last 30 s and finished; NaN when none did.
	TTFTp95 float64
	// GatewayQueue is the flow-controlled gateway's queue as the adapter serves it
	// (the gateway_queue label of metric), NaN without one.
	GatewayQueue float64
}

// observe takes one point of Deployment and HPA "vllm" over sel; with gatewayMetric set,
// it also reads that metric's gateway_queue label and its value into Demand.
func observe(ctx context.Context, s *stack.Stack, lg *loadgen.Gateway, sel labels.Selector, gatewayMetric string) point {
	p := point{Sample: s.Observe(ctx, "vllm", "vllm", sel), TTFTp95: math.NaN(), GatewayQueue: math.NaN()}
	if window := loadgen.Summarize(lg.Results(), time.Now().Add(-30*time.Second)); window.Requests > window.Errors {
		p.TTFTp95 = window.TTFTp95.Seconds()
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
