// Package emulator models an LLM inference engine that schedules like vLLM V1
// under load, so that tests without GPUs see queue depth, KV-cache usage,
// preemptions and latencies rise and fall the way a real vLLM V1 server's do.
// It knows nothing of Kubernetes or HTTP; lab/emulator/server serves it over HTTP.
//
// # The model
//
// An [Engine] is one vLLM EngineCore (one data-parallel rank). It advances in
// steps; each [Engine.Step] is one scheduler iteration plus one forward pass, as in
// vllm/v1/core/sched/scheduler.py (Scheduler.schedule and update_from_output):
//
//  1. Running requests first, in admission order. Each is given the tokens it still
//     has to compute (1 for a request that is decoding; the rest of its prompt,
//     capped by the remaining token budget, for one that is prefilling: chunked
//     prefill), within a per-step budget of [Config.MaxNumBatchedTokens] tokens.
//     If its KV blocks cannot be allocated, the most recently admitted running
//     request is preempted (its blocks freed, its computed tokens dropped, put at
//     the front of the waiting queue, to be recomputed later) and counted, until
//     the allocation fits or the request itself is the one preempted.
//  2. Only if nothing was preempted in this step: waiting requests first come,
//     first served, while fewer than [Config.MaxNumSeqs] are running and budget is
//     left, each given min(its uncomputed tokens, remaining budget). The queue head
//     that cannot get its KV blocks blocks the queue (no skipping), as in vLLM.
//  3. The step takes [StepTimeModel.Duration] of the batch: a linear model in
//     the number of scheduled requests and of prefill tokens.
//  4. At the end of the step every scheduled request whose tokens are all computed
//     samples one output token. A request finishes after its output target
//     ("length" at max_tokens, "stop" at a simulated end-of-sequence) and frees its
//     blocks.
//
// KV cache: [Config.NumBlocks] blocks of [Config.BlockSize] tokens. A request
// holds ceil(computed tokens / block size) blocks. Like vLLM V1's BlockPool, one
// block is the reserved "null" block, so an idle engine reports a usage of
// 1/NumBlocks (the real dump in testdata shows 0.0011764705882353343 = 1/850), and
// usage = 1 - free/NumBlocks. Prefix caching is not modelled (an emulated request
// has no content to share).
//
// Admission needs free blocks for the tokens scheduled in that step (the prompt,
// or its first chunk for prompts longer than the budget), as vLLM V1's
// KVCacheManager.allocate_slots does; a prompt admitted by chunks may later preempt
// others to get the blocks of its next chunks, as in vLLM.
//
// # Defaults
//
// [DefaultConfig] is roughly Llama-3.1-8B-Instruct in bf16 on one H100 SXM 80 GB
// served by `vllm serve` with default arguments; see [DefaultConfig] for every
// number and where it comes from.
//
// # Time
//
// The engine never reads a clock: Step and Add take the current time and Step
// returns how long the step takes. [Simulator] drives engines on a virtual clock
// that jumps from step to step and from arrival to arrival (deterministic, as fast
// as the CPU allows); [Runner] drives one engine in real time on a
// k8s.io/utils/clock.Clock for the HTTP server.
//
// # Metrics
//
// [Metrics] is a prometheus.Collector exposing the engines in vLLM's exact
// metric names, types, labels, HELP texts and histogram buckets, for the vLLM V1
// names, the V0 names, or the 0.9.2–0.11 rename window where both KV names are
// served (see [MetricNames]).
package emulator
