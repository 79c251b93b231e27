// Package signals turns one LLM engine's Prometheus /metrics body (or the same
// series read from Prometheus) into canonical saturation signals: a Reading per
// pod. It knows nothing of Kubernetes: the input is bytes, the output is numbers
// with their provenance.
//
// # Signals
//
// For every supported engine dialect (see [Dialect]; the table is builtinDialects in dialect.go) the package extracts, per
// engine and then per pod (one /metrics body):
//
//   - queue depth: requests waiting for admission to the batch (vLLM
//     vllm:num_requests_waiting). Unit: requests.
//   - running: requests in the running batch (vllm:num_requests_running). Unit: requests.
//   - KV-cache usage: fraction of KV-cache blocks in use, 0..1 (vllm:kv_cache_usage_perc,
//     before vLLM 0.10 vllm:gpu_cache_usage_perc). Unit: ratio.
//   - preemptions: cumulative count of sequences preempted for lack of KV blocks
//     (vllm:num_preemptions_total). Unit: count, a counter.
//
// # Series identity
//
// A dialect names its engine labels (vLLM: "engine", the data-parallel rank;
// SGLang: "dp_rank" and the router's "worker_addr"; Triton: "model" and
// "version") and its model label (vLLM, SGLang, trtllm: "model_name").
// Series with the same metric name, the same engine label values and the same
// model are the same signal, whatever their other labels say (pid, tp_rank, a
// scrape job's relabelling): they collapse to their maximum, which is
// independent of order, never their sum and never the last one read. When such
// duplicates disagree a warning says so. The maximum is chosen because it errs
// towards "more saturated", the safe direction for an autoscaler. Distinct label
// values are never one engine, even where an ID must be cut or cleaned (see
// engineKey).
//
// Series that differ in the model label are different engines: when the
// series of one engine label value carry several models (two servers of one
// pod scraped together, a multi-model server), each model is an engine of its
// own, its ID the engine ID and the model joined by "/" ("0/big"), whatever
// the order of the lines. An engine label value with one model keeps its ID
// (see splitModels).
//
// # One body, one reading
//
// What is read from one target's body never changes how another's is read:
// the prefilter cuts bodies into the lines textparse reads (a quoted string may
// hold a raw newline), and the series cache, on only where it pays (with
// histograms), learns only what the parser proved (see seriesCache).
// FuzzExtractSequence holds sequences of bodies from several targets to a cold
// extraction and to textparse.
//
// Engines of one pod fold into the pod's value by this rule:
//
//   - queue depth and running add up: every engine's queue is work the pod has not
//     started, every engine's batch is work it is doing;
//   - KV-cache usage is the mean over engines: data-parallel engines of one pod are
//     started with the same cache configuration, so the mean is the fraction of the
//     pod's KV blocks in use. The busiest engine's usage is kept as KVCacheUsageMax;
//   - preemptions add up.
//
// # Validity
//
// Each series is checked before any arithmetic. NaN, +Inf and -Inf, negative
// values, ratios above 1 and request counts above MaxRequests are rejected for
// that series alone, counted by [Reason] and reported as warnings; the signal then
// drops out for that engine. A signal with no valid series in any engine is
// absent for the pod (Values.Value reports false), never 0.
//
// # What comes next
//
// pkg/history keeps a pod's readings over time (counter increases and latency
// observations per window, engine facts); pkg/policy turns them into per-pod
// saturation and pool values under the metric catalog.
package signals
