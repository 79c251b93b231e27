package simulate

import (
	"math"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
)

// slowEngine serves one request at a time in steps of exactly 100 ms: a request
// of 10 prompt tokens and n output tokens has its first token 100 ms after it
// starts and finishes n × 100 ms after it starts. Queueing on it can be worked
// out by hand.
func slowEngine() emulator.Config {
	return emulator.Config{
		MaxNumSeqs: 1, MaxNumBatchedTokens: 1000, BlockSize: 16, NumBlocks: 1000, MaxModelLen: 4096,
		StepTime: emulator.StepTimeModel{Base: 100 * time.Millisecond},
	}
}

// every returns requests of 10 prompt and out output tokens arriving every gap
// from start (inclusive) to end (exclusive).
func every(start, end, gap time.Duration, out int) []Request {
	var r []Request
	for t := start; t < end; t += gap {
		r = append(r, Request{At: t, PromptTokens: 10, OutputTokens: out})
	}
	return r
}

func sec(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

// testConfig is DefaultConfig on slowEngine with a 1 s TTFT SLO, a 100 %
// target, 10 s oracle intervals, 1 s samples, a fixed cold start and clients
// that never give up.
func testConfig(coldStart time.Duration) Config {
	c := DefaultConfig()
	c.Engine = slowEngine()
	c.ColdStart = coldStart
	c.ColdStartSpread, c.ReadinessProbePeriod, c.AbandonAfter = 0, 0, 0 // exact, hand-computed times
	c.TTFTSLO = time.Second
	c.SLOTarget = 1
	c.OracleInterval = 10 * time.Second
	c.SampleInterval = time.Second
	c.DrainLimit = 5 * time.Minute
	return c
}

func mustRun(t *testing.T, cfg Config, w Workload, policies []Autoscaler) *Report {
	t.Helper()
	rep, err := Run(cfg, w, policies)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep
}

func result(t testing.TB, rep *Report, name string) AutoscalerResult {
	t.Helper()
	for _, p := range rep.Autoscalers {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no policy %q in the report", name)
	return AutoscalerResult{}
}
