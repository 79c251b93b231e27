package history

import (
	"runtime"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/internal/testfixture"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// everyTermNeeds is what the built-in policies beside one with every term kind
// need kept per pod, as hack/benchscale's "every" runs: histograms read,
// windows of 2, 1 and 5 minutes (the preemption rate's, the TTFT and
// inter-token latency's, the e2e latency's). pkg/policy's
// TestEveryTermNeeds holds it to that catalog's Needs.
func everyTermNeeds() Needs {
	return Needs{Histograms: true, Windows: []WindowKey{{Window: 2 * time.Minute}, {Window: time.Minute}, {Window: 5 * time.Minute}}}
}

// BenchmarkScrapeReading is the pkg/signals part of one scrape in the steady
// state: extract the real 47 KB vLLM V1 dump and append the reading to a pod's
// full History (2 s after the one before; each op the next of 1,000 pods),
// under the built-in policies
// ("default": no histograms, readings kept for the 10 s state window) and
// under everyTermNeeds ("every": histograms, readings kept for the 5 m
// window, thinned to DefaultMaxReadings). B/pod is the live heap of one pod's
// full History, measured over 1,000 pods: what the readings and window
// aggregates of an engine cost the adapter.
func BenchmarkScrapeReading(b *testing.B) {
	body := testfixture.Sample(b, realV1Dump)
	for _, tc := range []struct {
		name  string
		needs Needs
	}{{"default", Needs{}}, {"every", everyTermNeeds()}} {
		b.Run(tc.name, func(b *testing.B) {
			needs := tc.needs
			e := signals.NewExtractorWith(signals.ExtractOptions{Histograms: needs.Histograms})
			o := HistoryOptions{Needs: needs}
			t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
			scrape := func(h *History, i int) *History {
				r, err := e.Extract(body)
				if err != nil {
					b.Fatal(err)
				}
				r.Time = t0.Add(time.Duration(i) * 2 * time.Second)
				return h.Append(&r, o)
			}
			// Enough scrapes to fill a History: its longest window at 2 s, plus
			// thinning's margin.
			fill := int(max(needs.MaxWindow(), DefaultStateWindow)/(2*time.Second)) + 4
			const pods = 1000
			before := liveHeap()
			hs := make([]*History, pods)
			for p := range hs {
				for i := range fill {
					hs[p] = scrape(hs[p], i)
				}
			}
			perPod := float64(liveHeap()-before) / pods
			readings := len(hs[0].Readings())
			// Each scrape goes to the next pod, as the adapter's do: a pod's
			// readings are rarely in the CPU's caches when its next one comes.
			p, i := 0, fill
			b.ReportAllocs()
			for b.Loop() {
				hs[p] = scrape(hs[p], i)
				if p++; p == pods {
					p, i = 0, i+1
				}
			}
			b.ReportMetric(perPod, "B/pod")
			b.ReportMetric(float64(readings), "readings/pod")
			runtime.KeepAlive(hs)
		})
	}
}

// liveHeap returns the bytes of live heap objects after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkHistoryAppend is the History part of BenchmarkScrapeReading alone:
// appending a reading of the real dump (extracted once; each op the next of
// 1,000 pods, 2 s after its reading before) to a full History under
// everyTermNeeds, which recomputes its three window aggregates.
func BenchmarkHistoryAppend(b *testing.B) {
	needs := everyTermNeeds()
	base, err := signals.NewExtractorWith(signals.ExtractOptions{Histograms: needs.Histograms}).Extract(testfixture.Sample(b, realV1Dump))
	if err != nil {
		b.Fatal(err)
	}
	o := HistoryOptions{Needs: needs}
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	appendAt := func(h *History, i int) *History {
		r := base
		r.Time = t0.Add(time.Duration(i) * 2 * time.Second)
		return h.Append(&r, o)
	}
	fill := int(needs.MaxWindow()/(2*time.Second)) + 4
	const pods = 1000
	hs := make([]*History, pods)
	for p := range hs {
		for i := range fill {
			hs[p] = appendAt(hs[p], i)
		}
	}
	p, i := 0, fill
	b.ReportAllocs()
	for b.Loop() {
		hs[p] = appendAt(hs[p], i)
		if p++; p == pods {
			p, i = 0, i+1
		}
	}
}

// BenchmarkComputeWindow compares, in one run, the window aggregates of a full
// History under everyTermNeeds computed pair by pair ("pairwise", smooth
// flags withheld) and telescoped from the window's ends ("telescoped": every
// pair of a steady engine is smooth).
func BenchmarkComputeWindow(b *testing.B) {
	needs := everyTermNeeds()
	base, err := signals.NewExtractorWith(signals.ExtractOptions{Histograms: needs.Histograms}).Extract(testfixture.Sample(b, realV1Dump))
	if err != nil {
		b.Fatal(err)
	}
	o := HistoryOptions{Needs: needs}
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var h *History
	for i := range int(needs.MaxWindow()/(2*time.Second)) + 4 {
		r := base
		r.Time = t0.Add(time.Duration(i) * 2 * time.Second)
		h = h.Append(&r, o)
	}
	for _, tc := range []struct {
		name   string
		smooth []bool
	}{{"pairwise", nil}, {"telescoped", h.smooth}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, k := range needs.Windows {
					computeWindow(h.readings, tc.smooth, k)
				}
			}
		})
	}
}

// realV1Dump is the real vLLM V1 /metrics dump of testdata/samples (47 KB).
const realV1Dump = "vllm_v1-0.10-nvcr25.09_single-engine.prom"
