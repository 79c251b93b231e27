package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/saturation-adapter/saturation-adapter/cmd/internal/help"
	"github.com/saturation-adapter/saturation-adapter/lab/calibrate"
	"github.com/saturation-adapter/saturation-adapter/lab/trace"
)

// CalibrateOptions are the flags of `lab calibrate`.
type CalibrateOptions struct {
	// Config holds the run's settings; Rates come from RateList or from
	// StartRate, RateStep and Steps.
	Config calibrate.Config
	// RateList is --rates; StartRate, RateStep and Steps are the alternative.
	RateList            []float64
	StartRate, RateStep float64
	Steps               int
	// Arrivals is --arrivals.
	Arrivals string
	// PromptTokens and OutputTokens are the fixed request size; Trace, when set,
	// is a trace CSV whose rows' sizes are sampled instead.
	PromptTokens, OutputTokens int
	Trace                      string
	// JSON and ProfileOut are output files ("" for none).
	JSON, ProfileOut string

	fs *pflag.FlagSet
}

// NewCalibrateOptions returns the defaults: calibrate.DefaultConfig and rates
// 1, 2, ..., 10 requests per second.
func NewCalibrateOptions() *CalibrateOptions {
	c := calibrate.DefaultConfig()
	return &CalibrateOptions{
		Config: c, StartRate: 1, RateStep: 1, Steps: 10, Arrivals: string(c.Arrivals),
		PromptTokens: c.Shapes[0].PromptTokens, OutputTokens: c.Shapes[0].OutputTokens,
	}
}

// Flags returns the options' flags in named groups.
func (o *CalibrateOptions) Flags() cliflag.NamedFlagSets {
	c := &o.Config
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("engine under test")
	fs.StringVar(&c.URL, "url", c.URL, "Base URL of the engine's OpenAI-compatible API (http://host:port, without /v1), one pod: requests go to URL/v1/completions. Required; no traffic goes anywhere else.")
	fs.StringVar(&c.MetricsURL, "metrics-url", c.MetricsURL, "The engine's Prometheus metrics URL; default --url with /metrics.")
	fs.StringVar(&c.Model, "model", c.Model, "Model name to request; default the first model of GET --url/v1/models.")

	fs = fss.FlagSet("steps")
	fs.Float64SliceVar(&o.RateList, "rates", o.RateList, "Request rates of the steps in requests per second, increasing, e.g. 2,4,6,8; instead of --start-rate, --rate-step and --steps.")
	fs.Float64Var(&o.StartRate, "start-rate", o.StartRate, "Request rate of the first step, requests per second.")
	fs.Float64Var(&o.RateStep, "rate-step", o.RateStep, "Increase of the request rate from one step to the next, requests per second.")
	fs.IntVar(&o.Steps, "steps", o.Steps, "Number of steps, at most 1000.")
	fs.DurationVar(&c.StepDuration, "step-length", c.StepDuration, "How long each step sends requests.")
	fs.IntVar(&c.Warmup, "warmup-requests", c.Warmup, "Requests sent one at a time before the steps: they warm the engine up and measure it idle (with one request size, every other one has a 4 times longer prompt).")
	fs.IntVar(&c.ContextProbe, "context-probe", c.ContextProbe, "After the warm-up, requests sent at once in each group of the context probe (2 rounds of 128-token prompts, then prompts of up to 8,000 tokens, 128 output tokens each): the step time's difference between the two groups measures perContextToken; 0 skips it (the warm-up's lone requests then measure it, less precisely).")
	fs.StringVar(&o.Arrivals, "arrivals", o.Arrivals, "Spacing of a step's requests: uniform (a fixed rate, as stepped load tests do) or poisson (bursty, seeded).")
	fs.IntVar(&c.MaxRequests, "max-requests", c.MaxRequests, "Hard cap on the requests of the whole run, warm-up and context probe included.")
	fs.IntVar(&c.StepsPastSaturation, "steps-past-saturation", c.StepsPastSaturation, "Steps to run after the first failing one (they measure the full batch and the throughput).")

	fs = fss.FlagSet("requests")
	fs.IntVar(&o.PromptTokens, "prompt-tokens", o.PromptTokens, "Prompt length of every request in tokens (text of one short word per token behind a unique prefix).")
	fs.IntVar(&o.OutputTokens, "output-tokens", o.OutputTokens, "max_tokens of every request.")
	fs.StringVar(&o.Trace, "trace", o.Trace, "Trace CSV (Azure LLM inference trace format) whose rows' prompt and output lengths are sampled for the requests instead of --prompt-tokens and --output-tokens; its times are not used.")
	fs.BoolVar(&c.IgnoreEOS, "ignore-eos", c.IgnoreEOS, "Send vLLM's ignore_eos so that every request generates exactly its max_tokens.")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", c.RequestTimeout, "Longest time one request may take, from its send to its last token.")

	fs = fss.FlagSet("judging and set points")
	fs.DurationVar(&c.TTFTSLO, "ttft-slo", c.TTFTSLO, "Time-to-first-token objective: a step passes only if its TTFT quantile (--ttft-quantile) is within it.")
	fs.Float64Var(&c.TTFTQuantile, "ttft-quantile", c.TTFTQuantile, "Quantile of a step's TTFTs compared with --ttft-slo, in (0, 1].")
	fs.Float64Var(&c.MaxQueue, "max-queue", c.MaxQueue, "Mean waiting requests (over a step's second half) at or below which the queue counts as near 0.")
	fs.Float64Var(&c.Headroom, "headroom", c.Headroom, "The recommended set points aim each pod at this fraction of the saturation rate, in (0, 1].")

	fs = fss.FlagSet("metrics and progress")
	fs.DurationVar(&c.MetricsInterval, "metrics-interval", c.MetricsInterval, "Time between two reads of --metrics-url.")
	fs.DurationVar(&c.ProgressInterval, "progress-interval", c.ProgressInterval, "Time between two progress lines within a step; 0 for the step lines only.")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "Seed of the request sizes' draws (with --trace) and of --arrivals poisson.")

	fs = fss.FlagSet("output")
	fs.StringVar(&o.JSON, "json", o.JSON, "Write the full report (steps, saturation point, set points, profile and its check) as JSON to this file.")
	fs.StringVar(&o.ProfileOut, "profile-out", o.ProfileOut, "Write the fitted engine profile as YAML to this file, for lab simulate --profile, if replaying the steps on it reproduces the engine's saturation point within 10 %; otherwise write nothing there and fail.")
	return fss
}

// changed reports whether the flag name was set on the command line.
func (o *CalibrateOptions) changed(name string) bool {
	if o.fs == nil {
		return false
	}
	f := o.fs.Lookup(name)
	return f != nil && f.Changed
}

// Complete fills Config.Rates, Arrivals and Shapes from the flags; it reads
// --trace.
func (o *CalibrateOptions) Complete() error {
	var errs []error
	if len(o.RateList) > 0 {
		for _, n := range []string{"start-rate", "rate-step", "steps"} {
			if o.changed(n) {
				errs = append(errs, fmt.Errorf("--rates excludes --%s", n))
			}
		}
		o.Config.Rates = o.RateList
	} else {
		rates, err := calibrate.StepRates(o.StartRate, o.RateStep, o.Steps)
		if err != nil {
			errs = append(errs, fmt.Errorf("--start-rate=%g --rate-step=%g --steps=%d: %w", o.StartRate, o.RateStep, o.Steps, err))
		}
		o.Config.Rates = rates
	}
	o.Config.Arrivals = calibrate.Arrivals(o.Arrivals)
	if o.Trace != "" {
		for _, n := range []string{"prompt-tokens", "output-tokens"} {
			if o.changed(n) {
				errs = append(errs, fmt.Errorf("--trace excludes --%s", n))
			}
		}
		tr, err := trace.ReadFile(o.Trace)
		if err == nil {
			o.Config.Shapes, err = calibrate.ShapesFromTrace(tr, 0)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("--trace: %w", err))
		}
	} else {
		o.Config.Shapes = []calibrate.Shape{{PromptTokens: o.PromptTokens, OutputTokens: o.OutputTokens}}
	}
	return utilerrors.NewAggregate(errs)
}

// Validate reports every invalid flag at once.
func (o *CalibrateOptions) Validate() error {
	var errs []error
	c := o.Config
	if c.URL == "" {
		errs = append(errs, errors.New("--url is required: the engine to calibrate (one pod, e.g. through kubectl port-forward)"))
		c.URL = "http://unset" // so that the other fields are still checked
	}
	if err := c.Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, checkOutputs([]string{o.Trace}, output{"json", o.JSON}, output{"profile-out", o.ProfileOut})...)
	return utilerrors.NewAggregate(errs)
}

// Run completes and validates the options, calibrates, writes the table to out
// and the JSON and profile files; progress goes to progress. Errors: invalid
// flags; the run's (calibrate.Run); a profile the replay shows does not
// reproduce the engine (calibrate.ProfileCheck), which is not written (the
// table and the JSON report are).
func (o *CalibrateOptions) Run(ctx context.Context, out, progress io.Writer) error {
	if err := utilerrors.NewAggregate([]error{o.Complete(), o.Validate()}); err != nil {
		return utilerrors.Flatten(err)
	}
	cfg := o.Config
	start := time.Now()
	cfg.Progress = func(line string) {
		fmt.Fprintf(progress, "%6.1fs %s\n", time.Since(start).Seconds(), line)
	}
	rep, err := calibrate.Run(ctx, cfg)
	if err != nil {
		return err
	}
	return writeCalibration(out, rep, o.JSON, o.ProfileOut)
}

// writeCalibration writes the report's table to out, the JSON report to
// jsonPath and the profile to profilePath ("" for none) only if its replay
// reproduced the engine; otherwise it returns an error saying why the profile
// was not written.
func writeCalibration(out io.Writer, rep *calibrate.Report, jsonPath, profilePath string) error {
	if err := writeReport(out, rep, jsonPath, "", nil); err != nil {
		return err
	}
	if profilePath == "" {
		return nil
	}
	switch c := rep.ProfileCheck; {
	case c == nil:
		return fmt.Errorf("--profile-out=%s not written: the fitted profile could not be checked (no step was run, or its replay failed; see the notes)", profilePath)
	case !c.Agrees:
		return fmt.Errorf("--profile-out=%s not written: the fitted profile does not reproduce the engine: %s (--json keeps it, as \"profile\", with the steps it was fitted to)", profilePath, c.Disagreement)
	}
	return writeFile(profilePath, rep.WriteProfile)
}

// NewCalibrateCommand returns `lab calibrate`; it stops when ctx is done.
func NewCalibrateCommand(ctx context.Context) *cobra.Command {
	o := NewCalibrateOptions()
	cmd := &cobra.Command{
		Use:   "calibrate --url URL [flags]",
		Short: "Find an engine's saturation point with a stepped load test; recommend set points and fit an engine profile",
		Long: strings.TrimSpace(`
calibrate runs a stepped load test against one live inference engine (an
OpenAI-compatible server such as vLLM; point it at one pod): warm-up requests one at a
time, then rising request rates in fixed steps of streaming /v1/completions, while it
reads the engine's /metrics with the adapter's own signal code. It finds the
saturation point (the highest rate where the queue stays near 0 and the TTFT p95 stays
within the SLO), reports the queue depth and KV-cache usage there, recommends the
adapter's set points, and fits an engine profile for lab simulate --profile,
replaying the steps on it to check the fit. Requests go only to --url (and
--metrics-url); --max-requests caps them.`),
		Example: `  # The emulator's default engine on loopback, stepped with requests sized like the conversation trace
  lab emulator --port 8000 &
  lab calibrate --url http://127.0.0.1:8000 --trace data/azure-llm-trace-2023/AzureLLMInferenceTrace_conv.csv \
    --rates 8,10,12,14,16,18,20,22 --step-length 30s --json calibrate-conv.json --profile-out conv-profile.yaml

  # One pod of a cluster through a port-forward: fixed 1000 + 200 token requests, bursty arrivals
  kubectl port-forward pod/vllm-0 8000 &
  lab calibrate --url http://127.0.0.1:8000 --start-rate 2 --rate-step 2 --steps 12 --arrivals poisson --max-requests 5000`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.Run(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	help.Set(cmd, o.Flags())
	o.fs = cmd.Flags()
	return cmd
}
