package emulator_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/saturation-adapter/saturation-adapter/internal/testfixture"
	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// The emulator's /metrics, served over HTTP as the adapter scrapes it, is read by
// the adapter's extractor exactly as the real vLLM V1 dump: same dialect, same
// metric names, and a queue the fused score sees as saturated.
func TestMetricsReadLikeRealDump(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var m *emulator.Metrics
	sim, err := emulator.NewSimulator(emulator.DefaultConfig(), t0, func(r *emulator.StepResult) { m.Observe(0, r) })
	if err != nil {
		t.Fatal(err)
	}
	m, err = emulator.NewMetrics(emulator.MetricsOptions{ModelName: "m", Names: emulator.NamesV1, Engines: 1,
		MaxModelLen: emulator.DefaultConfig().MaxModelLen, CreatedAt: t0},
		func(int) emulator.Snapshot { return sim.Engine().Snapshot() })
	if err != nil {
		t.Fatal(err)
	}
	// A burst well past one engine's capacity leaves a queue.
	var burst []emulator.Arrival
	for i := range 3000 {
		burst = append(burst, emulator.Arrival{At: time.Duration(i) * time.Millisecond,
			Request: emulator.Request{ID: fmt.Sprint(i), PromptTokens: 2000, MaxTokens: 500}})
	}
	sim.Schedule(burst...)
	sim.RunFor(3 * time.Second)

	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	emu, err := signals.NewExtractor().Extract(body)
	if err != nil {
		t.Fatal(err)
	}
	real, err := signals.NewExtractor().Extract(testfixture.Sample(t, "vllm_v1-0.10-nvcr25.09_single-engine.prom"))
	if err != nil {
		t.Fatal(err)
	}
	if emu.Dialect != real.Dialect {
		t.Errorf("dialect: emulator %q, real dump %q", emu.Dialect, real.Dialect)
	}
	// The emulator also exports vllm:inter_token_latency_seconds, the name that
	// replaced time_per_output_token_seconds after the 0.10 release the real dump
	// comes from; every other family is read under the same name.
	ignoreITL := cmpopts.IgnoreMapEntries(func(k, _ string) bool { return k == "interTokenLatency" })
	if diff := cmp.Diff(real.Sources, emu.Sources, ignoreITL); diff != "" {
		t.Errorf("metric names read (-real +emulator):\n%s", diff)
	}
	snap := sim.Engine().Snapshot()
	q, ok := emu.Value(signals.QueueDepth)
	if !ok || q != float64(snap.Waiting) || snap.Waiting == 0 {
		t.Errorf("queue depth = %v (%v), want the engine's %d (> 0)", q, ok, snap.Waiting)
	}
	if sp := policy.DefaultSetPoints(); q <= sp.QueueDepth {
		t.Errorf("queue depth %v is within the default set point %v: the burst did not saturate the engine", q, sp.QueueDepth)
	}
}
