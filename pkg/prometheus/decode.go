package prometheus

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	jsoniter "github.com/json-iterator/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/saturation-adapter/saturation-adapter/internal/excerpt"
)

// ErrResponse: a Prometheus answer that is not a query result the adapter can
// read (not JSON, an error status, a result type other than vector or
// matrix).
var ErrResponse = errors.New("unusable Prometheus response")

// point is one sample of a series.
type point struct {
	t time.Time
	v float64
}

// series is one series of an answer with its samples, oldest first.
type series struct {
	labels labels.Labels
	points []point
}

// seriesLabels are a series' labels as decodeStream read them, sorted by
// name, before the series is kept (and its labels built).
type seriesLabels []labels.Label

// Get returns the value of the label name, "" when absent.
func (ls seriesLabels) Get(name string) string {
	for _, l := range ls {
		if l.Name == name {
			return l.Value
		}
	}
	return ""
}

// queryAnswer is what decodeStream read of a query answer: the result's type, the
// series kept (their points oldest first), Prometheus's warnings (a few, cut)
// and the bytes the kept series hold, as charged.
type queryAnswer struct {
	typ      model.ValueType
	series   []series
	warnings []string
	bytes    int64
}

// decodeLimits bound what decodeStream keeps of each series.
type decodeLimits struct {
	// notBefore and notAfter (Unix milliseconds, 0: none) bound the sample
	// times kept: a hostile answer's points outside the query's range, or
	// in the future, are dropped.
	notBefore, notAfter int64
	// maxPoints is the most points kept per series, the newest (0: all).
	maxPoints int
	// charge, when set, is told the bytes each kept series holds and may
	// refuse them: decoding then stops with its error.
	charge func(bytes int64) error
}

// Bounds of decodeStream.
const (
	// streamBufferBytes is the read buffer: what is held of the body at once.
	streamBufferBytes = 32 << 10
	// maxWarnings and maxWarningBytes bound the warnings kept.
	maxWarnings     = 4
	maxWarningBytes = 300
	// seriesOverheadBytes is what a kept series holds beyond its label
	// strings and points (slice headers, the series struct), for charge.
	seriesOverheadBytes = 96
	// pointBytes is what a kept point holds (a time.Time and a float64).
	pointBytes = 32
)

// decodeStream reads an answer of the Prometheus HTTP API's /api/v1/query
// from r as it streams, never holding the body: a JSON iterator
// (github.com/json-iterator/go, the library client_golang and Prometheus
// decode API answers with) over a 32 KiB buffer. Each series of a vector or
// matrix result is read in turn, its labels interned, and kept only when keep
// accepts its labels; its points are kept within lim. Native histogram
// samples are not read (the engines expose classic histograms). Keys may come
// in any order but for the result's type, which must precede the result as
// every server of the API writes it. Keys are matched as encoding/json matches
// them to struct fields (the reference decoder FuzzDecodeStream holds this one
// to, Decode in reference_test.go): exactly, or else by Unicode case folding
// (keyOf). A key that carries the result (data, resultType, result, and a
// series' metric, value and values) given twice is refused, where Decode
// would keep the last or merge the two. Errors: a *QueryError for
// Prometheus's own error answer; ErrResponse (wrapped) for anything that is
// not a vector or matrix answer, or that gives such a key twice; lim.charge's.
func decodeStream(r io.Reader, lim decodeLimits, keep func(seriesLabels) bool) (queryAnswer, error) {
	d := &streamDecoder{it: jsoniter.Parse(jsoniter.ConfigDefault, r, streamBufferBytes), lim: lim, keep: keep, intern: map[string]string{}}
	var a queryAnswer
	var status, errType, errMsg string
	var sawData bool
	d.it.ReadObjectCB(func(it *jsoniter.Iterator, key string) bool {
		switch k := keyOf(key, envelopeKeys); k {
		case "status":
			status = excerpt.String(it.ReadString(), 40)
		case "errorType":
			errType = excerpt.String(it.ReadString(), 40)
		case "error":
			errMsg = excerpt.String(it.ReadString(), maxWarningBytes)
		case "data":
			if d.twice(&sawData, k) {
				return false
			}
			d.data(&a)
		case "warnings", "infos":
			it.ReadArrayCB(func(it *jsoniter.Iterator) bool {
				w := it.ReadString()
				if len(a.warnings) < maxWarnings && w != "" {
					a.warnings = append(a.warnings, excerpt.String(w, maxWarningBytes))
				}
				return it.Error == nil
			})
		default:
			it.Skip()
		}
		return it.Error == nil && d.err == nil
	})
	switch {
	case d.err != nil:
		return queryAnswer{}, d.err
	case d.it.Error != nil && !errors.Is(d.it.Error, io.EOF):
		return queryAnswer{}, fmt.Errorf("%w: not a Prometheus API response: %s", ErrResponse, excerpt.String(d.it.Error.Error(), 200))
	case status == "error":
		return queryAnswer{}, &QueryError{Type: errType, Msg: errMsg}
	case status != "success":
		return queryAnswer{}, fmt.Errorf("%w: status %q: %s: %s", ErrResponse, status, errType, errMsg)
	case !sawData || d.typ == "":
		return queryAnswer{}, fmt.Errorf("%w: no result", ErrResponse)
	case d.typ != model.ValVector.String() && d.typ != model.ValMatrix.String():
		return queryAnswer{}, fmt.Errorf("%w: result type %q; want vector or matrix (an instant query, of a series selector or a range selector)",
			ErrResponse, excerpt.String(d.typ, 40))
	case d.scalar:
		return queryAnswer{}, fmt.Errorf("%w: a %s result whose elements are not series", ErrResponse, d.typ)
	}
	if d.typ == model.ValVector.String() {
		a.typ = model.ValVector
	} else {
		a.typ = model.ValMatrix
	}
	a.series, a.bytes = d.kept, d.bytes
	return a, nil
}

// streamDecoder is decodeStream's state.
type streamDecoder struct {
	it   *jsoniter.Iterator
	lim  decodeLimits
	keep func(seriesLabels) bool
	// intern shares the strings of one answer: label names, and values that
	// repeat (namespace, pod, metric names).
	intern map[string]string
	typ    string
	scalar bool // a result element that is not a series
	kept   []series
	bytes  int64
	err    error
	// scratch, reused per series.
	lbls []labels.Label
	pts  []point
}

func (d *streamDecoder) str(s string) string {
	s = validUTF8(s)
	if v, ok := d.intern[s]; ok {
		return v
	}
	d.intern[s] = s
	return s
}

// validUTF8 returns s with each byte that is not part of valid UTF-8
// replaced by U+FFFD, as encoding/json decodes a JSON string (Decode's path:
// "invalid UTF-8 ... replaced by the Unicode replacement character"), so
// that both decoders read the same labels. jsoniter keeps such bytes as
// they are.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// data reads the "data" object: its resultType and result.
func (d *streamDecoder) data(a *queryAnswer) {
	var sawType, sawResult bool
	d.it.ReadObjectCB(func(it *jsoniter.Iterator, key string) bool {
		switch k := keyOf(key, dataKeys); k {
		case "resultType":
			if d.twice(&sawType, k) {
				return false
			}
			d.typ = excerpt.String(it.ReadString(), 40)
		case "result":
			if d.twice(&sawResult, k) {
				return false
			}
			if d.typ == "" {
				// Prometheus (and Thanos, Mimir, VictoriaMetrics) write the
				// type first; without it a series' "value" and "values"
				// cannot be told apart as they stream.
				d.err = fmt.Errorf("%w: the result comes before its resultType", ErrResponse)
				return false
			}
			if it.WhatIsNext() != jsoniter.ArrayValue {
				d.scalar = it.WhatIsNext() != jsoniter.NilValue
				it.Skip()
				break
			}
			it.ReadArrayCB(func(it *jsoniter.Iterator) bool {
				if it.WhatIsNext() != jsoniter.ObjectValue {
					d.scalar = true
					it.Skip()
				} else {
					d.element()
				}
				return it.Error == nil && d.err == nil
			})
		default:
			it.Skip()
		}
		return it.Error == nil && d.err == nil
	})
}

// element reads one series of the result and keeps it when it should be.
func (d *streamDecoder) element() {
	d.lbls, d.pts = d.lbls[:0], d.pts[:0]
	var sawMetric, sawValue, sawValues bool
	d.it.ReadObjectCB(func(it *jsoniter.Iterator, key string) bool {
		switch k := keyOf(key, seriesKeys); k {
		case "metric":
			if d.twice(&sawMetric, k) {
				return false
			}
			it.ReadMapCB(func(it *jsoniter.Iterator, name string) bool {
				d.lbls = append(d.lbls, labels.Label{Name: name, Value: it.ReadString()})
				return it.Error == nil
			})
		case "value":
			if d.twice(&sawValue, k) {
				return false
			}
			if d.typ != model.ValVector.String() {
				it.Skip()
				break
			}
			d.point()
		case "values":
			if d.twice(&sawValues, k) {
				return false
			}
			if d.typ != model.ValMatrix.String() {
				it.Skip()
				break
			}
			it.ReadArrayCB(func(it *jsoniter.Iterator) bool {
				d.point()
				if d.lim.maxPoints > 0 && len(d.pts) >= 2*d.lim.maxPoints {
					d.pts = newest(d.pts, d.lim.maxPoints)
				}
				return it.Error == nil
			})
		default:
			// Native histogram samples ("histogram", "histograms") are not
			// read: the engines expose classic histograms.
			it.Skip()
		}
		return it.Error == nil
	})
	if d.it.Error != nil || d.err != nil || len(d.pts) == 0 {
		return
	}
	// A label given twice counts once, the last, as a decoded map has it.
	slices.SortStableFunc(d.lbls, func(a, b labels.Label) int { return strings.Compare(a.Name, b.Name) })
	ls := d.lbls[:0]
	for i, l := range d.lbls {
		if i+1 < len(d.lbls) && d.lbls[i+1].Name == l.Name {
			continue
		}
		ls = append(ls, l)
	}
	if d.keep != nil && !d.keep(seriesLabels(ls)) {
		return
	}
	// Only a kept series' strings are interned: a dropped one's are garbage.
	for i := range ls {
		ls[i].Name, ls[i].Value = d.str(ls[i].Name), d.str(ls[i].Value)
	}
	lset := labels.New(ls...)
	pts := newest(d.pts, d.lim.maxPoints)
	n := int64(seriesOverheadBytes + pointBytes*len(pts))
	lset.Range(func(l labels.Label) { n += int64(len(l.Name) + len(l.Value)) })
	if d.lim.charge != nil {
		if err := d.lim.charge(n); err != nil {
			d.err = err
			return
		}
	}
	d.bytes += n
	d.kept = append(d.kept, series{labels: lset, points: slices.Clone(pts)})
}

// The keys of the objects decodeStream reads: the envelope, its data, and a
// series of the result (the JSON names of the API's envelope and of
// prometheus/common v0.73.1 model.Sample's and model.SampleStream's fields).
var (
	envelopeKeys = []string{"status", "errorType", "error", "data", "warnings", "infos"}
	dataKeys     = []string{"resultType", "result"}
	seriesKeys   = []string{"metric", "value", "values"}
)

// keyOf returns the name among names that the object key stands for, as
// encoding/json matches a key to a struct field (Go 1.26,
// src/encoding/json/decode.go, object: an exact match, or else one by Unicode
// case folding, strings.EqualFold: "Status" and "ſtatus" are both
// "status"); "" for none. Matching as Decode does keeps the two decoders
// reading the same answer the same way.
func keyOf(key string, names []string) string {
	for _, n := range names {
		if key == n {
			return n
		}
	}
	for _, n := range names {
		if strings.EqualFold(key, n) {
			return n
		}
	}
	return ""
}

// twice marks the key name as seen and, if it was seen before, records the
// error that it is given twice and returns true.
func (d *streamDecoder) twice(seen *bool, name string) bool {
	if *seen {
		d.err = fmt.Errorf("%w: %q given twice in one object (in any letter case)", ErrResponse, name)
		return true
	}
	*seen = true
	return false
}

// point reads one [time, "value"] pair and keeps it within the limits.
func (d *streamDecoder) point() {
	var t float64
	var v float64
	i := 0
	ok := true
	d.it.ReadArrayCB(func(it *jsoniter.Iterator) bool {
		switch i {
		case 0:
			if it.WhatIsNext() != jsoniter.NumberValue {
				ok = false
				it.Skip()
				break
			}
			t = it.ReadFloat64()
		case 1:
			if it.WhatIsNext() != jsoniter.StringValue {
				ok = false
				it.Skip()
				break
			}
			var err error
			if v, err = strconv.ParseFloat(it.ReadString(), 64); err != nil {
				ok = false
			}
		default:
			ok = false
			it.Skip()
		}
		i++
		return it.Error == nil
	})
	if d.it.Error != nil {
		return
	}
	if !ok || i != 2 || math.IsNaN(t) || math.IsInf(t, 0) || math.Abs(t) > 1e12 {
		d.it.ReportError("point", "not a [time, \"value\"] pair")
		return
	}
	ms := int64(math.Round(t * 1000))
	if (d.lim.notBefore != 0 && ms < d.lim.notBefore) || (d.lim.notAfter != 0 && ms > d.lim.notAfter) {
		return
	}
	d.pts = append(d.pts, point{t: time.UnixMilli(ms).UTC(), v: v})
}

// newest returns pts sorted by time, one point per time (the last read), at
// most max of them (the newest; 0: all). It sorts and compacts in place.
func newest(pts []point, max int) []point {
	slices.SortStableFunc(pts, func(a, b point) int { return a.t.Compare(b.t) })
	out := pts[:0]
	for i, p := range pts {
		if i+1 < len(pts) && pts[i+1].t.Equal(p.t) {
			continue
		}
		out = append(out, p)
	}
	if max > 0 && len(out) > max {
		out = append(out[:0], out[len(out)-max:]...)
	}
	return out
}
