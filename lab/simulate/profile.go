package simulate

import (
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
)

// Profile is an engine profile file: the shape of one engine (one vLLM
// EngineCore) in YAML or JSON, with the field names of vLLM's engine arguments.
// `lab simulate --profile` reads it; `lab calibrate --profile-out`
// writes it (lab/calibrate fits it to a live engine).
// Fields left out keep the emulator's defaults ([emulator.DefaultConfig]).
//
//	maxNumSeqs: 256
//	maxNumBatchedTokens: 8192
//	blockSize: 16
//	numGPUBlocks: 27000
//	maxModelLen: 32768
//	stepTime: {base: 6ms, perSeq: 25us, perPrefillToken: 35us, perContextToken: 40ns}
type Profile struct {
	// Name describes the profile (model, GPU, vLLM version); information only.
	Name string `json:"name,omitempty"`
	// MaxNumSeqs is --max-num-seqs.
	MaxNumSeqs int `json:"maxNumSeqs"`
	// MaxNumBatchedTokens is --max-num-batched-tokens.
	MaxNumBatchedTokens int `json:"maxNumBatchedTokens"`
	// BlockSize is --block-size.
	BlockSize int `json:"blockSize"`
	// NumGPUBlocks is num_gpu_blocks (vllm:cache_config_info), the null block included.
	NumGPUBlocks int `json:"numGPUBlocks"`
	// MaxModelLen is --max-model-len.
	MaxModelLen int `json:"maxModelLen"`
	// StepTime is the linear model of one step's duration (see emulator.StepTimeModel).
	StepTime StepTimeProfile `json:"stepTime"`
}

// StepTimeProfile is emulator.StepTimeModel with durations written as strings
// ("6ms", "60us").
type StepTimeProfile struct {
	Base            metav1.Duration `json:"base"`
	PerSeq          metav1.Duration `json:"perSeq"`
	PerPrefillToken metav1.Duration `json:"perPrefillToken"`
	PerContextToken metav1.Duration `json:"perContextToken"`
}

// ProfileOf returns the profile of an engine configuration.
func ProfileOf(c emulator.Config) Profile {
	return Profile{
		MaxNumSeqs: c.MaxNumSeqs, MaxNumBatchedTokens: c.MaxNumBatchedTokens, BlockSize: c.BlockSize,
		NumGPUBlocks: c.NumBlocks, MaxModelLen: c.MaxModelLen,
		StepTime: StepTimeProfile{
			Base: metav1.Duration{Duration: c.StepTime.Base}, PerSeq: metav1.Duration{Duration: c.StepTime.PerSeq},
			PerPrefillToken: metav1.Duration{Duration: c.StepTime.PerPrefillToken},
			PerContextToken: metav1.Duration{Duration: c.StepTime.PerContextToken},
		},
	}
}

// Config returns the engine configuration of p.
func (p Profile) Config() emulator.Config {
	return emulator.Config{
		MaxNumSeqs: p.MaxNumSeqs, MaxNumBatchedTokens: p.MaxNumBatchedTokens, BlockSize: p.BlockSize,
		NumBlocks: p.NumGPUBlocks, MaxModelLen: p.MaxModelLen,
		StepTime: emulator.StepTimeModel{Base: p.StepTime.Base.Duration, PerSeq: p.StepTime.PerSeq.Duration,
			PerPrefillToken: p.StepTime.PerPrefillToken.Duration, PerContextToken: p.StepTime.PerContextToken.Duration},
	}
}

// ParseProfile decodes a profile (YAML or JSON) over the emulator's defaults and
// returns its engine configuration. Unknown fields and configurations
// emulator.Config.Validate rejects are errors.
func ParseProfile(data []byte) (emulator.Config, error) {
	p := ProfileOf(emulator.DefaultConfig())
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return emulator.Config{}, fmt.Errorf("decoding engine profile: %w", err)
	}
	c := p.Config()
	if err := c.Validate(); err != nil {
		return emulator.Config{}, fmt.Errorf("engine profile: %w", err)
	}
	return c, nil
}

// LoadProfile reads the profile file at path; see ParseProfile.
func LoadProfile(path string) (emulator.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return emulator.Config{}, fmt.Errorf("reading engine profile: %w", err)
	}
	c, err := ParseProfile(data)
	if err != nil {
		return emulator.Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// MarshalProfile renders p as YAML, the form LoadProfile reads back.
func MarshalProfile(p Profile) ([]byte, error) { return yaml.Marshal(p) }
