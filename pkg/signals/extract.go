package signals

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
)

// ErrNoEngineMetrics is returned (wrapped) by [Extractor.Extract] when a body
// parses but carries no metric of any supported engine.
var ErrNoEngineMetrics = errors.New("no LLM engine saturation metrics found")

// Reason says why a series was rejected.
type Reason string

// The reasons a series is rejected; they label the adapter's
// invalid-samples counter.
const (
	ReasonNaN        Reason = "nan"
	ReasonInf        Reason = "inf"
	ReasonNegative   Reason = "negative"
	ReasonAboveRange Reason = "above_range"
)

// Reasons lists every Reason, in documentation order.
func Reasons() []Reason {
	return []Reason{ReasonNaN, ReasonInf, ReasonNegative, ReasonAboveRange}
}

// EngineSignals is what one engine (one data-parallel rank) of a pod reports.
// A nil field means the engine exposed no valid series for that signal.
type EngineSignals struct {
	// ID is the engine label's value ("0", "1", ...); empty for engines without one.
	ID           string   `json:"id"`
	QueueDepth   *float64 `json:"queueDepth"`
	Running      *float64 `json:"running"`
	KVCacheUsage *float64 `json:"kvCacheUsage"`
	Preemptions  *float64 `json:"preemptions"`
}

// Reading is what one /metrics body says, folded to one pod. Nil means absent or
// invalid, never 0. Units: requests for QueueDepth and Running, ratio 0..1 for the
// KV-cache usages, count for Preemptions.
type Reading struct {
	// Dialect is the engine that was recognised: "vllm-v1", "vllm-v0", "sglang",
	// "triton-trtllm", "tgi" or "llamacpp".
	Dialect string
	// Models lists the distinct served model names seen, sorted.
	Models []string
	// Sources names, per signal, the metric that was read (e.g.
	// "vllm:kv_cache_usage_perc"); absent when the engine exposed none.
	Sources map[string]string
	// Engines lists the engines of the pod, sorted by ID.
	Engines []EngineSignals

	QueueDepth   *float64
	Running      *float64
	KVCacheUsage *float64
	// KVCacheUsageMax is the busiest engine's KV-cache usage.
	KVCacheUsageMax *float64
	Preemptions     *float64

	// Invalid counts rejected series by reason.
	Invalid map[Reason]int
	// Warnings explain rejected series, disagreeing duplicates and partial terms.
	Warnings []string
}

// slot returns the field that holds a signal's pod-level value.
func (r *Reading) slot(s Signal) **float64 {
	switch s {
	case QueueDepth:
		return &r.QueueDepth
	case Running:
		return &r.Running
	case KVCacheUsage:
		return &r.KVCacheUsage
	}
	return &r.Preemptions
}

// slot returns the field that holds a signal's value for the engine.
func (e *EngineSignals) slot(s Signal) **float64 {
	switch s {
	case QueueDepth:
		return &e.QueueDepth
	case Running:
		return &e.Running
	case KVCacheUsage:
		return &e.KVCacheUsage
	}
	return &e.Preemptions
}

// Extractor reads /metrics bodies. It is immutable and safe for concurrent use.
type Extractor struct {
	dialects []Dialect
	index    sourceIndex
}

// NewExtractor returns an Extractor for the built-in engine dialects.
func NewExtractor() *Extractor {
	d := builtinDialects()
	return &Extractor{dialects: d, index: newSourceIndex(d)}
}

// rawSample is one series of interest, as read.
type rawSample struct {
	ref    sourceRef
	engine string
	value  float64
	series string
}

// Extract parses a Prometheus text exposition (format 0.0.4; a missing final
// newline is accepted) and returns the pod's canonical signals.
//
// Errors: a body that does not parse (the parser's message, with its position),
// and ErrNoEngineMetrics (wrapped, listing what was looked for) when no supported
// engine metric is present. Invalid values are not errors: they are counted and
// reported in the Reading.
func (e *Extractor) Extract(body []byte) (Reading, error) {
	samples, models, err := e.scan(body)
	if err != nil {
		return Reading{}, err
	}
	dialect := -1
	for _, s := range samples {
		if dialect < 0 || s.ref.dialect < dialect {
			dialect = s.ref.dialect
		}
	}
	if dialect < 0 {
		return Reading{}, fmt.Errorf("%w (looked for %s)", ErrNoEngineMetrics, e.lookedFor())
	}
	return e.fold(dialect, samples, models), nil
}

// scan runs the exposition parser once over the body and keeps only the series
// that some dialect reads. Parsing is Prometheus's own scrape parser
// (model/textparse): it yields series as byte slices without allocating, so the
// cost of the hundreds of series nobody reads is only the lexing. BenchmarkParsers
// compares it with prometheus/common/expfmt.
func (e *Extractor) scan(body []byte) ([]rawSample, map[string]struct{}, error) {
	p := textparse.NewPromParser(body, labels.NewSymbolTable(), false)
	var (
		samples []rawSample
		models  map[string]struct{}
		lset    labels.Labels
	)
	for {
		entry, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("parsing exposition: %w", err)
		}
		if entry != textparse.EntrySeries {
			continue
		}
		series, _, value := p.Series()
		name := metricName(series)
		if len(name) == 0 {
			// A quoted UTF-8 name ({"vllm:num_requests_waiting",engine="0"}): only the
			// labels API knows it. Rare, so the allocation does not matter.
			p.Labels(&lset)
			name = []byte(lset.Get(model.MetricNameLabel))
		}
		refs, ok := e.index[string(name)] // no allocation: Go optimises string(b) in a map index
		if !ok {
			continue
		}
		p.Labels(&lset)
		for _, ref := range refs {
			src := ref.source
			if src.Label != "" && lset.Get(src.Label) != src.Value {
				continue
			}
			d := &e.dialects[ref.dialect]
			if d.ModelLabel != "" {
				if m := lset.Get(d.ModelLabel); m != "" {
					if models == nil {
						models = map[string]struct{}{}
					}
					models[m] = struct{}{}
				}
			}
			var engine string
			if d.EngineLabel != "" {
				engine = lset.Get(d.EngineLabel)
			}
			samples = append(samples, rawSample{ref: ref, engine: engine, value: value, series: string(series)})
		}
	}
	return samples, models, nil
}

// metricName returns the metric name at the start of a series' bytes: the bytes
// up to the first '{' or space; empty when the name is quoted inside the braces.
func metricName(series []byte) []byte {
	for i, c := range series {
		if c == '{' || c == ' ' {
			return series[:i]
		}
	}
	return series
}

// fold applies the preference, validity, duplicate and engine rules of the
// package documentation to the samples of one dialect, in three phases: choose
// one source per signal, collect each engine's valid values (duplicates
// collapsed to their maximum), then fold the engines into the pod.
func (e *Extractor) fold(dialect int, samples []rawSample, models map[string]struct{}) Reading {
	d := &e.dialects[dialect]
	r := Reading{Dialect: d.Name, Sources: map[string]string{}}
	for m := range models {
		r.Models = append(r.Models, m)
	}
	slices.Sort(r.Models)
	chosen, hasEngineLabel := chooseSources(dialect, samples)
	for s := range numSignals {
		if chosen[s] >= 0 {
			r.Sources[s.String()] = d.Sources[s][chosen[s]].String()
		}
	}
	if d.Name == "vllm" {
		r.Dialect = vllmVersion(r.Sources[KVCacheUsage.String()], hasEngineLabel)
	}
	engines, ids := r.collect(dialect, chosen, samples)
	r.foldEngines(d, chosen, engines, ids)
	return r
}

// chooseSources picks, per signal, the most preferred source of the dialect
// present in the samples (-1 for none), and reports whether any sample carries
// an engine label.
func chooseSources(dialect int, samples []rawSample) (chosen [numSignals]int, hasEngineLabel bool) {
	for s := range numSignals {
		chosen[s] = -1
	}
	for _, s := range samples {
		if s.ref.dialect != dialect {
			continue
		}
		if s.engine != "" {
			hasEngineLabel = true
		}
		if c := chosen[s.ref.signal]; c < 0 || s.ref.pref < c {
			chosen[s.ref.signal] = s.ref.pref
		}
	}
	return chosen, hasEngineLabel
}

// cell is one engine's value of one signal: the maximum of its valid series.
type cell struct {
	value  float64
	n      int
	differ bool
}

// collect validates each sample of a chosen source and collapses duplicates
// within an engine to their maximum. It returns the cells by engine ID and the
// IDs in order.
func (r *Reading) collect(dialect int, chosen [numSignals]int, samples []rawSample) (map[string]*[numSignals]cell, []string) {
	engines := map[string]*[numSignals]cell{}
	var ids []string
	for _, s := range samples {
		if s.ref.dialect != dialect || s.ref.pref != chosen[s.ref.signal] {
			continue
		}
		cells, ok := engines[s.engine]
		if !ok {
			cells = &[numSignals]cell{}
			engines[s.engine] = cells
			ids = append(ids, s.engine)
		}
		if reason, bad := validate(s.ref.signal, s.value); bad {
			if r.Invalid == nil {
				r.Invalid = map[Reason]int{}
			}
			r.Invalid[reason]++
			r.warn(fmt.Sprintf("rejected %s = %g: %s", s.series, s.value, reason))
			continue
		}
		c := &cells[s.ref.signal]
		switch {
		case c.n == 0:
			c.value = s.value
		case s.value != c.value:
			c.differ = true
			c.value = math.Max(c.value, s.value)
		}
		c.n++
	}
	slices.SortFunc(ids, compareEngineIDs)
	return engines, ids
}

// foldEngines sets each engine's values and the pod's: queue depth, running and
// preemptions add up, KV-cache usage is the mean over the engines reporting it
// (the busiest kept as KVCacheUsageMax).
func (r *Reading) foldEngines(d *Dialect, chosen [numSignals]int, engines map[string]*[numSignals]cell, ids []string) {
	var sums [numSignals]float64
	var counts [numSignals]int
	for _, id := range ids {
		cells := engines[id]
		es := EngineSignals{ID: id}
		for s := range numSignals {
			c := cells[s]
			if c.n == 0 {
				continue
			}
			if c.differ {
				r.warn(fmt.Sprintf("%d duplicate series of %s for engine %q disagree; using their maximum %g",
					c.n, d.Sources[s][chosen[s]], id, c.value))
			}
			v := c.value
			*es.slot(s) = &v
			if s == KVCacheUsage && (r.KVCacheUsageMax == nil || v > *r.KVCacheUsageMax) {
				m := v
				r.KVCacheUsageMax = &m
			}
			sums[s] += v
			counts[s]++
		}
		r.Engines = append(r.Engines, es)
	}
	for s := range numSignals {
		if chosen[s] < 0 {
			continue
		}
		if counts[s] == 0 {
			r.warn(fmt.Sprintf("no valid %s series; %s drops out", d.Sources[s][chosen[s]], s))
			continue
		}
		if counts[s] < len(ids) {
			r.warn(fmt.Sprintf("%s is valid for %d of %d engines; the pod value uses those only", s, counts[s], len(ids)))
		}
		v := sums[s]
		if s == KVCacheUsage {
			v /= float64(counts[s])
		}
		*r.slot(s) = &v
	}
}

// maxWarnings bounds the warnings kept per reading: a body with thousands of
// broken series must not turn into megabytes of memory or of API error message.
const maxWarnings = 10

// warn records a warning, keeping the first maxWarnings and counting the rest.
func (r *Reading) warn(w string) {
	switch {
	case len(r.Warnings) < maxWarnings:
		r.Warnings = append(r.Warnings, w)
	case len(r.Warnings) == maxWarnings:
		r.Warnings = append(r.Warnings, "further warnings omitted")
	}
}

// vllmVersion names the vLLM metrics generation: V1 exports the engine label and,
// from 0.9.2, kv_cache_usage_perc; V0 has neither.
func vllmVersion(kvSource string, hasEngineLabel bool) string {
	if hasEngineLabel || kvSource == "vllm:kv_cache_usage_perc" {
		return "vllm-v1"
	}
	return "vllm-v0"
}

// MaxRequests is the largest queue depth or running count accepted from one
// series. No engine holds a billion requests; values above it are corrupt (a
// uint64 underflow reads 1.8e19) and would otherwise dominate, or overflow, a
// pool's sum.
const MaxRequests = 1e9

// validate reports whether v is outside the valid range of the signal and why.
func validate(s Signal, v float64) (Reason, bool) {
	switch {
	case math.IsNaN(v):
		return ReasonNaN, true
	case math.IsInf(v, 0):
		return ReasonInf, true
	case v < 0:
		return ReasonNegative, true
	case s.isRatio() && v > 1:
		return ReasonAboveRange, true
	case (s == QueueDepth || s == Running) && v > MaxRequests:
		return ReasonAboveRange, true
	}
	return "", false
}

// compareEngineIDs orders engine IDs numerically when both are numbers ("2" before
// "10"), else lexically.
func compareEngineIDs(a, b string) int {
	if len(a) != len(b) && isDigits(a) && isDigits(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

func (e *Extractor) lookedFor() string {
	var names []string
	for _, d := range e.dialects {
		if src := d.Sources[QueueDepth]; len(src) > 0 {
			names = append(names, src[0].Metric)
		}
	}
	return strings.Join(names, ", ")
}
