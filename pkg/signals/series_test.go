package signals

import (
	"errors"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
)

// parseLine runs textparse over one text-format line and returns its labels
// and value.
func parseLine(line string) (labels.Labels, float64, error) {
	p := textparse.NewPromParser([]byte(line+"\n"), labels.NewSymbolTable(), false)
	var ls labels.Labels
	var v float64
	n := 0
	for {
		entry, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return ls, 0, err
		}
		if entry == textparse.EntrySeries {
			_, ts, val := p.Series()
			if ts != nil {
				return ls, 0, errors.New("timestamp")
			}
			p.Labels(&ls)
			v = val
			n++
		}
	}
	if n != 1 {
		return ls, 0, errors.New("not one series")
	}
	return ls, v, nil
}

// checkSplit is the series cache's contract: a line the fast path answers
// (splitSeries accepts it, its series is one textparse read before and its
// value parses) is a line textparse reads, with the labels of that other line
// of the same series and the same value.
func checkSplit(t *testing.T, line string) {
	t.Helper()
	series, value, ok := splitSeries([]byte(line))
	if !ok {
		return
	}
	learned, _, err := parseLine(string(series) + " 0")
	if err != nil {
		return // never learned: the cache cannot hold this series
	}
	v, err := parseFloatFast(value)
	if err != nil {
		return
	}
	ls, tv, err := parseLine(line)
	if err != nil {
		t.Fatalf("%q: the fast path reads it (series %q, value %g), textparse rejects it: %v", line, series, v, err)
	}
	if math.Float64bits(tv) != math.Float64bits(v) {
		t.Fatalf("%q: fast path value %g, textparse %g", line, v, tv)
	}
	if !labels.Equal(ls, learned) {
		t.Fatalf("%q: labels %s, of the same series with another value %s", line, ls, learned)
	}
}

// parseFloatFast parses a value as hit does.
func parseFloatFast(b []byte) (float64, error) {
	var v float64
	ok := false
	c := seriesCache{m: map[string][]rawSample{"k": {{}}}}
	sb := &scanBuffers{}
	if c.hit(append([]byte("k "), b...), sb) {
		v, ok = sb.fast[0].value, true
	}
	if !ok {
		return 0, errors.New("not answered")
	}
	return v, nil
}

// TestSplitSeries checks the fast path's contract on lines of every shape it
// may meet, and that it declines what it must leave to textparse.
func TestSplitSeries(t *testing.T) {
	lines := []string{
		`a 1`, `a  1`, "a\t1", `a 1 `, "a 1\t", `a{b="c"} 1`, `a{b="c"}  1 `, `a{b="c",} 2`, `a{} 3`,
		`a 1e3`, `a -1`, `a +1`, `a .5`, `a 1.`, `a 1e+3`, `a 1E-3`, `a -.5e-3`, `a 00001`, `a 1e309`, `a -0`,
		`a 0x1p3`, `a 1_000`, `a 1e`, `a e1`, `a +-1`, `a 1 2`, `a NaN`, `a +Inf`, `a -Inf`, `a 1 # {x="y"} 1`,
		`{"a.b",c="d"} 4`, `{"a b"} 5`, `a{b="} 1"} 6`, `a{b="\""} 7`, `a{b="x y"} 8`, `a {b="c"} 9`, `a{b="c"}9`,
		`vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-4B-Instruct-2507-FP8"} 0.0`,
	}
	declined := map[string]bool{`a 0x1p3`: true, `a 1_000`: true, `a 1 2`: true, `a NaN`: true, `a +Inf`: true, `a -Inf`: true, `a 1 # {x="y"} 1`: true,
		`a{b="c"}9`: true, `a 1e309`: true, `a 1e`: true, `a e1`: true, `a +-1`: true}
	for _, l := range lines {
		checkSplit(t, l)
		_, value, ok := splitSeries([]byte(l))
		answered := false
		if ok {
			_, err := parseFloatFast(value)
			answered = err == nil
		}
		if declined[l] && answered {
			t.Errorf("%q: the fast path answers it; textparse must read it", l)
		}
		if !declined[l] && !answered && !strings.Contains(l, " {") {
			t.Errorf("%q: the fast path declines a plain line", l)
		}
	}
}

// FuzzSplitSeries holds the fast path to textparse on any line.
func FuzzSplitSeries(f *testing.F) {
	for _, l := range []string{`a 1`, `a{b="c"} 1e3`, `{"a.b",c="d"} 4`, "a\t-.5 ", `a{b="} 1"} 6`} {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if strings.ContainsAny(line, "\n\r") || strings.IndexByte(line, 0) >= 0 {
			return
		}
		checkSplit(t, strings.TrimLeft(line, " \t"))
	})
}
