package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// simArgs shape llm-d-inference-sim v0.10.2 like the emulator in the scaling tests: a few
// requests at once, fixed latencies, so one replica serves about 4 requests/s.
var simArgs = []string{
	"--max-num-seqs=4",
	"--time-to-first-token=100ms",
	"--inter-token-latency=20ms",
}

// TestInteropInferenceSim repeats the scale-up with github.com/llm-d/llm-d-inference-sim
// v0.10.2 (a third-party vLLM simulator: vLLM V1 metric names, no engine label) as the
// engine.
func TestInteropInferenceSim(t *testing.T) {
	t.Parallel()
	tools, _, err := stack.DirsFromEnv()
	if err != nil {
		t.Skip(err)
	}
	if _, err := os.Stat(filepath.Join(tools, "llm-d-inference-sim")); err != nil {
		t.Fatalf("llm-d-inference-sim not built (make e2e-tools): %v", err)
	}
	s := scaleStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := newScaleRun(t, s, "sim", stack.SimImage, "llm_saturation", autoscalingv2.ValueMetricType, "1", simArgs...)
	done := r.startLoad(ctx, testRPS, loadLength)
	start := time.Now()
	smp := r.waitFor("≥3 desired replicas", loadLength, func(smp stack.Sample) bool { return smp.Desired >= 3 })
	t.Logf("llm-d-inference-sim: HPA wants %d replicas %s after the load started", smp.Desired, time.Since(start).Round(time.Second))
	cancel()
	<-done
}
