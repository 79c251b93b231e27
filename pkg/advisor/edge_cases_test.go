package advisor

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// TestUnmatchedGaugeOverwritten: saturation_adapter_gateway_unmatched_series
// is Set from the readings of whichever gateway input was answered last. Gateway
// A (namespace gw-a) holds 7 requests for pool-b that no policy matches; an
// answer for another policy's gateway B, with nothing unmatched, follows (the
// HPAs poll every 15 s, interleaved): the gauge drops to 0 while A still holds
// the requests, and flaps between 1 and 0 from then on.
func TestUnmatchedGaugeOverwritten(t *testing.T) {
	a, _, m := newAdvisor(t)
	gwA := &signals.Reading{Gateway: []signals.GatewaySeries{{Metric: signals.DefaultGatewayQueueMetric, Labels: map[string]string{"inference_pool": "pool-b"}, Value: 7}}}
	gwB := &signals.Reading{Gateway: []signals.GatewaySeries{{Metric: signals.DefaultGatewayQueueMetric, Labels: map[string]string{"inference_pool": "pool-a"}, Value: 30}}}
	a.GatewaySeen([]*signals.Reading{gwA})
	a.GatewaySeen([]*signals.Reading{gwB})
	if v := testutil.ToFloat64(m.UnmatchedGatewaySeries); v != 1 {
		t.Errorf("gateway A still holds 7 unmatched requests after an answer read gateway B: gauge %g, want 1", v)
	}
}
