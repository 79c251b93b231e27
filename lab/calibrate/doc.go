// Package calibrate runs a stepped load test against one live inference engine
// (an OpenAI-compatible server such as vLLM) and turns what it observes into the
// adapter's set points and an engine profile for `lab simulate`.
// It is the core of `lab calibrate`.
//
// # The test
//
// The method is the one the production guides describe (for example AWS's EKS
// guide for vLLM, quoted in the project's domain notes: "warm up with 100
// requests, then 10 → 70 RPS in 60 s steps; the saturation point is where the
// queue leaves ~0"):
//
//  1. Warm-up: Config.Warmup requests sent one at a time. They warm the engine
//     (first-request compilation, CUDA graphs) and, alone on an idle engine,
//     measure the idle time to first token and inter-token latency that the
//     profile fit needs.
//  2. Context probe (Config.ContextProbe requests at once, 0 to skip it):
//     ProbeRounds rounds of a group with 128-token prompts, then one with
//     prompts of up to 8,000 tokens, 128 output tokens each. While all of a
//     group decode together the batch is the same, so the step time differs
//     between the groups by PerContextToken × the context they hold alone.
//     A long group whose requests did not decode together (preempted: the KV
//     cache is small for them) halves the next round's long prompt.
//  3. Steps: for each rate of Config.Rates, requests arrive at that rate for
//     Config.StepDuration (evenly spaced, or a Poisson process with
//     Config.Arrivals), back to back, each a streaming POST /v1/completions
//     whose time to first token (TTFT) and token timings are measured by the
//     client. Meanwhile the engine's /metrics is read every Config.MetricsInterval
//     with the adapter's own signal code (pkg/signals): queue depth, running
//     requests, KV-cache usage, preemptions.
//  4. A step passes when the mean queue depth over its second half is at most
//     Config.MaxQueue ("near 0"), the Config.TTFTQuantile (p95) of its requests'
//     TTFT is within Config.TTFTSLO, and no request failed. The test stops
//     Config.StepsPastSaturation steps after the first failing one, or at
//     Config.MaxRequests requests in all, whichever comes first.
//
// The saturation point is the highest rate of the passing steps below the first
// failing one. What the engine shows there (queue depth, KV-cache usage, running
// requests) is reported, with the measured capacity: the most requests per second
// the engine completed in any step.
//
// # Set points
//
// The adapter's per-pod saturation is max(queue / queue set point, KV usage / KV
// set point) and an HPA on llm_saturation (Value 1) keeps it near 1, acting only
// once it leaves its tolerance band (10 % by default). The recommendation aims
// each pod at Config.Headroom × the saturation rate; the default 0.9 ≈ 1 / 1.1
// lets the HPA scale up before a pod passes the saturation point:
//
//   - KV-cache usage set point: the KV usage measured at that rate, interpolated
//     linearly between the steps and the idle engine (KV usage rises with load
//     well before a queue forms, so this term is what holds the fleet at the
//     target rate), to 2 decimals (3 below 0.1);
//   - queue depth set point: measured, just above the queue the engine shows
//     below saturation (the 95th percentile of the passing steps' readings over
//     their second halves, rounded up, plus one; at least 1) and at most the
//     queue that would spend the TTFT budget left at the saturation point,
//     waiting behind it at the measured capacity. Below saturation the queue is
//     noise (requests that arrived during the engine's current step); above
//     it, it grows without bound. The set point sits above the noise, so that
//     noise alone does not reach it, and no higher than the bound, because a
//     new pod takes a cold start to arrive: a queue term that waits for a long
//     queue scales up after the SLO is lost;
//   - demandRate set point: the target rate itself, in requests per second per
//     replica.
//
// These are starting points: `lab simulate` with the fitted profile and
// the user's trace shows what they cost and keep, and what its neighbours do.
//
// # Profile
//
// The fit is for lab/emulator's step-time model (Base + PerSeq × scheduled
// requests + PerPrefillToken × prefill tokens + PerContextToken × context
// tokens held), from client timings, the engine's gauges and its step counter
// (vllm:iteration_tokens_total):
//
//   - alone on an idle engine, a decode step is Base + PerSeq +
//     PerContextToken × the context the request holds and the prefill step
//     adds PerPrefillToken × prompt tokens (TTFT less the idle decode step,
//     per prompt token, over the one-chunk prompts);
//   - PerContextToken is the context probe's (long group's step − short
//     group's step) / (long group's context − short group's context), the
//     median over its rounds; without the probe, the slope of a line over the
//     warm-up's inter-token latencies against their contexts, a fraction of a
//     millisecond over thousands of tokens that a busy host hides;
//   - under load a passing step's engine step time τ is Base + b × PerSeq + x ×
//     PerPrefillToken + C × PerContextToken, with b the mean running requests,
//     x the prefill tokens per engine step and C the context they hold; net of
//     the prefill and context costs, Base and PerSeq are a least-squares line
//     over the idle point and the steps;
//   - when that line would need a negative Base or PerSeq, the timings were
//     noisy: with the probe, Base and PerSeq are fitted at least 0 net of its
//     context cost; without it, the idle slope overstated the context cost,
//     and Base, PerSeq and PerContextToken are fitted together over the
//     warm-up and the steps, each at least 0, so that the profile serves what
//     the steps measured;
//   - maxNumSeqs is the most running requests seen while requests were waiting
//     (from the steps' readings: the probe's groups arrive at once),
//     when the batch sat at that count (a full batch); when the token budget or
//     the KV cache stopped admissions first it is only a lower bound, and the
//     emulator's default is written if larger; numGPUBlocks and blockSize come
//     from vllm:cache_config_info
//     when the engine exports it and are otherwise estimated from KV usage against
//     the tokens the running requests hold, maxModelLen from /v1/models.
//
// The profile is then checked: the same arrivals are replayed on lab/emulator's
// simulator with the fitted profile, judged by the same rules, and the report
// gives the saturation rate the profile predicts beside the measured one.
// ProfileCheck.Agrees holds when they are within SaturationTolerance (10 %);
// `lab calibrate --profile-out` writes only a profile that agrees.
//
// Traffic goes only to Config.URL and Config.MetricsURL. Point them at one pod
// (for example through kubectl port-forward): the test measures one engine.
package calibrate
