package prometheus

import (
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// TestGatewaySeriesAge: through Prometheus, a gateway pod's only queue
// series was last sampled 40 s before the query (its scrapes stopped), with
// --max-sample-age 30s and the engine-state window at 3 × 15 s (the series
// range is 45 s, so the series is returned). An engine's reading built from
// the same samples is as old as its oldest sample, 40 s: stale. The gateway's
// reading is stamped with the query time and never ages: the provider serves
// a 40 s old queue as fresh.
func TestGatewaySeriesAge(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	e := signals.NewExtractorWith(signals.ExtractOptions{GatewayMetrics: []string{signals.DefaultGatewayQueueMetric}})
	o := newBuildOptions(e, history.HistoryOptions{StateWindow: 45 * time.Second}, nil, 15*time.Second)
	o.now = now
	last := now.Add(-40 * time.Second)
	pts := []point{{t: last.Add(-15 * time.Second), v: 30}, {t: last, v: 30}}
	age := func(name string, lset labels.Labels) time.Duration {
		h, err := build(&podData{series: []series{{labels: lset, points: pts}}}, o)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return now.Sub(h.Latest().At())
	}
	if a := age("engine", labels.FromStrings("__name__", "vllm:num_requests_waiting", "namespace", "llm", "pod", "vllm-0")); a != 40*time.Second {
		t.Fatalf("control: engine reading %s old, want 40s", a)
	}
	if a := age("gateway", labels.FromStrings("__name__", signals.DefaultGatewayQueueMetric, "namespace", "gw", "pod", "epp-0", "inference_pool", "qwen")); a != 40*time.Second {
		t.Errorf("gateway reading from a series last sampled 40s ago: %s old, want 40s (stale at max age 30s)", a)
	}
}
