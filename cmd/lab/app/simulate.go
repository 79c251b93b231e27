package app

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/saturation-adapter/saturation-adapter/cmd/internal/setpoints"
	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
	"github.com/saturation-adapter/saturation-adapter/lab/hpa"
	"github.com/saturation-adapter/saturation-adapter/lab/simulate"
	"github.com/saturation-adapter/saturation-adapter/lab/trace"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

// SimulateOptions are the flags of `lab simulate`.
type SimulateOptions struct {
	// Trace is the Azure-format trace CSV; Window shapes it.
	Trace  string
	Window simulate.WorkloadOptions
	// Profile is an engine profile file; the engine flags override its fields.
	Profile string
	Engine  emulator.Config
	// Config holds every other simulation setting.
	Config simulate.Config
	// Policies are the built-in policies to run; HPAFiles users' own HPAs, whose
	// metrics reach them on HPAPath.
	Policies []string
	HPAFiles []string
	HPAPath  string
	// SetPoints are the adapter's set-point flags, shared with its server and
	// explain; the keda-queue and kv policies aim at the same set points.
	// GPUUtilization is the gpu-util target.
	SetPoints      setpoints.Flags
	GPUUtilization int32
	// JSON and SVG are output files ("" for none).
	JSON, SVG string

	engineFlags *pflag.FlagSet
}

// NewSimulateOptions returns the defaults: the whole trace as recorded, the
// emulator's default engine, simulate.DefaultConfig, every built-in policy.
func NewSimulateOptions() *SimulateOptions {
	return &SimulateOptions{
		Window:         simulate.DefaultWorkloadOptions(),
		Engine:         emulator.DefaultConfig(),
		Config:         simulate.DefaultConfig(),
		Policies:       simulate.BuiltinAutoscalerNames(),
		HPAPath:        string(simulate.PathAdapter),
		SetPoints:      setpoints.New(),
		GPUUtilization: simulate.DefaultHPATargets().GPUUtilization,
	}
}

// AddFlags registers the options' flags on fs.
func (o *SimulateOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Trace, "trace", o.Trace, "Trace CSV in the Azure LLM inference trace format (TIMESTAMP,ContextTokens,GeneratedTokens). Required.")
	fs.DurationVar(&o.Window.Start, "start", o.Window.Start, "Replay the trace from this offset (trace time).")
	fs.DurationVar(&o.Window.Length, "length", o.Window.Length, "Replay this much of the trace (trace time); 0 for all of it.")
	fs.Float64Var(&o.Window.TimeScale, "time-scale", o.Window.TimeScale, "Multiply arrival times by this: 0.5 replays twice as fast in half the time.")
	fs.Float64Var(&o.Window.RateScale, "rate-scale", o.Window.RateScale, "Multiply the request rate, keeping the time shape: each row is replayed floor(x) times, plus once more with probability frac(x), copies up to 1 s apart.")

	ef := pflag.NewFlagSet("engine", pflag.ContinueOnError)
	ef.StringVar(&o.Profile, "profile", o.Profile, "Engine profile file (YAML or JSON: name, maxNumSeqs, maxNumBatchedTokens, blockSize, numGPUBlocks, maxModelLen, stepTime); the engine flags override its fields.")
	ef.IntVar(&o.Engine.MaxNumSeqs, "max-num-seqs", o.Engine.MaxNumSeqs, "Most requests running at once per engine.")
	ef.IntVar(&o.Engine.MaxNumBatchedTokens, "max-num-batched-tokens", o.Engine.MaxNumBatchedTokens, "Token budget of one engine step (chunked prefill).")
	ef.IntVar(&o.Engine.BlockSize, "block-size", o.Engine.BlockSize, "Tokens per KV-cache block.")
	ef.IntVar(&o.Engine.NumBlocks, "num-gpu-blocks", o.Engine.NumBlocks, "KV-cache blocks per engine (vLLM num_gpu_blocks, including its null block).")
	ef.IntVar(&o.Engine.MaxModelLen, "max-model-len", o.Engine.MaxModelLen, "Longest prompt + output in tokens.")
	ef.DurationVar(&o.Engine.StepTime.Base, "step-time-base", o.Engine.StepTime.Base, "Fixed time of one engine step.")
	ef.DurationVar(&o.Engine.StepTime.PerSeq, "step-time-per-seq", o.Engine.StepTime.PerSeq, "Added step time per scheduled request.")
	ef.DurationVar(&o.Engine.StepTime.PerPrefillToken, "step-time-per-prefill-token", o.Engine.StepTime.PerPrefillToken, "Added step time per prefill token.")
	fs.AddFlagSet(ef)
	o.engineFlags = ef

	c := &o.Config
	fs.DurationVar(&c.ColdStart, "cold-start", c.ColdStart, "Time from a pod's creation to Ready (model load); it costs GPU time.")
	fs.DurationVar(&c.TTFTSLO, "ttft-slo", c.TTFTSLO, "Time-to-first-token objective.")
	fs.DurationVar(&c.TPOTSLO, "tpot-slo", c.TPOTSLO, "Time per output token: a request's e2e objective is --ttft-slo + output tokens x this.")
	fs.Float64Var(&c.SLOTarget, "slo-target", c.SLOTarget, "Share of each interval's requests the oracle keeps within --ttft-slo, in (0, 1].")
	fs.DurationVar(&c.OracleInterval, "oracle-interval", c.OracleInterval, "Length of the oracle's constant-replica intervals.")
	fs.IntVar(&c.MinReplicas, "min-replicas", c.MinReplicas, "minReplicas of the built-in HPAs and the oracle's floor.")
	fs.IntVar(&c.MaxReplicas, "max-replicas", c.MaxReplicas, "maxReplicas of the built-in HPAs and the oracle's cap; 0 for twice the oracle's peak (cap 1024 for the oracle).")
	fs.DurationVar(&c.HPA.SyncPeriod, "hpa-sync-period", c.HPA.SyncPeriod, "kube-controller-manager's --horizontal-pod-autoscaler-sync-period.")
	fs.Float64Var(&c.HPA.Tolerance, "hpa-tolerance", c.HPA.Tolerance, "kube-controller-manager's --horizontal-pod-autoscaler-tolerance.")
	fs.DurationVar(&c.HPA.DownscaleStabilizationWindow, "hpa-downscale-stabilization", c.HPA.DownscaleStabilizationWindow, "kube-controller-manager's --horizontal-pod-autoscaler-downscale-stabilization.")
	fs.DurationVar(&c.ScrapeInterval, "scrape-interval", c.ScrapeInterval, "The adapter's scrape interval.")
	fs.DurationVar(&c.MaxSampleAge, "max-sample-age", c.MaxSampleAge, "Age beyond which the adapter's reading of a pod is stale.")
	fs.DurationVar(&c.PrometheusScrapeInterval, "prometheus-scrape-interval", c.PrometheusScrapeInterval, "Prometheus's scrape interval (engines and GPU utilization).")
	fs.DurationVar(&c.KEDAPollingInterval, "keda-polling-interval", c.KEDAPollingInterval, "KEDA's pollingInterval for the keda-queue policy.")
	fs.DurationVar(&c.SampleInterval, "sample-interval", c.SampleInterval, "Resolution of the time series in the JSON and the chart.")
	fs.DurationVar(&c.DrainLimit, "drain-limit", c.DrainLimit, "How long after the last arrival requests may still finish; later ones count as misses.")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "Seed of the clocks' phases and of --rate-scale's copies: the same seed gives the same output.")

	fs.StringSliceVar(&o.Policies, "policies", o.Policies, fmt.Sprintf("Built-in policies to compare with the oracle and the static fleet, from %v; empty for none.", simulate.BuiltinAutoscalerNames()))
	fs.StringArrayVar(&o.HPAFiles, "hpa", o.HPAFiles, "A HorizontalPodAutoscaler manifest (autoscaling/v2 YAML) to replay as one more policy named after it; repeatable.")
	fs.StringVar(&o.HPAPath, "hpa-metrics-path", o.HPAPath, "How --hpa manifests' External metrics are served: adapter (scraped every --scrape-interval), prometheus (Prometheus, queried at each sync) or keda (Prometheus, polled by KEDA).")
	o.SetPoints.AddFlags(fs) // the keda-queue and kv policies aim at the same set points
	fs.Int32Var(&o.GPUUtilization, "gpu-utilization-target", o.GPUUtilization, "averageUtilization (percent) of the gpu-util policy's HPA.")
	fs.StringVar(&o.JSON, "json", o.JSON, "Write the full report (settings, per-policy results and time series) as JSON to this file.")
	fs.StringVar(&o.SVG, "svg", o.SVG, "Write a chart of load, replicas and queue per policy as SVG to this file.")
}

// Validate reports every invalid flag at once, each with its value.
func (o *SimulateOptions) Validate() error {
	var errs []error
	if o.Trace == "" {
		errs = append(errs, errors.New("--trace is required"))
	}
	if err := o.Window.Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, o.SetPoints.Validate()...)
	if o.GPUUtilization < 1 {
		errs = append(errs, fmt.Errorf("--gpu-utilization-target=%d: must be at least 1 (percent)", o.GPUUtilization))
	}
	switch simulate.MetricsPath(o.HPAPath) {
	case simulate.PathAdapter, simulate.PathPrometheus, simulate.PathKEDA:
	default:
		errs = append(errs, fmt.Errorf("--hpa-metrics-path=%q: want adapter, prometheus or keda", o.HPAPath))
	}
	for _, p := range o.Policies {
		if !slices.Contains(simulate.BuiltinAutoscalerNames(), p) {
			errs = append(errs, fmt.Errorf("--policies: unknown policy %q, want some of %v", p, simulate.BuiltinAutoscalerNames()))
		}
	}
	return utilerrors.NewAggregate(errs)
}

// engine returns the engine configuration: the profile file, if any, overridden
// by the engine flags that were set.
func (o *SimulateOptions) engine() (emulator.Config, error) {
	if o.Profile == "" {
		return o.Engine, o.Engine.Validate()
	}
	cfg, err := simulate.LoadProfile(o.Profile)
	if err != nil {
		return emulator.Config{}, err
	}
	o.engineFlags.VisitAll(func(f *pflag.Flag) {
		if !f.Changed { // set on the shared *pflag.Flag when the command's flag set parses it
			return
		}
		switch f.Name {
		case "max-num-seqs":
			cfg.MaxNumSeqs = o.Engine.MaxNumSeqs
		case "max-num-batched-tokens":
			cfg.MaxNumBatchedTokens = o.Engine.MaxNumBatchedTokens
		case "block-size":
			cfg.BlockSize = o.Engine.BlockSize
		case "num-gpu-blocks":
			cfg.NumBlocks = o.Engine.NumBlocks
		case "max-model-len":
			cfg.MaxModelLen = o.Engine.MaxModelLen
		case "step-time-base":
			cfg.StepTime.Base = o.Engine.StepTime.Base
		case "step-time-per-seq":
			cfg.StepTime.PerSeq = o.Engine.StepTime.PerSeq
		case "step-time-per-prefill-token":
			cfg.StepTime.PerPrefillToken = o.Engine.StepTime.PerPrefillToken
		}
	})
	if err := cfg.Validate(); err != nil {
		return emulator.Config{}, fmt.Errorf("engine flags over %s: %w", o.Profile, err)
	}
	return cfg, nil
}

// Run loads the inputs, runs the simulation and writes the table to out and the
// JSON and SVG files; progress goes to progress.
func (o *SimulateOptions) Run(out, progress io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	cfg := o.Config
	engine, err := o.engine()
	if err != nil {
		return err
	}
	cfg.Engine = engine
	catalog, err := policy.BuiltinCatalog(o.SetPoints.SetPoints, o.SetPoints.UnknownSaturation)
	if err != nil {
		return err
	}
	cfg.NewSource = simulate.CatalogSource(catalog)
	tr, err := trace.ReadFile(o.Trace)
	if err != nil {
		return err
	}
	window := o.Window
	window.Seed = cfg.Seed
	w, err := simulate.NewWorkload(tr, window)
	if err != nil {
		return err
	}
	targets := simulate.HPATargets{QueueDepth: o.SetPoints.SetPoints.QueueDepth, KVCacheUsage: o.SetPoints.SetPoints.KVCacheUsage, GPUUtilization: o.GPUUtilization}
	policies, err := simulate.BuiltinAutoscalers(targets, int32(cfg.MinReplicas), o.Policies...)
	if err != nil {
		return err
	}
	if len(o.Policies) == 0 {
		policies = nil
	}
	for _, f := range o.HPAFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("reading --hpa: %w", err)
		}
		h, err := hpa.Parse(data)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		name := h.Name
		if name == "" {
			name = f
		}
		policies = append(policies, simulate.Autoscaler{Name: name, Description: "HPA from " + f, HPA: h, Path: simulate.MetricsPath(o.HPAPath)})
	}
	start := time.Now()
	cfg.OnPolicyDone = func(name string) {
		fmt.Fprintf(progress, "simulated %s (%.1fs)\n", name, time.Since(start).Seconds())
	}
	fmt.Fprintf(progress, "replaying %d requests over %v under the oracle, a static fleet and %d policies\n", len(w.Requests), w.Duration.Round(time.Second), len(policies))
	rep, err := simulate.Run(cfg, w, policies)
	if err != nil {
		return err
	}
	if err := rep.WriteTable(out); err != nil {
		return err
	}
	if err := writeFile(o.JSON, rep.WriteJSON); err != nil {
		return err
	}
	return writeFile(o.SVG, rep.WriteSVG)
}

// NewSimulateCommand returns `lab simulate`.
func NewSimulateCommand() *cobra.Command {
	o := NewSimulateOptions()
	cmd := &cobra.Command{
		Use:   "simulate --trace FILE [flags]",
		Short: "Replay a request trace against a simulated fleet under several autoscaling policies and compare them",
		Long: strings.TrimSpace(`
simulate replays a trace (the Azure LLM inference trace format) against a fleet of
emulated vLLM engines behind a least-outstanding-requests gateway, on a virtual clock,
under each autoscaling policy: an oracle that knows the future, a static fleet sized
for the oracle's peak, built-in HPAs (GPU utilization, a KEDA-style queue trigger,
KV-cache usage, the fused saturation score as llm_saturation and llm_demand_replicas)
and your own HPA manifests (--hpa). Each HPA is a model of the Kubernetes 1.37
controller fed through the metrics pipeline it would have (the adapter scraping every
2 s, or Prometheus and KEDA with their intervals). It prints one line per policy: the
share of requests within the TTFT SLO, TTFT quantiles, GPU-hours against the oracle,
scale events and how fast it reacted to load steps; --json and --svg write the details.
The same flags and --seed give the same output.`),
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.Run(cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

// writeFile writes a report to path with fn; an empty path writes nothing.
// Errors: the file cannot be created, fn fails ("writing PATH: …"), or closing
// it fails.
func writeFile(path string, fn func(io.Writer) error) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}
