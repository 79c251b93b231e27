package simulate

import (
	"bytes"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
)

// TestAdapterSourceOnRenderedMetrics renders two emulated engines' /metrics with
// the emulator's collector and checks what the adapter source serves, by hand:
// pod 0 has 12 requests waiting, pod 1 none; both have only the null KV block in
// use (1/27000).
func TestAdapterSourceOnRenderedMetrics(t *testing.T) {
	f := newFleet(emulator.DefaultConfig(), 0, epoch(), nil, nopRecorder{}, time.Hour)
	if err := f.addReady(2); err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		if err := f.pods[0].engine.Add(emulator.Request{ID: strconv.Itoa(i), PromptTokens: 100, MaxTokens: 10}, epoch()); err != nil {
			t.Fatal(err)
		}
	}
	src := defaultAdapterSource()()
	for _, p := range f.pods {
		body, err := f.render(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(body, []byte(`vllm:num_requests_waiting{engine="0",model_name="simulated"}`)) {
			t.Fatalf("rendered body lacks vLLM's queue gauge:\n%s", body)
		}
		if err := src.Scrape(p.num, body); err != nil {
			t.Fatal(err)
		}
	}
	kv := 1.0 / 27000
	tests := []struct {
		metric  string
		fresh   []int
		unknown int
		want    float64
		wantErr string
	}{
		{metric: MetricQueueDepth, fresh: []int{0, 1}, want: 12},
		{metric: MetricRunning, fresh: []int{0, 1}, want: 0},
		{metric: MetricKVCacheUsage, fresh: []int{0, 1}, want: kv},
		// Pod 1 is idle: its KV residue (the null block) is not demand.
		{metric: MetricSaturation, fresh: []int{0, 1}, want: (12.0 / 5) / 2},
		{metric: MetricDemandReplicas, fresh: []int{0, 1}, want: 12.0 / 5},
		{metric: MetricSaturation, fresh: []int{0, 1}, unknown: 1, want: (12.0/5 + 1) / 3},
		{metric: MetricDemandReplicas, fresh: []int{1}, unknown: 2, want: 2},
		// Issue 20: a raw signal with a pod that never reported has no value (it
		// counted the pod at the other's 0, and an HPA went 4 → 1).
		{metric: MetricQueueDepth, fresh: []int{1}, unknown: 1, wantErr: "1 of the 2 Ready pods have no fresh data"},
		{metric: MetricSaturation, unknown: 2, wantErr: "none has fresh data"},
		{metric: MetricSaturation, wantErr: "no pod is Running and Ready"},
		{metric: "llm_made_up", fresh: []int{0}, wantErr: "unknown metric"},
	}
	for _, tt := range tests {
		got, err := src.External(tt.metric, tt.fresh, tt.unknown)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("External(%s, %v, %d) error = %v, want %q", tt.metric, tt.fresh, tt.unknown, err, tt.wantErr)
			}
			continue
		}
		if err != nil || math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("External(%s, %v, %d) = %v, %v; want %v", tt.metric, tt.fresh, tt.unknown, got, err, tt.want)
		}
	}
	if v, ok := src.PodValue(MetricSaturation, 0); !ok || v != 12.0/5 {
		t.Errorf("PodValue(saturation, pod 0) = %v, %v; want 2.4", v, ok)
	}
	if _, ok := src.PodValue(MetricSaturation, 7); ok {
		t.Error("PodValue of a pod never scraped is ok")
	}
	if err := src.Scrape(0, []byte("not an exposition {")); err == nil {
		t.Error("Scrape of a broken body succeeded")
	}
	if _, ok := src.PodValue(MetricQueueDepth, 0); ok {
		t.Error("a failed scrape left the pod's old reading in place")
	}
	if !slices.Contains(src.Metrics(false), MetricDemandReplicas) || slices.Contains(src.Metrics(true), MetricDemandReplicas) {
		t.Error("llm_demand_replicas must be served as an External metric only")
	}
}

func TestNewAdapterSourceValidates(t *testing.T) {
	for _, tc := range []struct{ q, kv, unknown float64 }{{0, 0.8, 1}, {5, 1.5, 1}, {5, 0.8, -1}, {math.NaN(), 0.8, 1}} {
		if _, err := NewAdapterSource(tc.q, tc.kv, tc.unknown); err == nil {
			t.Errorf("NewAdapterSource(%v) accepted invalid set points", tc)
		}
	}
}
