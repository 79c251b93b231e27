package signals

import (
	"slices"
	"strings"
)

// Signal names one canonical scalar signal of an engine: a gauge read as is, or a
// counter whose rate a policy may use.
type Signal int

// The canonical scalar signals, in the order they are reported. The first four
// are the classic saturation signals; the others feed policy terms (rates,
// batch slots) and engine states (wedged, frozen, sleeping, clipped).
const (
	// QueueDepth is the number of requests waiting that more replicas would
	// shorten: vLLM's num_requests_waiting_by_reason{reason="capacity"} when
	// it exists, else num_requests_waiting less its reason="deferred" part
	// (when only that part exists). Unit: requests.
	QueueDepth Signal = iota
	// Running is the number of requests in the running batch. Unit: requests.
	Running
	// KVCacheUsage is the fraction of KV-cache blocks in use, 0..1. Unit: ratio.
	KVCacheUsage
	// Preemptions is the cumulative number of preempted sequences (a counter).
	Preemptions
	// QueueDeferred is the number of waiting requests that more replicas would
	// not shorten: vLLM's num_requests_waiting_by_reason{reason="deferred"}
	// (LoRA budget, remote KV transfer, structured-output grammar). Unit: requests.
	QueueDeferred
	// StateUsage is the fraction of a hybrid model's state pool in use (SGLang
	// mamba_usage), 0..1: request-slot pressure, not KV. Unit: ratio.
	StateUsage
	// MaxRunning is the engine's own limit of concurrent sequences, where it
	// exposes one (Triton's nv_trt_llm_request_metrics{request_type="max"}).
	// Unit: requests.
	MaxRunning
	// Awake is 1 while the engine is awake and 0 while it sleeps (vLLM sleep
	// mode, vllm:engine_sleep_state{sleep_state="awake"}).
	Awake
	// GenerationTokens is the cumulative number of generated tokens (a counter).
	GenerationTokens
	// PromptTokens is the cumulative number of prefilled prompt tokens (a counter).
	PromptTokens
	// RequestsFinished is the cumulative number of finished requests, over every
	// finish reason (a counter).
	RequestsFinished
	// Rejections is the cumulative number of requests refused by admission
	// limits, over every reason (a counter; vLLM's admission_rejections_total).
	Rejections

	NumSignals
)

var signalNames = [NumSignals]string{
	QueueDepth: "queueDepth", Running: "running", KVCacheUsage: "kvCacheUsage", Preemptions: "preemptions",
	QueueDeferred: "queueDeferred", StateUsage: "stateUsage", MaxRunning: "maxRunning", Awake: "awake",
	GenerationTokens: "generationTokens", PromptTokens: "promptTokens", RequestsFinished: "requestsFinished",
	Rejections: "rejections",
}

// String returns the signal's lowerCamelCase name as used in JSON and logs.
func (s Signal) String() string {
	if s < 0 || s >= NumSignals {
		return "unknown"
	}
	return signalNames[s]
}

// ParseSignal returns the signal named name (its String form).
func ParseSignal(name string) (Signal, bool) {
	for s, n := range signalNames {
		if n == name {
			return Signal(s), true
		}
	}
	return 0, false
}

// isRatio reports whether the signal's valid range is [0, 1].
func (s Signal) isRatio() bool { return s == KVCacheUsage || s == StateUsage || s == Awake }

// isCount reports whether the signal counts requests now (a gauge of requests).
func (s Signal) isCount() bool {
	return s == QueueDepth || s == Running || s == QueueDeferred || s == MaxRunning
}

// IsCounter reports whether the signal is a cumulative counter.
func (s Signal) IsCounter() bool {
	return s == Preemptions || s == GenerationTokens || s == PromptTokens || s == RequestsFinished || s == Rejections
}

// FoldsByMean reports whether engines of a pod fold by their mean (ratios) rather
// than their sum (counts, counters).
func (s Signal) FoldsByMean() bool { return s == KVCacheUsage || s == StateUsage || s == Awake }

// Histo names one latency histogram of an engine.
type Histo int

// The latency histograms, in the order they are reported.
const (
	// TTFT is the time to first token, in seconds.
	TTFT Histo = iota
	// E2ELatency is the end-to-end request latency, in seconds.
	E2ELatency
	// InterTokenLatency is the time between output tokens, in seconds.
	InterTokenLatency

	NumHistos
)

var histoNames = [NumHistos]string{TTFT: "ttft", E2ELatency: "e2eLatency", InterTokenLatency: "interTokenLatency"}

// String returns the histogram's lowerCamelCase name.
func (h Histo) String() string {
	if h < 0 || h >= NumHistos {
		return "unknown"
	}
	return histoNames[h]
}

// Source is one way an engine exposes a signal: a metric family and, for packed
// gauge families such as Triton's, a label that must carry a given value.
type Source struct {
	// Metric is the exposition name, e.g. "vllm:num_requests_waiting".
	Metric string
	// Label and Value, when Label is set, select the series of a packed family.
	Label, Value string
}

// String renders the source as a PromQL-style selector.
func (s Source) String() string {
	if s.Label == "" {
		return s.Metric
	}
	return s.Metric + `{` + s.Label + `="` + s.Value + `"}`
}

// Combine says how the sources of one SourceSet make one value per engine.
type Combine int

// The ways sources combine.
const (
	// CombineOne: the set has one source.
	CombineOne Combine = iota
	// CombineMax: the maximum over the sources present (SGLang's full and SWA
	// KV pools: the KV cache is as full as its fullest pool).
	CombineMax
	// CombineRatio: Sources[0] / Sources[1], both required (Triton's used / max
	// KV blocks).
	CombineRatio
	// CombineSum: Sources[0] plus the others present. The set stands for what
	// it adds to Sources[0] (required): a body has it only when one of the
	// others has series (SGLang P/D's bootstrap and prealloc queues beside
	// num_queue_reqs, hazard NC-21).
	CombineSum
)

// SourceSet is one alternative for a signal: one source, or several combined.
type SourceSet struct {
	Sources []Source
	Combine Combine
	// SumLabel, when set, names a label whose values are separate parts of the
	// signal that add up within an engine (request_success_total's
	// finished_reason, admission_rejections_total's reason). Series that differ
	// only in other labels are duplicates.
	SumLabel string
	// Minus lists signals that the set's value includes and that are read
	// apart: an engine's value of each, when it has one, is subtracted (at
	// least 0 remains). vLLM's num_requests_waiting counts the deferred waits
	// that num_requests_waiting_by_reason{reason="deferred"} gives.
	Minus []Signal
}

// String renders the set: its source, max(a, b) or a / b.
func (ss SourceSet) String() string {
	names := make([]string, len(ss.Sources))
	for i, s := range ss.Sources {
		names[i] = s.String()
	}
	switch ss.Combine {
	case CombineMax:
		return "max(" + strings.Join(names, ", ") + ")"
	case CombineRatio:
		return strings.Join(names, " / ")
	case CombineSum:
		return strings.Join(names, " + ")
	}
	return strings.Join(names, ", ")
}

// HistoSource is a histogram family: Metric is its base name (the series are
// Metric_bucket{le=…}, Metric_count and Metric_sum).
type HistoSource struct {
	Metric string
}

// Dialect says how one engine exposes the canonical signals.
type Dialect struct {
	// Name identifies the engine, e.g. "vllm", "sglang".
	Name string
	// EngineLabels are the labels whose values tell separate engines of one pod
	// apart (vLLM: "engine", the data-parallel rank; Triton: "model" and
	// "version"); empty when the engine has none.
	EngineLabels []string
	// ModelLabel carries the served model's name. Series that differ in it are
	// different engines, never duplicates (see splitModels).
	ModelLabel string
	// Spellings, when set, are the alternative prefixes of every metric name of
	// the dialect (SGLang: "sglang:" as the engine exposes them, "sglang_" as its
	// router re-exports them). The table spells names with the first; each body
	// is read with the first spelling present, never both.
	Spellings []string
	// Sources lists, per signal, the alternatives in order of preference. The
	// first alternative with at least one series in a body is used for the
	// engines that have it; an engine whose preferred series are all invalid
	// falls back to the next alternative, so a renamed metric exported under
	// both names is never counted twice.
	Sources [NumSignals][]SourceSet
	// Histos lists, per latency histogram, the families in order of preference.
	Histos [NumHistos][]HistoSource
	// BackendPrefix, when set, marks the engines of a multi-model server that do
	// the work (Triton: models with nv_trt_llm_* series are TensorRT-LLM backends;
	// ensemble, pre- and post-processing steps report the same request again).
	// When a body has such engines, the pod's default view counts only them.
	BackendPrefix string
}

func one(metric string) []SourceSet { return []SourceSet{{Sources: []Source{{Metric: metric}}}} }

// sum is a CombineSum set of the metrics.
func sum(metrics ...string) SourceSet {
	ss := SourceSet{Combine: CombineSum}
	for _, m := range metrics {
		ss.Sources = append(ss.Sources, Source{Metric: m})
	}
	return ss
}

func labelled(metric, label, value string) SourceSet {
	return SourceSet{Sources: []Source{{Metric: metric, Label: label, Value: value}}}
}

// builtinDialects returns the table of supported engines. Metric names are from
// the engines' metrics code and real dumps:
//   - vLLM V1 (vllm/v1/metrics/loggers.py, PrometheusStatLogger, v0.10–0.11) and
//     V0 (≤ 0.8), including num_requests_waiting_by_reason, engine_sleep_state
//     and admission_rejections_total from later releases (hazards NC-02, NC-03);
//   - SGLang (python/sglang/srt/metrics/collector.py), both spellings (NC-05),
//     the hybrid-model pools full_token_usage, swa_token_usage, mamba_usage (NC-06)
//     and the scheduler's realtime_tokens_total{mode} (collector.py at
//     sgl-project/sglang 00ae9c15, SchedulerMetricsCollector);
//   - Triton with the TensorRT-LLM backend (triton-inference-server/tensorrtllm_backend
//     README, "Triton Metrics");
//   - TensorRT-LLM's trtllm-serve (NVIDIA/TensorRT-LLM PR #5785, core metrics,
//     2025-07; PR #12545, trtllm_ prefix and the queue gauges, 2026-03-25;
//     hazard NC-17);
//   - Hugging Face TGI (router/src/server.rs metric names) and llama.cpp server
//     (tools/server, --metrics).
//
// A function, not a variable, so that no caller can change the table under another.
func builtinDialects() []Dialect {
	return []Dialect{
		{
			Name:         "vllm",
			EngineLabels: []string{"engine"},
			ModelLabel:   "model_name",
			Sources: [NumSignals][]SourceSet{
				// Only capacity waits count once the engine splits them by reason.
				QueueDepth: {
					labelled("vllm:num_requests_waiting_by_reason", "reason", "capacity"),
					{Sources: []Source{{Metric: "vllm:num_requests_waiting"}}, Minus: []Signal{QueueDeferred}},
				},
				QueueDeferred: {labelled("vllm:num_requests_waiting_by_reason", "reason", "deferred")},
				Running:       one("vllm:num_requests_running"),
				// vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc in 0.9.2/0.10
				// and exported both, with the same value, until 0.11: prefer the new name.
				KVCacheUsage:     append(one("vllm:kv_cache_usage_perc"), one("vllm:gpu_cache_usage_perc")...),
				Preemptions:      one("vllm:num_preemptions_total"),
				Awake:            {labelled("vllm:engine_sleep_state", "sleep_state", "awake")},
				GenerationTokens: one("vllm:generation_tokens_total"),
				PromptTokens:     one("vllm:prompt_tokens_total"),
				RequestsFinished: {{Sources: []Source{{Metric: "vllm:request_success_total"}}, SumLabel: "finished_reason"}},
				Rejections:       {{Sources: []Source{{Metric: "vllm:admission_rejections_total"}}, SumLabel: "reason"}},
			},
			Histos: [NumHistos][]HistoSource{
				TTFT:       {{Metric: "vllm:time_to_first_token_seconds"}},
				E2ELatency: {{Metric: "vllm:e2e_request_latency_seconds"}},
				// inter_token_latency_seconds replaced time_per_output_token_seconds
				// (deprecated in 0.11); both are exported in between.
				InterTokenLatency: {{Metric: "vllm:inter_token_latency_seconds"}, {Metric: "vllm:time_per_output_token_seconds"}},
			},
		},
		{
			Name: "sglang",
			// The router's aggregated /engine_metrics adds worker_addr (one
			// engine per worker, hazard NC-05); a pod's own /metrics has none.
			EngineLabels: []string{"dp_rank", "worker_addr"},
			ModelLabel:   "model_name",
			Spellings:    []string{"sglang:", "sglang_"},
			Sources: [NumSignals][]SourceSet{
				// With prefill/decode disaggregation most of the backlog waits
				// outside num_queue_reqs (hazard NC-21; sgl-project/sglang
				// PR #24341, 2026-05-04, renamed prefill_prealloc to
				// prefill_bootstrap; collector.py): a prefill pod's bootstrap
				// queue (either spelling, the new first, never both) and a
				// decode pod's prealloc queue are demand; the decode transfer
				// queue (KV in flight from prefill) is a deferred wait, and the
				// prefill inflight queue (prefill done, polling the transfer) is
				// neither. The pod's role comes from its labels, never from
				// engine_type ("unified" on P/D nodes).
				QueueDepth: {
					sum("sglang:num_queue_reqs", "sglang:num_prefill_bootstrap_queue_reqs", "sglang:num_decode_prealloc_queue_reqs"),
					sum("sglang:num_queue_reqs", "sglang:num_prefill_prealloc_queue_reqs", "sglang:num_decode_prealloc_queue_reqs"),
					one("sglang:num_queue_reqs")[0],
				},
				QueueDeferred: one("sglang:num_decode_transfer_queue_reqs"),
				Running:       one("sglang:num_running_reqs"),
				// On hybrid models token_usage is max(full, swa, mamba): KV comes from
				// the attention pools when the engine exports them (NC-06).
				KVCacheUsage: {
					{Sources: []Source{{Metric: "sglang:full_token_usage"}, {Metric: "sglang:swa_token_usage"}}, Combine: CombineMax},
					{Sources: []Source{{Metric: "sglang:token_usage"}}},
				},
				StateUsage: one("sglang:mamba_usage"),
				// The scheduler's own token counter (per rank, updated every
				// decode log interval, 40 steps by default) before the
				// tokenizer's, which counts a request's tokens when it
				// finishes: with long generations nothing may finish within a
				// state window while the engine decodes.
				GenerationTokens: {labelled("sglang:realtime_tokens_total", "mode", "decode"), one("sglang:generation_tokens_total")[0]},
				PromptTokens:     {labelled("sglang:realtime_tokens_total", "mode", "prefill_compute"), one("sglang:prompt_tokens_total")[0]},
			},
			Histos: [NumHistos][]HistoSource{
				TTFT:              {{Metric: "sglang:time_to_first_token_seconds"}},
				E2ELatency:        {{Metric: "sglang:e2e_request_latency_seconds"}},
				InterTokenLatency: {{Metric: "sglang:inter_token_latency_seconds"}, {Metric: "sglang:time_per_output_token_seconds"}},
			},
		},
		{
			Name: "triton-trtllm",
			// One Triton server hosts several models and versions, each with its own
			// queue and KV cache: they fold like data-parallel engines.
			EngineLabels:  []string{"model", "version"},
			ModelLabel:    "model",
			BackendPrefix: "nv_trt_llm_",
			Sources: [NumSignals][]SourceSet{
				QueueDepth: {
					labelled("nv_trt_llm_request_metrics", "request_type", "waiting"),
					{Sources: []Source{{Metric: "nv_inference_pending_request_count"}}},
				},
				Running:    {labelled("nv_trt_llm_request_metrics", "request_type", "active")},
				MaxRunning: {labelled("nv_trt_llm_request_metrics", "request_type", "max")},
				KVCacheUsage: {
					labelled("nv_trt_llm_kv_cache_block_metrics", "kv_cache_block_type", "fraction"),
					{Sources: []Source{
						{Metric: "nv_trt_llm_kv_cache_block_metrics", Label: "kv_cache_block_type", Value: "used"},
						{Metric: "nv_trt_llm_kv_cache_block_metrics", Label: "kv_cache_block_type", Value: "max"},
					}, Combine: CombineRatio},
				},
				RequestsFinished: one("nv_inference_request_success"),
			},
		},
		{
			// TensorRT-LLM's trtllm-serve (hazard NC-17): Prometheus text at
			// /prometheus/metrics (its /metrics is JSON), trtllm_-prefixed
			// from 1.3 (NVIDIA/TensorRT-LLM PR #12545, 2026-03-25, which
			// added the queue and running gauges from iteration stats),
			// unprefixed before; one engine per server, labelled model_name.
			Name:       "trtllm",
			ModelLabel: "model_name",
			Spellings:  []string{"trtllm_", ""},
			Sources: [NumSignals][]SourceSet{
				QueueDepth:       one("trtllm_num_requests_waiting"),
				Running:          one("trtllm_num_requests_running"),
				GenerationTokens: one("trtllm_generation_tokens_total"),
				PromptTokens:     one("trtllm_prompt_tokens_total"),
				RequestsFinished: {{Sources: []Source{{Metric: "trtllm_request_success_total"}}, SumLabel: "finished_reason"}},
			},
			Histos: [NumHistos][]HistoSource{
				TTFT:              {{Metric: "trtllm_time_to_first_token_seconds"}},
				E2ELatency:        {{Metric: "trtllm_e2e_request_latency_seconds"}},
				InterTokenLatency: {{Metric: "trtllm_time_per_output_token_seconds"}},
			},
		},
		{
			Name: "tgi",
			Sources: [NumSignals][]SourceSet{
				QueueDepth:       one("tgi_queue_size"),
				Running:          one("tgi_batch_current_size"),
				RequestsFinished: one("tgi_request_success"),
			},
			Histos: [NumHistos][]HistoSource{
				E2ELatency:        {{Metric: "tgi_request_duration"}},
				InterTokenLatency: {{Metric: "tgi_request_mean_time_per_token_duration"}},
			},
		},
		{
			Name: "llamacpp",
			Sources: [NumSignals][]SourceSet{
				QueueDepth:       one("llamacpp:requests_deferred"),
				Running:          one("llamacpp:requests_processing"),
				KVCacheUsage:     one("llamacpp:kv_cache_usage_ratio"),
				GenerationTokens: one("llamacpp:tokens_predicted_total"),
				PromptTokens:     one("llamacpp:prompt_tokens_total"),
			},
		},
	}
}

// sourceRef locates one Source in the dialect table.
type sourceRef struct {
	dialect  int
	spelling int // index into the dialect's Spellings; 0 without spellings
	signal   Signal
	pref     int // index of the SourceSet in Sources[signal]
	part     int // index of the Source in the set
	combine  Combine
	source   Source
}

// histoRef locates one histogram series kind in the dialect table.
type histoRef struct {
	dialect  int
	spelling int
	histo    Histo
	pref     int
	kind     histoPart
}

type histoPart int

const (
	partBucket histoPart = iota
	partCount
	partSum
)

// sourceIndex maps a metric name as exposed (every spelling) to what reads it.
// It is built once from the immutable dialect table.
type sourceIndex struct {
	scalars map[string][]sourceRef
	histos  map[string][]histoRef
	// gateway holds the gateway queue metrics read (ExtractOptions.GatewayMetrics).
	gateway map[string]bool
	// read holds every name of scalars, histos and gateway, and first the first
	// bytes of those names: the prefilter rejects most lines on their first byte.
	read  map[string]bool
	first [256]bool
}

// spell rewrites a table name into spelling k of the dialect.
func (d *Dialect) spell(name string, k int) string {
	if len(d.Spellings) == 0 || k == 0 {
		return name
	}
	rest, ok := strings.CutPrefix(name, d.Spellings[0])
	if !ok {
		return name
	}
	return d.Spellings[k] + rest
}

func (d *Dialect) spellings() int { return max(1, len(d.Spellings)) }

// gatewayReadNames returns the families the extractor reads for one gateway
// queue metric: its spellings (GatewayQueueMetrics) and, for llm-d's endpoint
// picker, its stale-endpoints gauge.
func gatewayReadNames(metric string) []string {
	names := GatewayQueueMetrics(metric)
	if slices.Contains(names, LLMDGatewayQueueMetric) {
		names = append(names, LLMDStaleEndpointsMetric)
	}
	return names
}

// newSourceIndex indexes every scalar source and, when histograms is set, every
// histogram series name.
func newSourceIndex(dialects []Dialect, histograms bool, gateway []string) sourceIndex {
	idx := sourceIndex{scalars: map[string][]sourceRef{}, histos: map[string][]histoRef{}, gateway: map[string]bool{}, read: map[string]bool{}}
	for _, metric := range gateway {
		if metric == "" {
			continue
		}
		for _, g := range gatewayReadNames(metric) {
			idx.gateway[g], idx.read[g], idx.first[g[0]] = true, true, true
		}
	}
	if len(idx.gateway) > 0 {
		for _, p := range flowControlPrefixes { // noticed, not read (Reading.FlowControl)
			idx.first[p[0]] = true
		}
	}

	for d := range dialects {
		dia := &dialects[d]
		for k := range dia.spellings() {
			for s := range NumSignals {
				for p, set := range dia.Sources[s] {
					for part, src := range set.Sources {
						name := dia.spell(src.Metric, k)
						src.Metric = name
						idx.scalars[name] = append(idx.scalars[name], sourceRef{dialect: d, spelling: k, signal: s, pref: p, part: part, combine: set.Combine, source: src})
					}
				}
			}
			if !histograms {
				continue
			}
			for h := range NumHistos {
				for p, hs := range dia.Histos[h] {
					base := dia.spell(hs.Metric, k)
					for kind, suffix := range []string{"_bucket", "_count", "_sum"} {
						idx.histos[base+suffix] = append(idx.histos[base+suffix], histoRef{dialect: d, spelling: k, histo: h, pref: p, kind: histoPart(kind)})
					}
				}
			}
		}
	}
	for name := range idx.scalars {
		idx.read[name], idx.first[name[0]] = true, true
	}
	for name := range idx.histos {
		idx.read[name], idx.first[name[0]] = true, true
	}
	return idx
}
