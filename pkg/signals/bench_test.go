package signals

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
)

const realV1Dump = "samples/vllm_v1-0.10-nvcr25.09_single-engine.prom"

// BenchmarkExtract is the hot path of every scrape: parse and extract one real
// vLLM V1 dump (47 KB). Target (issue 2): ≤ 150 µs and ≤ 300 allocations.
func BenchmarkExtract(b *testing.B) {
	body := readTestdata(b, realV1Dump)
	e := NewExtractor()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Extract(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParsers compares the two maintained parsers of the text exposition on
// the real dump, reading every series as the extractor's first pass does: the
// full-fidelity expfmt.TextParser (builds a MetricFamily tree) and Prometheus's
// own scrape parser, model/textparse (yields byte slices). The numbers decided the
// choice of textparse; see the README's "Design notes".
func BenchmarkParsers(b *testing.B) {
	body := readTestdata(b, realV1Dump)
	b.Run("expfmt", func(b *testing.B) {
		// expfmt rejects the real dump as is ("unexpected end of input stream"
		// at its last line, which has no final newline): give it one.
		body := append(append([]byte(nil), body...), '\n')
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			p := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			if len(fams) == 0 {
				b.Fatal("no families")
			}
		}
	})
	b.Run("textparse", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			p := textparse.NewPromParser(body, labels.NewSymbolTable(), false)
			n := 0
			for {
				entry, err := p.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				if entry == textparse.EntrySeries {
					n++
				}
			}
			if n == 0 {
				b.Fatal("no series")
			}
		}
	})
}

// BenchmarkExtractVsTextparse is issue 13's extraction target in one run:
// each iteration times, one after the other on the real 47 KB dump, the bare
// textparse lexer over the whole body (Next over every entry, as
// BenchmarkParsers/textparse), the server's default extraction (no latency
// term: histogram lines skipped unparsed) and extraction of every family
// (histograms on: the catalog has a latency term), each in the steady state
// (the series cache, where on, has learned the dump's series, as from a
// deployment's second scrape on; the default extraction has none, see
// seriesCache) and cold (no series cache: every line read goes to
// textparse). Interleaved, so that the machine's load weighs on all alike.
// Metrics per body: textparse-ns, default-ns, every-ns, default-cold-ns,
// every-cold-ns; x-default = textparse-ns / default-ns (target: at least 3),
// x-every, x-default-cold and x-every-cold likewise. ns/op is the sum.
func BenchmarkExtractVsTextparse(b *testing.B) {
	body := readTestdata(b, realV1Dump)
	def, every := NewExtractorWith(ExtractOptions{}), NewExtractor()
	defCold, everyCold := NewExtractorWith(ExtractOptions{}), NewExtractor()
	defCold.series.off, everyCold.series.off = true, true
	lex := func() {
		p := textparse.NewPromParser(body, labels.NewSymbolTable(), false)
		n := 0
		for {
			entry, err := p.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			if entry == textparse.EntrySeries {
				n++
			}
		}
		if n == 0 {
			b.Fatal("no series")
		}
	}
	extract := func(e *Extractor) {
		if _, err := e.Extract(body); err != nil {
			b.Fatal(err)
		}
	}
	var tLex, tDef, tEvery, tDefCold, tEveryCold time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		lex()
		t1 := time.Now()
		extract(def)
		t2 := time.Now()
		extract(every)
		t3 := time.Now()
		extract(defCold)
		t4 := time.Now()
		extract(everyCold)
		t5 := time.Now()
		tLex, tDef, tEvery = tLex+t1.Sub(t0), tDef+t2.Sub(t1), tEvery+t3.Sub(t2)
		tDefCold, tEveryCold = tDefCold+t4.Sub(t3), tEveryCold+t5.Sub(t4)
	}
	n := float64(b.N)
	for _, m := range []struct {
		name string
		d    time.Duration
	}{{"textparse", tLex}, {"default", tDef}, {"every", tEvery}, {"default-cold", tDefCold}, {"every-cold", tEveryCold}} {
		b.ReportMetric(float64(m.d.Nanoseconds())/n, m.name+"-ns")
		if m.d != tLex {
			b.ReportMetric(tLex.Seconds()/m.d.Seconds(), "x-"+m.name)
		}
	}
}

// BenchmarkExtractDefault is the server's extraction when no policy has a
// latency term: histogram lines are skipped unparsed.
func BenchmarkExtractDefault(b *testing.B) {
	body := readTestdata(b, realV1Dump)
	e := NewExtractorWith(ExtractOptions{})
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Extract(body); err != nil {
			b.Fatal(err)
		}
	}
}
