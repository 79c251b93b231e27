package prometheus

import (
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/saturation-adapter/saturation-adapter/internal/metricdocs"
)

// TestMetricsDocumented keeps the documented metric table and this package's
// metrics in step: names, types, labels and every value of a fixed label.
func TestMetricsDocumented(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"series", "window"} {
		for _, o := range []string{"success", "error"} {
			m.QueryDuration.WithLabelValues(q, o).Observe(0.1)
		}
	}
	for _, r := range ErrorReasons() {
		m.QueryErrors.WithLabelValues(string(r)).Inc()
	}
	m.DataAge.Observe(3)
	metricdocs.Check(t, reg, "../../", 3)
}

func TestReasonOf(t *testing.T) {
	if r := reasonOf(fmt.Errorf("wrapped: %w", errTooLarge)); r != ReasonResponse {
		t.Errorf("a body too large: %s", r)
	}
	if r := reasonOf(errors.New("dial tcp 127.0.0.1:1: connect: connection refused")); r != ReasonConnect {
		t.Errorf("a refused connection: %s", r)
	}
}
