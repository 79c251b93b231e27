package signals

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
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
// (the series cache has learned the dump's series, as from a deployment's
// second scrape on) and cold (no series cache: every line read goes to
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

// fleetBodies returns n bodies made from the real dump, as n pods of
// deployments Deployments serve them: each deployment its own model name,
// each pod its own values (every sample scaled by a factor of its own, so
// histograms stay cumulative).
func fleetBodies(dump []byte, n, deployments int) [][]byte {
	const model = `model_name="Qwen/Qwen3-4B-Instruct-2507-FP8"`
	bodies := make([][]byte, n)
	for pod := range n {
		var out bytes.Buffer
		factor := 1 + float64(pod%97)/100
		for line := range bytes.Lines(dump) {
			line = bytes.ReplaceAll(line, []byte(model), fmt.Appendf(nil, `model_name="fleet/model-%02d"`, pod%deployments))
			i := bytes.LastIndexByte(bytes.TrimRight(line, "\n"), ' ')
			v, err := strconv.ParseFloat(string(bytes.TrimSpace(line[i+1:])), 64)
			if line[0] == '#' || i < 0 || err != nil {
				out.Write(line)
				continue
			}
			out.Write(line[:i+1])
			out.WriteString(strconv.FormatFloat(v*factor, 'g', -1, 64))
			out.WriteByte('\n')
		}
		bodies[pod] = out.Bytes()
	}
	return bodies
}

// BenchmarkExtract3000Engines is issue 19's test of the extraction shortcuts
// at fleet scale: 3,000 engines (pods of 30 deployments, each pod its own
// values) read three ways, one after the other so that the machine's load
// weighs on all alike (a pass over the 3,000 bodies per path, the first path
// in turn): through the series cache (cached-ns;
// the steady state: every deployment's series learned), with the cache off
// (nocache-ns: every line read goes to textparse, the prefilter kept) and by
// the library path (textparse-ns: the whole body through textparse, the same
// fold). x-cache = nocache / cached and x-textparse = textparse / cached; the
// cache stays only while x-cache is at least 1.5 (issue 19). Per engine, for
// the server's default extraction and with every family (a latency term).
func BenchmarkExtract3000Engines(b *testing.B) {
	bodies := fleetBodies(readTestdata(b, realV1Dump), 3000, 30)
	for _, c := range []struct {
		name string
		opts ExtractOptions
	}{{"default", ExtractOptions{}}, {"every", ExtractOptions{Histograms: true}}} {
		b.Run(c.name, func(b *testing.B) {
			cached, nocache, library := NewExtractorWith(c.opts), NewExtractorWith(c.opts), NewExtractorWith(c.opts)
			nocache.series.off = true
			for _, body := range bodies { // learn
				if _, err := cached.Extract(body); err != nil {
					b.Fatal(err)
				}
			}
			reference := func(body []byte) (Reading, error) { return library.extractReference(body, "") }
			paths := []func([]byte) (Reading, error){cached.Extract, nocache.Extract, reference}
			var spent [3]time.Duration
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				// A pass over every body per path, the first path in turn: a
				// path's garbage is collected mostly in its own pass (the
				// reference path allocates a label set per series).
				for k := range paths {
					p := (i + k) % len(paths)
					t0 := time.Now()
					for _, body := range bodies {
						if _, err := paths[p](body); err != nil {
							b.Fatal(err)
						}
					}
					spent[p] += time.Since(t0)
				}
			}
			tCached, tNocache, tLibrary := spent[0], spent[1], spent[2]
			n := float64(b.N * len(bodies))
			b.ReportMetric(float64(tCached.Nanoseconds())/n, "cached-ns")
			b.ReportMetric(float64(tNocache.Nanoseconds())/n, "nocache-ns")
			b.ReportMetric(float64(tLibrary.Nanoseconds())/n, "textparse-ns")
			b.ReportMetric(tNocache.Seconds()/tCached.Seconds(), "x-cache")
			b.ReportMetric(tLibrary.Seconds()/tCached.Seconds(), "x-textparse")
		})
	}
}
