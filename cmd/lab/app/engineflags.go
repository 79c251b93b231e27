package app

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
	"github.com/saturation-adapter/saturation-adapter/lab/simulate"
)

// engineFlagNames are the engine-shape flags, named after vLLM's engine
// arguments; emulator, simulate and scoreboard share them.
var engineFlagNames = []string{"max-num-seqs", "max-num-batched-tokens", "block-size", "num-gpu-blocks", "max-model-len",
	"step-time-base", "step-time-per-seq", "step-time-per-prefill-token", "step-time-per-context-token"}

// addEngineFlags adds the engine-shape flags of c to fs.
func addEngineFlags(fs *pflag.FlagSet, c *emulator.Config) {
	fs.IntVar(&c.MaxNumSeqs, "max-num-seqs", c.MaxNumSeqs, "Most requests running at once per engine.")
	fs.IntVar(&c.MaxNumBatchedTokens, "max-num-batched-tokens", c.MaxNumBatchedTokens, "Token budget of one engine step (chunked prefill).")
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "Tokens per KV-cache block.")
	fs.IntVar(&c.NumBlocks, "num-gpu-blocks", c.NumBlocks, "KV-cache blocks per engine (vLLM num_gpu_blocks, including its null block).")
	fs.IntVar(&c.MaxModelLen, "max-model-len", c.MaxModelLen, "Longest prompt + output in tokens.")
	fs.DurationVar(&c.StepTime.Base, "step-time-base", c.StepTime.Base, "Fixed time of one engine step.")
	fs.DurationVar(&c.StepTime.PerSeq, "step-time-per-seq", c.StepTime.PerSeq, "Added step time per scheduled request.")
	fs.DurationVar(&c.StepTime.PerPrefillToken, "step-time-per-prefill-token", c.StepTime.PerPrefillToken, "Added step time per prefill token.")
	fs.DurationVar(&c.StepTime.PerContextToken, "step-time-per-context-token", c.StepTime.PerContextToken, "Added step time per token of context the scheduled requests hold (the KV read of attention).")
}

// engineOverProfile returns the engine of the profile file (the emulator's
// defaults when path is empty) with the engine flags of fs that were set,
// taken from flags.
func engineOverProfile(path string, fs *pflag.FlagSet, flags emulator.Config) (emulator.Config, error) {
	if path == "" {
		return flags, flags.Validate()
	}
	cfg, err := simulate.LoadProfile(path)
	if err != nil {
		return emulator.Config{}, err
	}
	for _, name := range engineFlagNames {
		f := fs.Lookup(name)
		if f == nil || !f.Changed {
			continue
		}
		switch name {
		case "max-num-seqs":
			cfg.MaxNumSeqs = flags.MaxNumSeqs
		case "max-num-batched-tokens":
			cfg.MaxNumBatchedTokens = flags.MaxNumBatchedTokens
		case "block-size":
			cfg.BlockSize = flags.BlockSize
		case "num-gpu-blocks":
			cfg.NumBlocks = flags.NumBlocks
		case "max-model-len":
			cfg.MaxModelLen = flags.MaxModelLen
		case "step-time-base":
			cfg.StepTime.Base = flags.StepTime.Base
		case "step-time-per-seq":
			cfg.StepTime.PerSeq = flags.StepTime.PerSeq
		case "step-time-per-prefill-token":
			cfg.StepTime.PerPrefillToken = flags.StepTime.PerPrefillToken
		case "step-time-per-context-token":
			cfg.StepTime.PerContextToken = flags.StepTime.PerContextToken
		}
	}
	if err := cfg.Validate(); err != nil {
		return emulator.Config{}, fmt.Errorf("engine flags over %s: %w", path, err)
	}
	return cfg, nil
}
