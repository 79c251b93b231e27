package signals

import (
	"bytes"
	"errors"
	"io"
	"testing"

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
