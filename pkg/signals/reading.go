package signals

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/saturation-adapter/saturation-adapter/internal/excerpt"
)

// Values holds one value per Signal with a presence bit each: absent means the
// engine exposed no valid series for it, never 0.
type Values struct {
	v   [NumSignals]float64
	has uint32
}

// Value returns the signal's value and whether it is present.
func (x *Values) Value(s Signal) (float64, bool) {
	if s < 0 || s >= NumSignals || x.has&(1<<s) == 0 {
		return 0, false
	}
	return x.v[s], true
}

// Ptr returns the signal's value as a pointer, nil when absent (for JSON and
// callers that distinguish "absent" from 0).
func (x *Values) Ptr(s Signal) *float64 {
	v, ok := x.Value(s)
	if !ok {
		return nil
	}
	return &v
}

// Set sets the signal's value and marks it present.
func (x *Values) Set(s Signal, v float64) { x.v[s], x.has = v, x.has|1<<s }

// Clear marks the signal absent.
func (x *Values) Clear(s Signal) { x.v[s], x.has = 0, x.has&^(1<<s) }

// Add adds v to the signal's value (0 when absent) and marks it present.
func (x *Values) Add(s Signal, v float64) { x.v[s], x.has = x.v[s]+v, x.has|1<<s }

// EngineSignals is what one engine (one data-parallel rank, or one model version
// of a multi-model server) of a pod reports, after validity checks.
type EngineSignals struct {
	// ID is the engine label's value ("0", "1", ...; for Triton "model/version");
	// empty for engines without one. When the series of one engine label value
	// carry several models (two servers of one pod scraped together), each
	// model is an engine, its ID the value and the model joined by "/"
	// ("0/big"; "/big" without an engine label).
	ID string
	// Model is the served model name of the engine's series, if labelled.
	Model string
	// Backend reports, for multi-model servers (Triton), that the engine is a
	// TensorRT-LLM backend model rather than an ensemble or processing step.
	Backend bool
	Values
	// Hist holds the engine's latency histograms (cumulative), nil when absent.
	Hist [NumHistos]*Histogram
}

// MarshalJSON renders the engine as explain prints it: the classic signals
// always (null when absent), the others only when present, and per histogram its
// observation count and sum.
func (e EngineSignals) MarshalJSON() ([]byte, error) {
	return json.Marshal(signalMap(e.ID, e.Model, &e.Values, &e.Hist))
}

func signalMap(id, model string, x *Values, hist *[NumHistos]*Histogram) map[string]any {
	m := map[string]any{"id": id}
	if model != "" {
		m["model"] = model
	}
	for s := range NumSignals {
		if s <= Preemptions {
			m[s.String()] = x.Ptr(s)
		} else if p := x.Ptr(s); p != nil {
			m[s.String()] = *p
		}
	}
	for h := range NumHistos {
		if hh := hist[h]; hh != nil {
			m[h.String()] = map[string]float64{"count": hh.Count, "sum": hh.Sum}
		}
	}
	return m
}

// Fold is a pod's value of every signal, folded from its engines: counts and
// counters add up, ratios (KV-cache and state usage) are the mean over the
// engines reporting them, histograms add up bucket by bucket.
type Fold struct {
	Values
	// KVCacheUsageMax is the busiest engine's KV-cache usage.
	KVCacheUsageMax *float64
	// Hist holds the pod's latency histograms, nil when no engine has one.
	Hist [NumHistos]*Histogram
	// EngineCount is the number of engines folded.
	EngineCount int
	// partial has a bit per signal that some folded engines report and others
	// do not (a rejected NaN on one data-parallel rank): its value covers only
	// the engines that do.
	partial uint32
}

// Complete reports whether every folded engine reported s validly.
func (f *Fold) Complete(s Signal) bool {
	_, ok := f.Value(s)
	return ok && f.partial&(1<<s) == 0
}

// Reading is what one /metrics body says about one pod.
type Reading struct {
	// Dialect is the engine that was recognised: "vllm-v1", "vllm-v0", "sglang",
	// "triton-trtllm", "tgi" or "llamacpp".
	Dialect string
	// Models lists the distinct served model names seen, sorted (at most
	// maxModels, each at most maxLabelBytes long).
	Models []string
	// Sources names, per signal, the metric that was read (e.g.
	// "vllm:kv_cache_usage_perc", in the spelling the body used); absent when the
	// engine exposed none. Readings with the same sources share one map: do
	// not modify it.
	Sources map[string]string
	// Engines lists the engines of the pod, sorted by ID.
	Engines []EngineSignals
	// Fold is the pod's value of every signal over its engines (for Triton, over
	// its TensorRT-LLM backend models when it has any).
	Fold

	// Time is when the reading was taken: the scrape's end, or the time a caller
	// assigned. Zero until a caller sets it.
	Time time.Time
	// SampleTime is the oldest explicit sample timestamp among the series read,
	// zero when none carries one. When set, the reading is as old as it says.
	SampleTime time.Time

	// Gateway holds the series of the gateway queue metrics read, when the
	// extractor reads any (ExtractOptions.GatewayMetrics); invalid values
	// (NaN, negative, absurd) are left out.
	Gateway []GatewaySeries
	// FlowControl names the gateway flow-control families the body exposes
	// but the extractor does not read (at most 8; only when it reads gateway
	// metrics), e.g. llm_d_epp_flow_control_pool_saturation: evidence that flow
	// control is on when no queue series is left, since the endpoint picker
	// deletes an idle flow's series after its GC timeout.
	FlowControl []string `json:",omitempty"`

	// Invalid counts rejected series by reason, the gateway's included.
	Invalid map[Reason]int
	// Duplicates counts duplicate series not used as read, by outcome (see
	// DuplicateOutcome); nil when none.
	Duplicates map[DuplicateOutcome]int `json:",omitempty"`
	// Warnings explain rejected series, disagreeing duplicates, partial terms,
	// fallbacks and skipped lines; at most maxWarnings, each at most
	// maxWarningBytes.
	Warnings []string
}

// At returns the time the reading describes: SampleTime when the samples carry
// timestamps, else Time.
func (r *Reading) At() time.Time {
	if !r.SampleTime.IsZero() && (r.Time.IsZero() || r.SampleTime.Before(r.Time)) {
		return r.SampleTime
	}
	return r.Time
}

// The classic pod-level signals, as pointers (nil when absent): the fields the
// adapter's first releases exposed.

// QueueDepthPtr returns the pod's queue depth, nil when absent.
func (r *Reading) QueueDepthPtr() *float64 { return r.Ptr(QueueDepth) }

// RunningPtr returns the pod's running requests, nil when absent.
func (r *Reading) RunningPtr() *float64 { return r.Ptr(Running) }

// KVCacheUsagePtr returns the pod's mean KV-cache usage, nil when absent.
func (r *Reading) KVCacheUsagePtr() *float64 { return r.Ptr(KVCacheUsage) }

// PreemptionsPtr returns the pod's preemption count, nil when absent.
func (r *Reading) PreemptionsPtr() *float64 { return r.Ptr(Preemptions) }

// maxWarnings bounds the warnings kept per reading and maxWarningBytes each
// warning: a body with thousands of broken series, or one 1 MB label value, must
// not turn into megabytes of memory or of API error message.
const (
	maxWarnings     = 10
	maxWarningBytes = 200
)

// DuplicateOutcome says what became of a duplicate series: another series of
// the same pod, engine (or gateway series identity) and metric, as a second
// exporter, a stale job beside a live one, two Prometheus monitors or a
// hostile body give. Every source (scraped bodies, Prometheus answers, gateway
// series) follows one rule: the series with the newest sample timestamp wins
// and older ones are dropped (DuplicateOlder); equally new ones (or ones
// without timestamps, as in most bodies) that agree are one series, and ones
// that disagree give their maximum (DuplicateDisagree), so that a duplicate
// can over-state the demand it shows but never hide it. Both are warned about
// in the Reading and counted (saturation_adapter_duplicate_series_total).
type DuplicateOutcome string

// The duplicate outcomes; they label the adapter's duplicate-series counter.
const (
	// DuplicateOlder: a series dropped because a duplicate has a newer sample
	// (one per series dropped).
	DuplicateOlder DuplicateOutcome = "older"
	// DuplicateDisagree: equally new duplicates with different values, folded
	// to their maximum (one per set of duplicates).
	DuplicateDisagree DuplicateOutcome = "disagree"
)

// DuplicateOutcomes lists every DuplicateOutcome, in documentation order.
func DuplicateOutcomes() []DuplicateOutcome {
	return []DuplicateOutcome{DuplicateOlder, DuplicateDisagree}
}

// duplicates counts n duplicates with outcome o and, for DuplicateOlder, warns
// naming what (a series and engine).
func (r *Reading) duplicates(o DuplicateOutcome, n int, what string) {
	if r.Duplicates == nil {
		r.Duplicates = map[DuplicateOutcome]int{}
	}
	r.Duplicates[o] += n
	if o == DuplicateOlder {
		r.warn(fmt.Sprintf("%d duplicate series of %s dropped: a duplicate has a newer sample", n, what))
	}
}

// warn records a warning, keeping the first maxWarnings and counting the rest.
func (r *Reading) warn(w string) {
	switch {
	case len(r.Warnings) < maxWarnings:
		r.Warnings = append(r.Warnings, excerpt.String(w, maxWarningBytes))
	case len(r.Warnings) == maxWarnings:
		r.Warnings = append(r.Warnings, "further warnings omitted")
	}
}

// FoldEngines folds the engines accepted by keep (all when keep is nil) into a Fold.
func FoldEngines(engines []EngineSignals, keep func(*EngineSignals) bool) Fold {
	var f Fold
	var counts [NumSignals]int
	for i := range engines {
		e := &engines[i]
		if keep != nil && !keep(e) {
			continue
		}
		f.EngineCount++
		for s := range NumSignals {
			v, ok := e.Value(s)
			if !ok {
				continue
			}
			if s == KVCacheUsage && (f.KVCacheUsageMax == nil || v > *f.KVCacheUsageMax) {
				m := v
				f.KVCacheUsageMax = &m
			}
			f.v[s] += v
			f.has |= 1 << s
			counts[s]++
		}
		for h := range NumHistos {
			switch {
			case e.Hist[h] == nil:
			case f.Hist[h] == nil:
				// Shared, not copied: histograms are never modified once built
				// (Add returns a new one), and a single-engine pod's fold is its
				// engine's.
				f.Hist[h] = e.Hist[h]
			default:
				f.Hist[h] = f.Hist[h].Add(e.Hist[h])
			}
		}
	}
	for s := range NumSignals {
		if counts[s] > 0 && s.FoldsByMean() {
			f.v[s] /= float64(counts[s])
		}
		if counts[s] > 0 && counts[s] < f.EngineCount {
			f.partial |= 1 << s
		}
		if counts[s] > 0 && (math.IsInf(f.v[s], 0) || math.IsNaN(f.v[s])) {
			// Each value is bounded (validate), so only absurd engine counts get here.
			f.has &^= 1 << s
		}
	}
	return f
}

// EngineFilter returns which engines of a reading a model restriction selects:
// the engines serving model; without one, the reading's default view (for
// Triton, its TensorRT-LLM backends when it has any, else the model named
// tensorrt_llm by the backend's convention; see TritonBackendModel).
func EngineFilter(r *Reading, model string) func(*EngineSignals) bool {
	if model != "" {
		return func(e *EngineSignals) bool { return SameModel(e.Model, model) }
	}
	return defaultView(r)
}

func FindEngine(r *Reading, id string) *EngineSignals {
	i, ok := slices.BinarySearchFunc(r.Engines, id, func(e EngineSignals, id string) int { return compareEngineIDs(e.ID, id) })
	if !ok {
		return nil
	}
	return &r.Engines[i]
}

// SameModel compares model names with ':' and '_' alike (SGLang's router
// rewrites ':' in label values to '_', hazard NC-05).
func SameModel(a, b string) bool {
	if a == b {
		return true
	}
	return strings.ReplaceAll(a, ":", "_") == strings.ReplaceAll(b, ":", "_")
}
