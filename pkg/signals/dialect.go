package signals

// Signal names one canonical saturation signal.
type Signal int

// The canonical signals, in the order they are reported.
const (
	// QueueDepth is the number of requests waiting for admission to the batch.
	QueueDepth Signal = iota
	// Running is the number of requests in the running batch.
	Running
	// KVCacheUsage is the fraction of KV-cache blocks in use, 0..1.
	KVCacheUsage
	// Preemptions is the cumulative number of preempted sequences (a counter).
	Preemptions

	numSignals
)

// String returns the signal's lowerCamelCase name as used in JSON and logs.
func (s Signal) String() string {
	switch s {
	case QueueDepth:
		return "queueDepth"
	case Running:
		return "running"
	case KVCacheUsage:
		return "kvCacheUsage"
	case Preemptions:
		return "preemptions"
	}
	return "unknown"
}

// isRatio reports whether the signal's valid range is [0, 1].
func (s Signal) isRatio() bool { return s == KVCacheUsage }

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

// Dialect says how one engine exposes the canonical signals.
type Dialect struct {
	// Name identifies the engine, e.g. "vllm", "sglang".
	Name string
	// EngineLabel is the label whose values are separate engines (data-parallel
	// ranks) inside one pod; empty when the engine has none.
	EngineLabel string
	// ModelLabel carries the served model's name; kept as information only.
	ModelLabel string
	// Sources lists, per signal, the sources in order of preference. The first
	// source with at least one series in a body is used and the others are ignored,
	// so a renamed metric exported under both names is never counted twice.
	Sources [numSignals][]Source
}

// builtinDialects returns the table of supported engines, in detection order: the
// first dialect with any of its sources present in a body reads that body. Metric
// names are from the engines' metrics documentation and real dumps (vLLM V1 ≥0.9.2 and V0 ≤0.8, SGLang, TGI, Triton with
// TensorRT-LLM, llama.cpp server). A function, not a variable, so that no caller can
// change the table under another.
func builtinDialects() []Dialect {
	return []Dialect{
		{
			Name:        "vllm",
			EngineLabel: "engine",
			ModelLabel:  "model_name",
			Sources: [numSignals][]Source{
				QueueDepth: {{Metric: "vllm:num_requests_waiting"}},
				Running:    {{Metric: "vllm:num_requests_running"}},
				// vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc in 0.9.2/0.10
				// and exported both, with the same value, until 0.11: prefer the new name.
				KVCacheUsage: {{Metric: "vllm:kv_cache_usage_perc"}, {Metric: "vllm:gpu_cache_usage_perc"}},
				Preemptions:  {{Metric: "vllm:num_preemptions_total"}},
			},
		},
		{
			Name:        "sglang",
			EngineLabel: "dp_rank",
			ModelLabel:  "model_name",
			Sources: [numSignals][]Source{
				QueueDepth:   {{Metric: "sglang:num_queue_reqs"}},
				Running:      {{Metric: "sglang:num_running_reqs"}},
				KVCacheUsage: {{Metric: "sglang:token_usage"}},
			},
		},
		{
			Name: "triton-trtllm",
			// One Triton server hosts several models, each with its own queue and KV
			// cache: they fold like data-parallel engines (queues add up).
			EngineLabel: "model",
			ModelLabel:  "model",
			Sources: [numSignals][]Source{
				QueueDepth: {
					{Metric: "nv_trt_llm_request_metrics", Label: "request_type", Value: "waiting"},
					{Metric: "nv_inference_pending_request_count"},
				},
				Running:      {{Metric: "nv_trt_llm_request_metrics", Label: "request_type", Value: "active"}},
				KVCacheUsage: {{Metric: "nv_trt_llm_kv_cache_block_metrics", Label: "kv_cache_block_type", Value: "fraction"}},
			},
		},
		{
			Name: "tgi",
			Sources: [numSignals][]Source{
				QueueDepth: {{Metric: "tgi_queue_size"}},
				Running:    {{Metric: "tgi_batch_current_size"}},
			},
		},
		{
			Name: "llamacpp",
			Sources: [numSignals][]Source{
				QueueDepth:   {{Metric: "llamacpp:requests_deferred"}},
				Running:      {{Metric: "llamacpp:requests_processing"}},
				KVCacheUsage: {{Metric: "llamacpp:kv_cache_usage_ratio"}},
			},
		},
	}
}

// sourceRef locates one Source in the dialect table.
type sourceRef struct {
	dialect int
	signal  Signal
	pref    int
	source  Source
}

// sourceIndex maps a metric name to every Source that reads it. It is built once
// from the immutable dialect table.
type sourceIndex map[string][]sourceRef

func newSourceIndex(dialects []Dialect) sourceIndex {
	idx := sourceIndex{}
	for d, dia := range dialects {
		for s := range numSignals {
			for p, src := range dia.Sources[s] {
				idx[src.Metric] = append(idx[src.Metric], sourceRef{dialect: d, signal: s, pref: p, source: src})
			}
		}
	}
	return idx
}
