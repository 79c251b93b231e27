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
// (histograms on: the catalog has a latency term). Interleaved, so that the
// machine's load weighs on all three alike. Metrics: textparse-ns,
// default-ns and every-ns per body; x-default = textparse-ns / default-ns
// (target: at least 3) and x-every = textparse-ns / every-ns. ns/op is the
// sum of the three.
func BenchmarkExtractVsTextparse(b *testing.B) {
	body := readTestdata(b, realV1Dump)
	def, every := NewExtractorWith(ExtractOptions{}), NewExtractor()
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
	var tLex, tDef, tEvery time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		lex()
		t1 := time.Now()
		extract(def)
		t2 := time.Now()
		extract(every)
		t3 := time.Now()
		tLex, tDef, tEvery = tLex+t1.Sub(t0), tDef+t2.Sub(t1), tEvery+t3.Sub(t2)
	}
	n := float64(b.N)
	b.ReportMetric(float64(tLex.Nanoseconds())/n, "textparse-ns")
	b.ReportMetric(float64(tDef.Nanoseconds())/n, "default-ns")
	b.ReportMetric(float64(tEvery.Nanoseconds())/n, "every-ns")
	b.ReportMetric(tLex.Seconds()/tDef.Seconds(), "x-default")
	b.ReportMetric(tLex.Seconds()/tEvery.Seconds(), "x-every")
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
