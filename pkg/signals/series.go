package signals

import (
	"bytes"
	"strconv"
	"sync"
	"unsafe"
)

// seriesCache remembers, per series (a line's bytes up to its value: the
// metric name and label set, exactly as written), the samples textparse made
// of it, so that a later line of the same series is read without the parser:
// only its value is parsed, with the strconv.ParseFloat textparse itself
// parses values with. The pods of a deployment expose the same series in
// every body (the same names, engine and model labels), so from a pod's
// second scrape on (or its deployment's) nearly every line read is answered
// here: textparse made two allocations per series and was about half of an
// extraction's time.
//
// Only text-format lines of the plain form "series value" qualify, the value
// a decimal or exponent number; a timestamp, an exemplar, NaN, ±Inf, hex and
// other values, OpenMetrics bodies and gateway metrics always go to textparse,
// as does every series it has not read before. The cache is per Extractor (so
// per catalog: what a series yields depends on the families read) and
// bounded: past maxCachedSeries it learns no more.
type seriesCache struct {
	mu sync.RWMutex
	m  map[string][]rawSample
	// off turns the cache off (the benchmarks' cold extraction).
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
	// The value's bytes are not kept (a failed parse is dropped: textparse
	// reads the line again and reports it).
	v, err := strconv.ParseFloat(unsafe.String(&val[0], len(val)), 64)
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
// succeeded), their strings copied out of the parser's label sets.
func (c *seriesCache) learn(e *Extractor, b *scanBuffers) {
	if len(b.firstSample) == 0 || c.off {
		return
	}
	c.mu.RLock()
	full := len(c.m) >= maxCachedSeries
	c.mu.RUnlock()
	if full {
		return
	}
	lines := b.lines.Bytes()
	for i, first := range b.firstSample {
		if !b.learnable[i] || i >= len(b.offsets) {
			continue
		}
		end := len(b.samples)
		if i+1 < len(b.firstSample) {
			end = b.firstSample[i+1]
		}
		lineEnd := len(lines) - 1
		if i+1 < len(b.offsets) {
			lineEnd = b.offsets[i+1] - 1
		}
		key, _, ok := splitSeries(lines[b.offsets[i]:lineEnd])
		if !ok {
			continue
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
