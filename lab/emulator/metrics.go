package emulator

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricNames selects which generation of vLLM's metric names [Metrics] serves.
type MetricNames string

const (
	// NamesV1 is vLLM V1 after the KV-cache rename (0.11 on):
	// vllm:kv_cache_usage_perc and vllm:inter_token_latency_seconds, labels
	// model_name and engine, with the _created series Python's prometheus_client
	// adds to every counter and histogram.
	NamesV1 MetricNames = "v1"
	// NamesV1RenameWindow is vLLM V1 0.9.2–0.11, like the 0.10 dump in testdata:
	// NamesV1 plus the deprecated vllm:gpu_cache_usage_perc (same value) and
	// vllm:time_per_output_token_seconds (same observations as
	// vllm:inter_token_latency_seconds).
	NamesV1RenameWindow MetricNames = "v1-rename-window"
	// NamesV0 is vLLM V0 (<= 0.8, names of 0.6): vllm:gpu_cache_usage_perc,
	// vllm:num_requests_swapped (always 0), vllm:time_per_output_token_seconds,
	// model_name as the only label, shorter histogram buckets, no _created series
	// (V0 disabled them). One engine only.
	NamesV0 MetricNames = "v0"
)

// AllMetricNames returns every generation of names.
func AllMetricNames() []MetricNames { return []MetricNames{NamesV1, NamesV1RenameWindow, NamesV0} }

// ParseMetricNames returns the generation of names called s (v1, v1-rename-window, v0).
func ParseMetricNames(s string) (MetricNames, error) {
	for _, d := range AllMetricNames() {
		if string(d) == s {
			return d, nil
		}
	}
	return "", fmt.Errorf("unknown metric names %q, want one of %v", s, AllMetricNames())
}

// MetricsOptions configures [NewMetrics].
type MetricsOptions struct {
	// ModelName is the model_name label value (vLLM's served model name).
	ModelName string
	// Names selects the metric names; default NamesV1.
	Names MetricNames
	// Engines is the number of data-parallel engines, labelled engine="0".."N-1";
	// default 1. NamesV0 allows only 1.
	Engines int
	// MaxModelLen sets the bounds of the token-count histograms
	// (vllm:request_prompt_tokens, vllm:request_generation_tokens) the way vLLM's
	// build_1_2_5_buckets(max_model_len) does: 1, 2, 5, 10, ... up to it.
	MaxModelLen int
	// CreatedAt is the value of every _created series, in Unix seconds.
	CreatedAt time.Time
	// BlockSize and NumGPUBlocks (the engine's, the null block included), both
	// > 0, serve vllm:cache_config_info, one series of value 1 per engine, with
	// the labels of the real dumps in testdata/samples (V1: vLLM 0.10's; V0:
	// 0.6's), the emulator's block size and block count in block_size and
	// num_gpu_blocks and the dumps' values in the others, as
	// vllm/v1/metrics/loggers.py's log_metrics_info("cache_config", ...)
	// serves them. 0 serves no such series.
	BlockSize, NumGPUBlocks int
}

// Bucket bounds, copied from vLLM: V1 from vllm/v1/metrics/loggers.py (and
// identical in the 0.10 dump in testdata), V0 from vllm/engine/metrics.py (0.6).
var (
	bucketsTTFTV1 = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	bucketsITLV1 = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	bucketsRequestV1 = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
		30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	bucketsIteration = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}

	bucketsTTFTV0 = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	bucketsTPOTV0    = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
	bucketsRequestV0 = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0}
)

// build125Buckets is vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... <= max.
func build125Buckets(max int) []float64 {
	var b []float64
	for exp := 1; ; exp *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*exp > max {
				return b
			}
			b = append(b, float64(m*exp))
		}
	}
}

// histKind is what a histogram observes.
type histKind int

const (
	histTTFT histKind = iota
	histITL
	histTPOT
	histE2E
	histQueue
	histPrefill
	histDecode
	histInference
	histPromptTokens
	histGenerationTokens
	histIterationTokens
	numHistKinds
)

type gaugeFamily struct {
	desc  *prometheus.Desc
	value func(Snapshot) float64
}

type counterFamily struct {
	desc, created *prometheus.Desc
	value         func(Snapshot) float64
}

type histFamily struct {
	kind    histKind
	vec     *prometheus.HistogramVec
	created *prometheus.Desc
}

// Metrics is a prometheus.Collector that serves engines' state and latencies
// under vLLM's metric names (see [MetricNames]). Gauges and counters are read from
// the engines' snapshots at scrape time; histograms are fed by [Metrics.Observe].
// Register it on a registry the caller owns.
type Metrics struct {
	opts     MetricsOptions
	snapshot func(engine int) Snapshot
	labels   [][]string // per engine label values (model_name[, engine])
	gauges   []gaugeFamily
	counters []counterFamily
	success  counterFamily
	hists    []histFamily
	obs      [][numHistKinds]prometheus.Observer // per engine; nil where not served
	created  float64
	// cacheInfo is vllm:cache_config_info (nil: not served) and cacheLabels
	// its label values per engine.
	cacheInfo   *prometheus.Desc
	cacheLabels [][]string
}

var _ prometheus.Collector = (*Metrics)(nil)

// NewMetrics returns the metrics of opts.Engines engines; snapshot(i) must return
// engine i's current state and be safe to call from scrapes concurrently with the
// engines' work. It fails on an unknown dialect or engine count, or a V0 dialect
// with more than one engine.
func NewMetrics(opts MetricsOptions, snapshot func(engine int) Snapshot) (*Metrics, error) {
	opts, err := opts.complete()
	if err != nil {
		return nil, err
	}
	if snapshot == nil {
		return nil, errors.New("snapshot func is nil")
	}
	m := &Metrics{opts: opts, snapshot: snapshot, created: float64(opts.CreatedAt.UnixNano()) / 1e9}
	b := newFamilies(m)
	b.schedulerGauges()
	b.counters()
	b.histograms()
	b.cacheConfig()
	// Create every histogram series up front, as vLLM's make_per_engine does, so
	// that they are served (empty) before the first request.
	m.obs = make([][numHistKinds]prometheus.Observer, opts.Engines)
	for i := range m.obs {
		for _, h := range m.hists {
			m.obs[i][h.kind] = h.vec.WithLabelValues(m.labels[i]...)
		}
	}
	return m, nil
}

// complete fills the defaults of the options and validates them.
func (opts MetricsOptions) complete() (MetricsOptions, error) {
	if opts.Names == "" {
		opts.Names = NamesV1
	}
	if _, err := ParseMetricNames(string(opts.Names)); err != nil {
		return opts, err
	}
	if opts.Engines == 0 {
		opts.Engines = 1
	}
	if opts.Engines < 0 {
		return opts, fmt.Errorf("engines must be >= 1, got %d", opts.Engines)
	}
	if opts.Names == NamesV0 && opts.Engines != 1 {
		return opts, errors.New("the v0 metric names have no engine label: it allows one engine only")
	}
	if opts.MaxModelLen <= 0 {
		return opts, fmt.Errorf("max model len must be > 0, got %d", opts.MaxModelLen)
	}
	if opts.BlockSize < 0 || opts.NumGPUBlocks < 0 || (opts.BlockSize > 0) != (opts.NumGPUBlocks > 0) {
		return opts, fmt.Errorf("block size %d and GPU blocks %d: want both > 0 (vllm:cache_config_info served) or both 0", opts.BlockSize, opts.NumGPUBlocks)
	}
	return opts, nil
}

// families declares the metric families of one dialect on a Metrics: the label
// names and per-engine label values, and helpers for each family type.
type families struct {
	m          *Metrics
	v0         bool
	labelNames []string
}

func newFamilies(m *Metrics) *families {
	b := &families{m: m, v0: m.opts.Names == NamesV0, labelNames: []string{"model_name", "engine"}}
	if b.v0 {
		b.labelNames = b.labelNames[:1]
	}
	for i := 0; i < m.opts.Engines; i++ {
		lv := []string{m.opts.ModelName, strconv.Itoa(i)}
		m.labels = append(m.labels, lv[:len(b.labelNames)])
	}
	return b
}

func (b *families) desc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, append(slices.Clone(b.labelNames), extra...), nil)
}

// createdDesc is the _created family V1 exports beside each counter and histogram.
func (b *families) createdDesc(base, help string, extra ...string) *prometheus.Desc {
	if b.v0 {
		return nil
	}
	return b.desc(base+"_created", help, extra...)
}

func (b *families) gauge(name, help string, value func(Snapshot) float64) {
	b.m.gauges = append(b.m.gauges, gaugeFamily{desc: b.desc(name, help), value: value})
}

func (b *families) counter(base, help string, value func(Snapshot) float64) {
	b.m.counters = append(b.m.counters, counterFamily{desc: b.desc(base+"_total", help), created: b.createdDesc(base, help), value: value})
}

func (b *families) hist(kind histKind, name, help string, buckets []float64) {
	b.m.hists = append(b.m.hists, histFamily{
		kind:    kind,
		vec:     prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, b.labelNames),
		created: b.createdDesc(name, help),
	})
}

// schedulerGauges are the scheduler state: running, waiting, KV-cache usage
// under the dialect's name(s).
func (b *families) schedulerGauges() {
	runningHelp := "Number of requests in model execution batches."
	if b.v0 {
		runningHelp = "Number of requests currently running on GPU."
	}
	b.gauge("vllm:num_requests_running", runningHelp, func(s Snapshot) float64 { return float64(s.Running) })
	b.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
		func(s Snapshot) float64 { return float64(s.Waiting) })
	kv := func(s Snapshot) float64 { return s.KVCacheUsage }
	switch b.m.opts.Names {
	case NamesV0:
		b.gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU.", func(Snapshot) float64 { return 0 })
		b.gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", kv)
	case NamesV1RenameWindow:
		b.gauge("vllm:gpu_cache_usage_perc",
			"GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.", kv)
		b.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv)
	default:
		b.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv)
	}
}

// cacheConfig declares vllm:cache_config_info when the options give the KV
// cache's shape (see MetricsOptions.BlockSize).
func (b *families) cacheConfig() {
	o := b.m.opts
	if o.BlockSize <= 0 || o.NumGPUBlocks <= 0 {
		return
	}
	bs, nb := strconv.Itoa(o.BlockSize), strconv.Itoa(o.NumGPUBlocks)
	// Label names and values in order; "engine" is filled per engine.
	pairs := [][2]string{
		{"block_size", bs}, {"cache_dtype", "auto"}, {"calculate_kv_scales", "False"}, {"cpu_kvcache_space_bytes", "None"},
		{"cpu_offload_gb", "0.0"}, {"enable_prefix_caching", "False"}, {"engine", ""}, {"gpu_memory_utilization", "0.9"},
		{"is_attention_free", "False"}, {"kv_sharing_fast_prefill", "False"}, {"mamba_cache_dtype", "auto"},
		{"mamba_page_size_padded", "None"}, {"mamba_ssm_cache_dtype", "auto"}, {"num_cpu_blocks", "None"},
		{"num_gpu_blocks", nb}, {"num_gpu_blocks_override", "None"}, {"prefix_caching_hash_algo", "builtin"},
		{"sliding_window", "None"}, {"swap_space", "4.0"}, {"swap_space_bytes", "4294967296.0"},
	}
	if b.v0 {
		pairs = [][2]string{
			{"block_size", bs}, {"cache_dtype", "auto"}, {"cpu_offload_gb", "0"}, {"enable_prefix_caching", "False"},
			{"gpu_memory_utilization", "0.9"}, {"num_cpu_blocks", "0"}, {"num_gpu_blocks", nb},
			{"num_gpu_blocks_override", "None"}, {"sliding_window", "None"}, {"swap_space_bytes", "0.0"},
		}
	}
	names := make([]string, len(pairs))
	for i, p := range pairs {
		names[i] = p[0]
	}
	b.m.cacheInfo = prometheus.NewDesc("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", names, nil)
	for e := range o.Engines {
		vals := make([]string, len(pairs))
		for i, p := range pairs {
			vals[i] = p[1]
			if p[0] == "engine" {
				vals[i] = strconv.Itoa(e)
			}
		}
		b.m.cacheLabels = append(b.m.cacheLabels, vals)
	}
}

// counters are the cumulative counts: preemptions, tokens, finished requests.
func (b *families) counters() {
	b.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
		func(s Snapshot) float64 { return float64(s.Preemptions) })
	b.counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
		func(s Snapshot) float64 { return float64(s.PromptTokens) })
	b.counter("vllm:generation_tokens", "Number of generation tokens processed.",
		func(s Snapshot) float64 { return float64(s.GenerationTokens) })
	successHelp := "Count of successfully processed requests."
	b.m.success = counterFamily{
		desc:    b.desc("vllm:request_success_total", successHelp, "finished_reason"),
		created: b.createdDesc("vllm:request_success", successHelp, "finished_reason"),
	}
}

// histograms are the request and step histograms, with the dialect's buckets.
func (b *families) histograms() {
	tokenBuckets := build125Buckets(b.m.opts.MaxModelLen)
	b.hist(histPromptTokens, "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokenBuckets)
	b.hist(histGenerationTokens, "vllm:request_generation_tokens", "Number of generation tokens processed.", tokenBuckets)
	if b.v0 {
		b.hist(histTTFT, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", bucketsTTFTV0)
		b.hist(histTPOT, "vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", bucketsTPOTV0)
		b.hist(histE2E, "vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", bucketsRequestV0)
		b.hist(histQueue, "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", bucketsRequestV0)
		return
	}
	b.hist(histIterationTokens, "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", bucketsIteration)
	b.hist(histTTFT, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", bucketsTTFTV1)
	if b.m.opts.Names == NamesV1RenameWindow {
		b.hist(histTPOT, "vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", bucketsITLV1)
	}
	b.hist(histITL, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", bucketsITLV1)
	b.hist(histE2E, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", bucketsRequestV1)
	b.hist(histQueue, "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", bucketsRequestV1)
	b.hist(histInference, "vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", bucketsRequestV1)
	b.hist(histPrefill, "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", bucketsRequestV1)
	b.hist(histDecode, "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", bucketsRequestV1)
}

// Observe feeds the histograms of engine with one step's result.
func (m *Metrics) Observe(engine int, res *StepResult) {
	if engine < 0 || engine >= len(m.obs) {
		return
	}
	o := &m.obs[engine]
	observe := func(k histKind, v float64) {
		if o[k] != nil {
			o[k].Observe(v)
		}
	}
	if res.Scheduled > 0 {
		observe(histIterationTokens, float64(res.ScheduledTokens))
	}
	for _, t := range res.Tokens {
		if t.Index == 0 {
			observe(histTTFT, t.Latency.Seconds())
			continue
		}
		observe(histITL, t.Latency.Seconds())
		observe(histTPOT, t.Latency.Seconds())
	}
	for _, f := range res.Finished {
		if f.Reason == FinishAbort {
			continue
		}
		observe(histE2E, f.E2E.Seconds())
		observe(histQueue, f.Queue.Seconds())
		observe(histPrefill, f.Prefill.Seconds())
		observe(histDecode, f.Decode.Seconds())
		observe(histInference, f.Inference.Seconds())
		observe(histPromptTokens, float64(f.PromptTokens))
		observe(histGenerationTokens, float64(f.OutputTokens))
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, g := range m.gauges {
		ch <- g.desc
	}
	if m.cacheInfo != nil {
		ch <- m.cacheInfo
	}
	for _, c := range append(m.counters, m.success) {
		ch <- c.desc
		if c.created != nil {
			ch <- c.created
		}
	}
	for _, h := range m.hists {
		h.vec.Describe(ch)
		if h.created != nil {
			ch <- h.created
		}
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, lv := range m.cacheLabels {
		ch <- prometheus.MustNewConstMetric(m.cacheInfo, prometheus.GaugeValue, 1, lv...)
	}
	for i, lv := range m.labels {
		s := m.snapshot(i)
		for _, g := range m.gauges {
			ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, g.value(s), lv...)
		}
		for _, c := range m.counters {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, c.value(s), lv...)
			if c.created != nil {
				ch <- prometheus.MustNewConstMetric(c.created, prometheus.GaugeValue, m.created, lv...)
			}
		}
		for r, reason := range FinishReasons() {
			lvr := append(append([]string{}, lv...), string(reason))
			ch <- prometheus.MustNewConstMetric(m.success.desc, prometheus.CounterValue, float64(s.Finished[r]), lvr...)
			if m.success.created != nil {
				ch <- prometheus.MustNewConstMetric(m.success.created, prometheus.GaugeValue, m.created, lvr...)
			}
		}
		for _, h := range m.hists {
			if h.created != nil {
				ch <- prometheus.MustNewConstMetric(h.created, prometheus.GaugeValue, m.created, lv...)
			}
		}
	}
	for _, h := range m.hists {
		h.vec.Collect(ch)
	}
}
