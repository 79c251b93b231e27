package history

import (
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

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
// window, thinned to DefaultMaxReadings), and under everyTermNeeds with
// every reading's histograms kept plain ("every-plain": the History before
// packs). B/pod is the live heap of one pod's full History, measured over
// 1,000 pods: what the readings and window aggregates of an engine cost the
// adapter; bytes/engine is the same History's structures counted
// (heldBytes), which does not vary from run to run.
func BenchmarkScrapeReading(b *testing.B) {
	body := testfixture.Sample(b, realV1Dump)
	for _, tc := range []struct {
		name  string
		needs Needs
		plain bool
	}{{"default", Needs{}, false}, {"every", everyTermNeeds(), false}, {"every-plain", everyTermNeeds(), true}} {
		b.Run(tc.name, func(b *testing.B) {
			needs := tc.needs
			e := signals.NewExtractorWith(signals.ExtractOptions{Histograms: needs.Histograms})
			o := HistoryOptions{Needs: needs, plain: tc.plain}
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
			b.ReportMetric(float64(heldBytes(hs[0])), "bytes/engine")
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
// everyTermNeeds, which recomputes its three window aggregates: compact
// (older readings' histograms packed) and plain, in one run. Each appended
// reading is a copy of the one extracted, with engines and histograms of its
// own (the copy is in the measure), as the adapter's readings have.
func BenchmarkHistoryAppend(b *testing.B) {
	needs := everyTermNeeds()
	base, err := signals.NewExtractorWith(signals.ExtractOptions{Histograms: needs.Histograms}).Extract(testfixture.Sample(b, realV1Dump))
	if err != nil {
		b.Fatal(err)
	}
	for _, plain := range []bool{false, true} {
		name := "compact"
		if plain {
			name = "plain"
		}
		b.Run(name, func(b *testing.B) {
			o := HistoryOptions{Needs: needs, plain: plain}
			t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
			appendAt := func(h *History, i int) *History {
				r := base
				r.Time = t0.Add(time.Duration(i) * 2 * time.Second)
				// Engines and histograms of its own, as an extracted
				// reading has.
				r.Engines = slices.Clone(base.Engines)
				for e := range r.Engines {
					for hk, x := range r.Engines[e].Hist {
						r.Engines[e].Hist[hk] = x.Clone()
					}
				}
				r.Hist = r.Engines[0].Hist
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
		})
	}
}

// BenchmarkComputeWindow compares, in one run, the window aggregates of a full
// History under everyTermNeeds computed pair by pair ("pairwise", smooth
// flags withheld), telescoped from the window's ends ("telescoped": every
// pair of a steady engine is smooth) over plain readings, and telescoped
// from the packs of a compact History ("packed").
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
		rs     []*signals.Reading
		packs  []pack
		smooth []bool
	}{{"pairwise", fullReadings(h), nil, nil}, {"telescoped", fullReadings(h), nil, h.smooth}, {"packed", h.readings, h.packs, h.smooth}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, k := range needs.Windows {
					computeWindow(tc.rs, tc.packs, tc.smooth, k)
				}
			}
		})
	}
}

// realV1Dump is the real vLLM V1 /metrics dump of testdata/samples (47 KB).
const realV1Dump = "vllm_v1-0.10-nvcr25.09_single-engine.prom"

// heldBytes counts the bytes of the structures h holds, from their sizes
// (unsafe.Sizeof, slices by capacity; the allocator's rounding left out):
// the History, its readings (each once: their engines, histograms, model
// list and warnings), packs, smooth flags, window aggregates and engine
// facts. Shared values are not counted: histogram bounds (interned per
// layout), Sources maps, interned engine IDs and model names. Deterministic,
// unlike the live heap BenchmarkScrapeReading measures.
func heldBytes(h *History) int {
	n := int(unsafe.Sizeof(*h)) + 8*cap(h.readings) + 24*cap(h.packs) + cap(h.smooth) +
		int(unsafe.Sizeof(Window{}))*cap(h.windows) + int(unsafe.Sizeof(EngineFacts{}))*cap(h.facts)
	seen := map[*signals.Histogram]bool{}
	hist := func(x *signals.Histogram) {
		if x != nil && !seen[x] {
			seen[x] = true
			n += int(unsafe.Sizeof(*x)) + 8*cap(x.Counts)
		}
	}
	for _, p := range h.packs {
		n += cap(p)
	}
	for _, r := range h.readings {
		n += int(unsafe.Sizeof(*r)) + int(unsafe.Sizeof(signals.EngineSignals{}))*cap(r.Engines) + 16*cap(r.Models)
		for _, w := range r.Warnings {
			n += 16 + len(w)
		}
		if r.KVCacheUsageMax != nil {
			n += 8
		}
		for i := range r.Engines {
			for _, x := range r.Engines[i].Hist {
				hist(x)
			}
		}
		for _, x := range r.Hist {
			hist(x)
		}
	}
	for i := range h.windows {
		for _, x := range h.windows[i].Histograms {
			hist(x)
		}
	}
	return n
}

// busyHistory returns a pod's full History under everyTermNeeds (readings of
// the real dump every 2 s for the longest window and a margin), each
// histogram's counts grown by 2^26 plus 3 observations per bucket per
// scrape: an engine that has served tens of millions of requests, whose
// counts take 4-byte uvarints in a pack.
func busyHistory(tb testing.TB, o HistoryOptions) *History {
	base, err := signals.NewExtractorWith(signals.ExtractOptions{Histograms: true}).Extract(testfixture.Sample(tb, realV1Dump))
	if err != nil {
		tb.Fatal(err)
	}
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var h *History
	for i := range int(o.Needs.MaxWindow()/(2*time.Second)) + 4 {
		r := base
		r.Time = t0.Add(time.Duration(i) * 2 * time.Second)
		r.Engines = slices.Clone(base.Engines)
		for e := range r.Engines {
			for hk, x := range r.Engines[e].Hist {
				if x == nil {
					continue
				}
				y := x.Clone()
				add := float64(1<<26 + 3*i)
				for b := range y.Counts {
					y.Counts[b] += add
				}
				y.Count += add
				y.Sum += float64(i)
				r.Engines[e].Hist[hk] = y
			}
		}
		r.Fold = signals.FoldEngines(r.Engines, nil)
		h = h.Append(&r, o)
	}
	return h
}

// TestFootprintEveryTerm holds a busy engine's full History under every term
// kind (busyHistory) to at most 64 KiB of structures (heldBytes), and the
// compact one to at most three quarters of the plain one's (24.5 KB against
// 33.5 KB when written: the histograms 6.9 KB packed against 16.9 KB).
func TestFootprintEveryTerm(t *testing.T) {
	o := HistoryOptions{Needs: everyTermNeeds()}
	compact := busyHistory(t, o)
	o.plain = true
	plain := busyHistory(t, o)
	c, p := heldBytes(compact), heldBytes(plain)
	t.Logf("every term kind, %d readings: %d bytes compact (%d of them packs), %d plain", len(compact.readings), c, compact.PackedBytes(), p)
	if c > 64<<10 {
		t.Errorf("a History with every term kind holds %d bytes, want at most 64 KiB", c)
	}
	if 4*c > 3*p {
		t.Errorf("compact History holds %d bytes, plain %d: want at most three quarters", c, p)
	}
}
