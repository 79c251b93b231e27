package emulator

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Config is the shape of one engine (one vLLM EngineCore, one data-parallel rank).
// The field names follow vLLM's engine arguments.
type Config struct {
	// MaxNumSeqs is vLLM's --max-num-seqs: the most requests running at once.
	MaxNumSeqs int
	// MaxNumBatchedTokens is vLLM's --max-num-batched-tokens: the token budget of
	// one step, shared by prefill chunks and decodes.
	MaxNumBatchedTokens int
	// BlockSize is vLLM's --block-size: tokens per KV-cache block.
	BlockSize int
	// NumBlocks is the number of KV-cache blocks, vLLM's num_gpu_blocks (reported
	// in vllm:cache_config_info), including the reserved null block.
	NumBlocks int
	// MaxModelLen is vLLM's --max-model-len: the longest prompt + output, in
	// tokens. Requests longer than that are rejected.
	MaxModelLen int
	// StepTime gives the duration of one step.
	StepTime StepTimeModel
}

// StepTimeModel is a linear model of the duration of one engine step (one forward
// pass over the scheduled batch):
//
//	Base + PerSeq × scheduled requests + PerPrefillToken × prefill tokens
//	     + PerContextToken × context tokens
//
// Prefill tokens are all scheduled tokens of requests that are not decoding (new
// prompts, prompt chunks, and recomputation after a preemption). Context tokens
// are the tokens already in the KV cache of every scheduled request, which
// attention reads once per step: a decode step over long conversations costs
// more than one over short ones, as a memory-bound engine's does.
type StepTimeModel struct {
	// Base is the fixed cost of a step: reading the weights once, scheduling,
	// sampling, kernel launches.
	Base time.Duration
	// PerSeq is the added cost of each scheduled request (its share of the
	// matrix products, sampling).
	PerSeq time.Duration
	// PerPrefillToken is the added cost of each prefill token (compute-bound).
	PerPrefillToken time.Duration
	// PerContextToken is the added cost of each token of context a scheduled
	// request holds in the KV cache (its KV read in attention: memory-bound).
	PerContextToken time.Duration
}

// Duration returns the time of a step that schedules seqs requests, prefillTokens
// of whose tokens are prefill tokens, holding contextTokens tokens of context in
// the KV cache between them before the step. It is 0 for an empty step.
func (m StepTimeModel) Duration(seqs, prefillTokens, contextTokens int) time.Duration {
	if seqs == 0 {
		return 0
	}
	return m.Base + time.Duration(seqs)*m.PerSeq + time.Duration(prefillTokens)*m.PerPrefillToken +
		time.Duration(contextTokens)*m.PerContextToken
}

// DefaultConfig returns an engine roughly like Llama-3.1-8B-Instruct (bf16) on one
// H100 SXM 80 GB under `vllm serve` with default arguments:
//
//   - MaxNumSeqs 1024 and MaxNumBatchedTokens 8192: vLLM's defaults for the
//     OpenAI-compatible server on GPUs with >= 70 GiB that are not A100
//     (EngineArgs.get_batch_defaults in vllm/engine/arg_utils.py).
//   - BlockSize 16: vLLM's default --block-size on CUDA.
//   - NumBlocks 27000 (432,000 tokens): 80 GB × 0.9 (--gpu-memory-utilization
//     default) ≈ 72 GB, minus ≈ 16 GB of bf16 weights (8.03 B parameters × 2 bytes)
//     and ≈ 3 GB of activations and CUDA graphs, leaves ≈ 53 GB; Llama-3.1-8B keeps
//     2 (K, V) × 32 layers × 8 KV heads × 128 dims × 2 bytes = 128 KiB per token,
//     so ≈ 430 k tokens, ≈ 27 k blocks of 16.
//   - MaxModelLen 131072: Llama-3.1's context length (fits the KV cache above).
//   - StepTime.Base 6 ms: a decode step must stream the 16 GB of weights through
//     HBM3 at 3.35 TB/s (H100 SXM datasheet) = 4.8 ms, plus ≈ 1 ms of scheduling,
//     sampling and launch overhead. (A single stream of this model on an A100
//     40GB decodes at ≈ 77 % of that GPU's bandwidth ceiling, johnmusgrave.com's
//     vLLM 0.23.0 sweep; 77 % of the H100's gives 6.2 ms per token, Base + PerSeq
//     within 3 %.)
//   - StepTime.PerContextToken 40 ns: attention reads each scheduled request's
//     KV cache once per step, 128 KiB per token at 3.35 TB/s ≈ 39 ns.
//   - StepTime.PerSeq 25 µs: a request's share of the matrix products (16 GFLOP
//     per token at ≈ 600 TFLOP/s ≈ 27 µs, partly overlapped with the weight
//     reads) and of sampling. With ≈ 1 k tokens of context per request, this
//     puts inter-token latency at ≈ 10 ms for 64 concurrent requests and ≈ 23 ms
//     for 256.
//   - StepTime.PerPrefillToken 35 µs: prefill is compute-bound; 2 × 8.03 B FLOP
//     per token at ≈ 50 % of the H100's 989 dense bf16 TFLOP/s ≈ 33 µs, rounded
//     up for attention. A 1,000-token prompt alone thus has a TTFT of ≈ 41 ms.
//
// These are estimates from public datasheets and vLLM's source, not fitted to
// a measurement. Checked afterwards against vLLM v0.19.1 serving Llama-3.1-8B
// (BF16 KV cache) on one H100 (vllm-project/vllm-project.github.io @ 78672b0,
// _posts/2026-04-22-fp8-kvcache.md): the inter-token latency of a lone request
// is 6-8 % below the post's fit from 256 to 125k input tokens, and at 8
// concurrent 20k-token requests the TTFT is 1-4 % and the ITL 15 % below its
// medians (published_test.go; docs/scoreboard.md). Every field can be
// overridden, and lab calibrate fits them to a real engine.
func DefaultConfig() Config {
	return Config{
		MaxNumSeqs:          1024,
		MaxNumBatchedTokens: 8192,
		BlockSize:           16,
		NumBlocks:           27000,
		MaxModelLen:         131072,
		StepTime: StepTimeModel{
			Base:            6 * time.Millisecond,
			PerSeq:          25 * time.Microsecond,
			PerPrefillToken: 35 * time.Microsecond,
			PerContextToken: 40 * time.Nanosecond,
		},
	}
}

// Bounds of an engine's shape, far above any GPU's (the default engine holds
// 432,000 tokens of KV cache in 27,000 blocks) and low enough that no token
// count or step time computed from them overflows.
const (
	MaxSeqs      = 1 << 20       // MaxNumSeqs
	MaxTokens    = math.MaxInt32 // MaxNumBatchedTokens and MaxModelLen
	MaxBlocks    = 1 << 26       // NumBlocks
	MaxBlockSize = 1 << 10       // BlockSize, tokens
	// MaxStepBase and MaxStepPerSeq bound Base and PerSeq; MaxPerPrefillToken
	// and MaxPerContextToken the per-token costs.
	MaxStepBase        = time.Minute
	MaxStepPerSeq      = time.Minute
	MaxPerPrefillToken = time.Second
	MaxPerContextToken = time.Millisecond
)

// Validate reports every invalid field of c at once. Besides positivity and the
// bounds above it requires, like vLLM at start-up, that a request of
// MaxModelLen tokens fits in the KV cache (NumBlocks - 1 usable blocks), and a
// positive step time so that a simulation always advances.
func (c Config) Validate() error {
	var errs []error
	within := func(name string, v, hi int) {
		if v <= 0 || v > hi {
			errs = append(errs, fmt.Errorf("%s must be in [1, %d], got %d", name, hi, v))
		}
	}
	within("max-num-seqs", c.MaxNumSeqs, MaxSeqs)
	within("max-num-batched-tokens", c.MaxNumBatchedTokens, MaxTokens)
	within("block-size", c.BlockSize, MaxBlockSize)
	within("max-model-len", c.MaxModelLen, MaxTokens)
	switch {
	case c.NumBlocks < 2:
		errs = append(errs, fmt.Errorf("num-gpu-blocks must be >= 2 (one is the reserved null block), got %d", c.NumBlocks))
	case c.NumBlocks > MaxBlocks:
		errs = append(errs, fmt.Errorf("num-gpu-blocks must be at most %d, got %d", MaxBlocks, c.NumBlocks))
	case c.BlockSize > 0 && c.BlockSize <= MaxBlockSize && int64(c.MaxModelLen) > int64(c.NumBlocks-1)*int64(c.BlockSize):
		errs = append(errs, fmt.Errorf("max-model-len %d is larger than the KV cache holds (%d usable blocks of %d tokens = %d tokens)",
			c.MaxModelLen, c.NumBlocks-1, c.BlockSize, int64(c.NumBlocks-1)*int64(c.BlockSize)))
	}
	st := c.StepTime
	switch {
	case st.Base < 0 || st.PerSeq < 0 || st.PerPrefillToken < 0 || st.PerContextToken < 0:
		errs = append(errs, fmt.Errorf("step time coefficients must be >= 0, got %+v", st))
	case st.Base > MaxStepBase || st.PerSeq > MaxStepPerSeq || st.PerPrefillToken > MaxPerPrefillToken || st.PerContextToken > MaxPerContextToken:
		errs = append(errs, fmt.Errorf("step time coefficients must be at most base %v, perSeq %v, perPrefillToken %v, perContextToken %v; got base %v, perSeq %v, perPrefillToken %v, perContextToken %v",
			MaxStepBase, MaxStepPerSeq, MaxPerPrefillToken, MaxPerContextToken, st.Base, st.PerSeq, st.PerPrefillToken, st.PerContextToken))
	case st.Duration(1, 0, 0) <= 0:
		errs = append(errs, errors.New("step time of a one-request decode step must be > 0"))
	}
	return errors.Join(errs...)
}
