package policy

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/internal/testfixture"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// FuzzPool: whatever the bodies, every policy's pool value is nil (no data) or
// a finite number >= 0; a pool with no known pod is nil, never 0.
func FuzzPool(f *testing.F) {
	for _, b := range testfixture.Bodies(f) {
		f.Add(b, "")
	}
	e := signals.NewExtractor()
	c, err := NewCatalog(append(BuiltinPolicies(DefaultSetPoints(), 1, time.Minute),
		Policy{Name: "all", Kind: KindDemand, UnknownSaturation: 1, QueueCap: 100, Terms: []Term{
			{Kind: TermQueueDepth, SetPoint: 0.001, MaxRatio: 1e6}, {Kind: TermKVCacheUsage, SetPoint: 0.001},
			{Kind: TermBatchSlots, SetPoint: 0.5, MaxNumSeqs: 4}, {Kind: TermPreemptionRate, SetPoint: 0.001},
			{Kind: TermTTFT, SetPoint: 0.001}, {Kind: TermE2ELatency, SetPoint: 1}, {Kind: TermInterTokenLatency, SetPoint: 1},
		}})...)
	if err != nil {
		f.Fatal(err)
	}
	opts := history.HistoryOptions{Needs: c.Needs()}
	f.Fuzz(func(t *testing.T, body []byte, _ string) {
		// The body split in two scrapes of one pod, 2 s apart, beside a dark pod.
		half := strings.SplitAfterN(string(body), "\n", 2)
		var h *history.History
		for i, part := range half {
			r, err := e.Extract([]byte(part))
			if err != nil {
				continue
			}
			r.Time = t0.Add(time.Duration(i) * 2 * time.Second)
			h = h.Append(&r, opts)
		}
		now := t0.Add(2 * time.Second)
		for _, p := range c.Policies() {
			b := p.NewPool(now, maxAge)
			b.Add(h, "")
			b.Add(nil, "not scraped yet")
			pool := b.Pool()
			if pool.Value == nil {
				continue
			}
			if v := *pool.Value; math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Fatalf("%s = %g", p.Name, v)
			}
			if pool.Known == 0 {
				t.Fatalf("%s = %g with no known pod", p.Name, *pool.Value)
			}
		}
	})
}
