package policy

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
)

// An explicit sample timestamp an hour old makes the reading an hour old: it
// is stale however recently it was scraped (saturation 8 was served as fresh).
func TestSampleTimestampsAge(t *testing.T) {
	old := t0.Add(-time.Hour)
	body := "vllm:num_requests_waiting{engine=\"0\"} 40 " + strconv.FormatInt(old.UnixMilli(), 10) + "\n"
	r := read(t, body, t0)
	if !r.SampleTime.Equal(old) || !r.At().Equal(old) {
		t.Fatalf("SampleTime %v At %v, want %v", r.SampleTime, r.At(), old)
	}
	c := builtin(t, DefaultUnknownSaturation)
	b := c.Lookup(MetricSaturation).NewPool(t0, maxAge)
	v := b.Add(history.NewHistory(history.HistoryOptions{}, r), "")
	if v.Known || !strings.Contains(v.Why, "timestamped") {
		t.Errorf("pod %+v, want unknown because its samples are an hour old", v)
	}
}
