package signals

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Issue 19's bodies: a label value holding a raw newline is one series to
// textparse and two lines to a line splitter. Before the fix the series cache
// learned from attacker the pair (its third line's bytes → the samples of
// its fourth line, vllm:num_requests_waiting) and read every later line
// vllm:num_requests_running{engine="0",model_name="m"} of any pod as a
// queue: victim read queue 1.19 (its running count), no running, and a
// misleading rejection warning, instead of queue 2, running 1.19.
const (
	issue19Attacker = "vllm:num_requests_waiting{engine=\"0\",model_name=\"a\n" +
		"vllm:num_requests_running{\"} 5\n" +
		"vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1\n" +
		"vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 7\n" +
		"vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5\n"
	issue19Victim = "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1.19\n" +
		"vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 2\n" +
		"vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n"
)

// TestOneBodyNeverChangesAnother: after the attacker body, the victim body
// reads as it does on a fresh extractor and as textparse reads it; and the
// attacker body itself reads as textparse reads it (one series whose
// model_name holds a newline).
func TestOneBodyNeverChangesAnother(t *testing.T) {
	for name, opts := range sequenceOptions() {
		t.Run(name, func(t *testing.T) {
			e := NewExtractorWith(opts)
			attacker, err := e.Extract([]byte(issue19Attacker))
			if err != nil {
				t.Fatalf("attacker: %v", err)
			}
			want, err := NewExtractorWith(opts).extractReference([]byte(issue19Attacker), "")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, attacker, cmpReading); diff != "" {
				t.Errorf("attacker body (-textparse +extracted):\n%s", diff)
			}
			if q, _ := attacker.Value(QueueDepth); q != 12 || len(attacker.Engines) != 2 {
				t.Errorf("attacker queue %g over %d engines, want 12 over 2: engine 0 carries two models, \"a\\n…\" (waiting 5) and \"m\" (waiting 7), one engine each", q, len(attacker.Engines))
			}
			for pass := range 3 {
				got, err := e.Extract([]byte(issue19Victim))
				if err != nil {
					t.Fatalf("victim, pass %d: %v", pass, err)
				}
				q, _ := got.Value(QueueDepth)
				r, _ := got.Value(Running)
				if q != 2 || r != 1.19 || len(got.Warnings) != 0 {
					t.Errorf("victim, pass %d: queue %g running %g warnings %q; want 2, 1.19, none", pass, q, r, got.Warnings)
				}
			}
		})
	}
}

var cmpReading = cmp.AllowUnexported(Reading{}, Fold{}, EngineSignals{}, Values{})

// sequenceOptions are the extractor configurations the sequence target runs:
// the server's default, every family, a gateway input.
func sequenceOptions() map[string]ExtractOptions {
	return map[string]ExtractOptions{
		"default":       sequenceConfigs[0],
		"every family":  sequenceConfigs[1],
		"gateway input": sequenceConfigs[2],
	}
}

var sequenceConfigs = []ExtractOptions{
	{MaxSeries: 2000, MaxEngines: 64},
	{Histograms: true, MaxSeries: 2000, MaxEngines: 64},
	{Histograms: true, MaxSeries: 2000, MaxEngines: 64, GatewayMetrics: []string{DefaultGatewayQueueMetric}},
}

// FuzzExtractSequence is issue 19's differential target. Three targets' bodies
// are read in an order the fuzzer picks (order: 2 bits per step, 8 steps; 3
// repeats the step's own target) by extractors shared across them, so through
// the series cache, the interned strings and every fast path. Each extraction
// must equal a cold one (a fresh extractor with the series cache off) in its
// reading and its error, and, where Prometheus's textparse reads the whole
// body (see referenceApplies), the reference extraction: the whole body through
// textparse, no prefilter, no cache. om reads every body as OpenMetrics;
// config picks the extractor's options (sequenceConfigs: the server's
// default, every family, a gateway input).
func FuzzExtractSequence(f *testing.F) {
	// An excerpt of the real dump (its gauges and the TTFT histogram): the
	// fuzzer mutates it much faster than the whole 47 KB.
	lines := bytes.SplitAfter(readTestdata(f, realV1Dump), []byte("\n"))
	vllm := slices.Concat(slices.Concat(lines[34:64]...), slices.Concat(lines[213:245]...))
	other := bytes.ReplaceAll(vllm, []byte(`model_name="Qwen/Qwen3-4B-Instruct-2507-FP8"`), []byte(`model_name="m"`))
	for _, seed := range []struct {
		a, b, c string
		order   uint64
		om      bool
	}{
		{issue19Attacker, issue19Victim, issue19Victim, 0b_01_01_00_01_00, false},
		// Quotes, escapes and raw newlines in label values, quoted names and
		// HELP lines, beside the same series written plainly.
		{"vllm:num_requests_running{engine=\"0\",model_name=\"a\\\"\n\"} 3\n" + issue19Victim, issue19Victim, "", 0b_01_00_01, false},
		{"# HELP \"vllm:num_requests_waiting\nvllm:num_requests_waiting{engine=\\\"0\\\"} 9\" x\n" + issue19Victim, issue19Victim, "", 0b_01_00, false},
		{"{engine=\"0\",\"vllm:num_requests_waiting\"} 4\n{\"vllm:kv_cache_usage_perc\",engine=\"0\"} 0.5\n", issue19Victim, "", 0b_01_00_01_00, false},
		{"foo{a=\"x\nvllm:num_requests_waiting{engine=\\\"0\\\"} 500\n\"} 1\n" + issue19Victim, issue19Victim, "", 0b_01_00, false},
		{"vllm:num_requests_waiting{engine=\"0\",model_name=\"a\\\\\"} 3\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.1\n", issue19Victim, "", 0b_00_01_00, false},
		{string(vllm), string(other), issue19Victim, 0b_10_01_00_01_00, false},
		{"vllm:num_requests_waiting{engine=\"0\"} 3\n# EOF\n", "vllm:num_requests_waiting{engine=\"0\",model_name=\"x\ny\"} 3\n# EOF\n", "", 0b_01_00, true},
		// Two models on one engine label (one engine each), beside bodies
		// with one of them, and with another model, on that label.
		{twoModelsBig + twoModelsSmall, twoModelsSmall, issue19Victim, 0b_10_00_01_00_10_01_00, false},
	} {
		for config := range sequenceConfigs {
			f.Add([]byte(seed.a), []byte(seed.b), []byte(seed.c), seed.order, seed.om, uint8(config))
		}
	}
	f.Fuzz(func(t *testing.T, a, b, c []byte, order uint64, om bool, config uint8) {
		ctype := ""
		if om {
			ctype = "application/openmetrics-text; version=1.0.0"
		}
		bodies := [3][]byte{a, b, c}
		{
			o := sequenceConfigs[int(config)%len(sequenceConfigs)]
			name := fmt.Sprintf("config %d", int(config)%len(sequenceConfigs))
			shared := NewExtractorWith(o)
			for step := range 8 {
				i := int(order>>(2*step)) & 3
				if i == 3 {
					i = step % 3
				}
				body := bodies[i]
				got, err := shared.ExtractContent(body, ctype)
				coldX := NewExtractorWith(o)
				coldX.series.off = true
				cold, coldErr := coldX.ExtractContent(body, ctype)
				if fmt.Sprint(err) != fmt.Sprint(coldErr) {
					t.Fatalf("%s, step %d (target %d): error %v, cold %v", name, step, i, err, coldErr)
				}
				if diff := cmp.Diff(cold, got, cmpReading); diff != "" {
					t.Fatalf("%s, step %d (target %d): reading differs from the cold one (-cold +shared):\n%s", name, step, i, diff)
				}
				if !referenceApplies(body, om, coldErr) {
					continue
				}
				ref, refErr := NewExtractorWith(o).extractReference(body, ctype)
				if kind(refErr) != kind(coldErr) {
					t.Fatalf("%s, step %d (target %d): error %v, textparse's %v", name, step, i, coldErr, refErr)
				}
				if diff := cmp.Diff(ref, cold, cmpReading); diff != "" {
					t.Fatalf("%s, step %d (target %d): reading differs from textparse's (-textparse +extracted):\n%s", name, step, i, diff)
				}
			}
		}
	})
}

// referenceApplies reports whether the reference extraction (the whole body
// through textparse) is the answer for body: textparse reads it whole, and
// none of the prefilter's documented departures applies. Those are: a NUL
// byte (textparse stops at one at a line start, as at the end of the body;
// the prefilter skips that line and rejects a NUL in a series it reads), a
// series line longer than maxLineBytes (ErrParse), and more series than
// MaxSeries (ErrTooManySeries); the reference checks neither bound.
func referenceApplies(body []byte, om bool, coldErr error) bool {
	if bytes.IndexByte(body, 0) >= 0 || len(body) > maxLineBytes || errors.Is(coldErr, ErrTooManySeries) {
		return false
	}
	if om && !strings.Contains(string(body), "# EOF") {
		return false // the prefilter adds the terminator textparse needs
	}
	return wholeBodyParses(body, om) == nil
}

// TestSeriesCacheAnswersWholeBodies: once a deployment's series are learned,
// a body whose every line read is answered by the cache is not parsed again
// (issue 19's fix first read such bodies twice: no line for the parser was
// taken for lines and series that do not align).
func TestSeriesCacheAnswersWholeBodies(t *testing.T) {
	e, cold := NewExtractor(), NewExtractor()
	cold.series.off = true
	if _, err := e.Extract([]byte(issue19Victim)); err != nil {
		t.Fatal(err)
	}
	b := &scanBuffers{}
	if _, err := e.filter([]byte(issue19Victim), false, false, b); err != nil || len(b.offsets) != 0 || len(b.fast) != 3 {
		t.Fatalf("filter: %d lines for the parser, %d answered (%v); want 0 and 3", len(b.offsets), len(b.fast), err)
	}
	extract := func(x *Extractor) func() {
		return func() {
			if _, err := x.Extract([]byte(issue19Victim)); err != nil {
				t.Fatal(err)
			}
		}
	}
	warm, parsed := testing.AllocsPerRun(20, extract(e)), testing.AllocsPerRun(20, extract(cold))
	if warm >= parsed {
		t.Errorf("%g allocations with every line answered by the cache, %g without it: the body was parsed anyway", warm, parsed)
	}
}
