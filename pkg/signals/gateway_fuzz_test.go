package signals

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

// FuzzGateway feeds the gateway decoder (an endpoint picker's /metrics, or the
// same series as samples from a time-series database) anything: it never
// panics, and every gateway series it returns is either valid (a finite
// count in [0, MaxRequests]) or marked Invalid with Value 0; each series
// identity appears once (the duplicate rule); the rejections are counted;
// the reading is bounded and renders as JSON (explain).
func FuzzGateway(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "hazards", "NC-*epp*.prom"))
	more, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "hazards", "NC-25-frontend.prom"))
	for _, p := range append(files, more...) {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "")
	}
	const q = "inference_extension_flow_control_queue_size"
	f.Add([]byte(q+`{inference_pool="p"} NaN`+"\n"+q+`{inference_pool="p"} 3`+"\n"+q+`{inference_pool="p"} -3`+"\n"), "")
	f.Add([]byte(q+`{inference_pool="p"} 1e300 1764590400000`+"\n"+q+`{inference_pool="p"} +Inf 1764590300000`+"\n"), "")
	f.Add([]byte("# TYPE "+q+" gauge\n"+q+`{inference_pool="p"} 7 1764590400.5`+"\n# EOF\n"), "application/openmetrics-text; version=1.0.0")
	e := NewExtractorWith(ExtractOptions{GatewayMetrics: []string{DefaultGatewayQueueMetric, "llm_d_epp_flow_control_queue_size"}})
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		r, err := e.ExtractContent(body, contentType)
		if err == nil {
			checkGateway(t, &r)
		}
		// The same series as samples (the Prometheus path), each sample at a
		// time from its value's bits, so that duplicates differ in time too.
		var samples []Sample
		for _, g := range r.Gateway {
			lset := labels.FromMap(g.Labels)
			b := labels.NewBuilder(lset).Set("__name__", g.Metric).Set("job", "a")
			samples = append(samples, Sample{Labels: b.Labels(), Value: g.Value, T: time.UnixMilli(int64(len(g.Labels)))})
			samples = append(samples, Sample{Labels: labels.NewBuilder(b.Labels()).Set("job", "b").Labels(), Value: math.Float64frombits(uint64(len(body))), T: time.UnixMilli(1)})
		}
		if rs, err := e.ExtractSamples(samples); err == nil {
			checkGateway(t, &rs)
		}
	})
}

// checkGateway asserts the invariants of a reading's gateway series.
func checkGateway(t *testing.T, r *Reading) {
	t.Helper()
	checkReading(t, r)
	seen := map[string]bool{}
	invalid := 0
	for i := range r.Gateway {
		g := &r.Gateway[i]
		k := g.key()
		if seen[k] {
			t.Fatalf("gateway series %s appears twice", k)
		}
		seen[k] = true
		if g.Invalid != "" {
			invalid++
			if g.Value != 0 {
				t.Fatalf("rejected gateway series %+v keeps a value", g)
			}
			continue
		}
		if math.IsNaN(g.Value) || math.IsInf(g.Value, 0) || g.Value < 0 || g.Value > MaxRequests {
			t.Fatalf("gateway series %+v has an invalid value", g)
		}
		if len(g.Labels) > maxGatewayLabels {
			t.Fatalf("gateway series keeps %d labels", len(g.Labels))
		}
	}
	total := 0
	for _, n := range r.Invalid {
		total += n
	}
	if total < invalid {
		t.Fatalf("%d rejected gateway series kept, %d counted", invalid, total)
	}
	if _, err := json.Marshal(r.Gateway); err != nil {
		t.Fatalf("gateway series do not render as JSON: %v", err)
	}
}
