package signals

import (
	"bytes"
	"strconv"
	"sync"
)

// seriesCache remembers, per series (the bytes textparse consumed as a
// series: the metric name and label set exactly as written), the samples
// textparse made of it, so that a later line of the same series is read
// without the parser: only its value is parsed, with the strconv.ParseFloat
// textparse itself parses values with. The pods of a deployment expose the
// same series in every body (the same names, engine and model labels), so
// from a pod's second scrape on (or its deployment's) nearly every line read
// is answered here: textparse made two allocations per series and was about
// half of an extraction's time.
//
// What is learned from one body decides how another target's body is read,
// so a pair is learned only where it is proven (issue 19: a label value
// holding a raw newline once made the prefilter's lines and textparse's
// series drift apart, and the cache learned one line's bytes with another
// series' samples, for every pod after). The key is the parser's own series
// bytes (Parser.Series), learned only when the parser read every filtered
// line of the body as exactly one series starting where the line starts
// (scanBuffers.aligned) and the line is one physical line of the plain form
// "key value". A line is answered only when it is one physical line that
// starts a logical line (see nextLine) and splits into a learned key and a
// plain number: textparse, at the start of a line, tokenises those key bytes
// the same way whatever follows them (the key ends in '}' or in a name
// followed by a blank), so the line reads as the learned series with its own
// value. The label values textparse normalises by family type (le, quantile)
// are read as numbers here, so the type line before does not matter. A body
// whose lines and series do not align after some lines were answered here is
// read again without the cache (Extractor.ExtractContent).
// FuzzExtractSequence holds every extraction, through the cache, to a cold
// one and, where textparse reads the whole body, to textparse.
//
// Only text-format lines of the plain form "series value" qualify, the value
// a decimal or exponent number; a timestamp, an exemplar, NaN, ±Inf, hex and
// other values, OpenMetrics bodies and gateway metrics always go to textparse,
// as does every series it has not read before. The cache is per Extractor (so
// per catalog: what a series yields depends on the families read) and
// bounded: past maxCachedSeries it learns no more.
//
// It is on only for extractors that read latency histograms
// (ExtractOptions.Histograms), where it pays: BenchmarkExtract3000Engines
// (3,000 pods of 30 deployments, CPU time, 6 runs on a shared 2-core VM) reads
// an engine in 40 us with it and 83 us without (2.06x, median); the
// server's default extraction reads 10 series per vLLM body, where it gave
// 19 against 25 us (1.33x), below the 1.5x issue 19 asks of a shortcut on the
// hot path, so there every line goes to textparse.

type seriesCache struct {
	mu sync.RWMutex
	m  map[string][]rawSample
	// off turns the cache off: without histograms (see above), and the
	// benchmarks' and tests' cold extraction.
	off bool
}

// maxCachedSeries bounds the series remembered: the vLLM dump has 81 of the
// families read, a pod with 8 data-parallel engines about 600.
const maxCachedSeries = 16384

// hit answers a line from the cache: it appends the series' samples, with
// the line's value, to b.fast and reports true; false sends the line to
// textparse. The caller holds mu for reading.
func (c *seriesCache) hit(line []byte, b *scanBuffers) bool {
	if len(c.m) == 0 || c.off {
		return false
	}
	key, val, ok := splitSeries(line)
	if !ok {
		return false
	}
	samples, found := c.m[string(key)] // no allocation: Go optimises string(b) in a map index
	if !found {
		return false
	}
	// string(val) does not escape (ParseFloat's errors clone their input),
	// so for a value of up to 32 bytes the conversion is on the stack: no
	// allocation, no unsafe. A failed parse is dropped: textparse reads the
	// line again and reports it.
	v, err := strconv.ParseFloat(string(val), 64)
	if err != nil {
		return false
	}
	for _, s := range samples {
		s.value, s.line = v, b.accepted
		b.fast = append(b.fast, s)
	}
	return true
}

// learn remembers the series of the lines textparse read in b (after parse
// succeeded with its series aligned to the filtered lines), their strings
// copied out of the parser's label sets.
func (c *seriesCache) learn(e *Extractor, b *scanBuffers) {
	if len(b.firstSample) == 0 || c.off || !b.aligned {
		return
	}
	c.mu.RLock()
	full := len(c.m) >= maxCachedSeries
	c.mu.RUnlock()
	if full {
		return
	}
	lines := b.lines.Bytes()
	for k, first := range b.firstSample {
		if !b.learnable[k] {
			continue
		}
		end := len(b.samples)
		if k+1 < len(b.firstSample) {
			end = b.firstSample[k+1]
		}
		li := b.entryLine[k]
		lineEnd := len(lines) - 1
		if li+1 < len(b.offsets) {
			lineEnd = b.offsets[li+1] - 1
		}
		line := lines[b.offsets[li]:lineEnd]
		if bytes.IndexByte(line, '\n') >= 0 {
			continue // several physical lines: never answered
		}
		key, _, ok := splitSeries(line)
		if !ok || len(key) != b.seriesLen[k] {
			continue // the parser's series is not the line's key
		}
		c.mu.RLock()
		_, known := c.m[string(key)]
		c.mu.RUnlock()
		if known {
			continue
		}
		samples := make([]rawSample, end-first)
		for j, s := range b.samples[first:end] {
			s.value, s.line = 0, 0
			s.engine, s.model, s.sumLabel = e.strs.intern(s.engine), e.strs.intern(s.model), e.strs.intern(s.sumLabel)
			samples[j] = s
		}
		c.mu.Lock()
		if c.m == nil {
			c.m = map[string][]rawSample{}
		}
		if len(c.m) < maxCachedSeries {
			c.m[string(key)] = samples
		}
		c.mu.Unlock()
	}
}

// seriesEnd returns the index just after the '}' that closes a line's label
// set, 0 if none, as closingBrace does. A line with one '}' only (every line
// of the engines' dumps) needs no pass over its quotes. If that '}' sits
// inside a quoted value, closingBrace would say none; seriesEnd's answer is
// then a series that no line textparse accepts begins with. So the cache
// never learned it, and the line still goes to textparse (checkSplit,
// FuzzSplitSeries). closingBrace was a fifth of BenchmarkExtract.
func seriesEnd(line []byte) int {
	if i := bytes.LastIndexByte(line, '}'); i >= 0 && bytes.IndexByte(line[:i], '}') < 0 {
		return i + 1
	}
	return closingBrace(line)
}

// splitSeries splits a plain text-format line, "series value" with blanks
// around the value and nothing after it, into its series (the metric name and
// label set as written) and its value; ok is false for any other line (a
// timestamp, an exemplar left, a value that is not a decimal or exponent
// number), which textparse must read.
func splitSeries(line []byte) (series, value []byte, ok bool) {
	end := -1
	for i, c := range line {
		if c == '{' {
			end = seriesEnd(line)
			break
		}
		if c == ' ' || c == '\t' {
			end = i
			break
		}
	}
	if end <= 0 || end >= len(line) || (line[end] != ' ' && line[end] != '\t') {
		return nil, nil, false
	}
	series, rest := line[:end], line[end:]
	for len(rest) > 0 && (rest[0] == ' ' || rest[0] == '\t') {
		rest = rest[1:]
	}
	n := 0
	for n < len(rest) && rest[n] != ' ' && rest[n] != '\t' {
		switch c := rest[n]; {
		case c >= '0' && c <= '9', c == '.', c == 'e', c == 'E', c == '+', c == '-':
		default:
			return nil, nil, false
		}
		n++
	}
	if n == 0 {
		return nil, nil, false
	}
	for _, c := range rest[n:] {
		if c != ' ' && c != '\t' {
			return nil, nil, false
		}
	}
	return series, rest[:n], true
}
