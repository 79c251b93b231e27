package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/saturation-adapter/saturation-adapter/cmd/internal/help"
	"github.com/saturation-adapter/saturation-adapter/cmd/internal/setpoints"
	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
	"github.com/saturation-adapter/saturation-adapter/lab/hpa"
	"github.com/saturation-adapter/saturation-adapter/lab/simulate"
	"github.com/saturation-adapter/saturation-adapter/lab/trace"
	"github.com/saturation-adapter/saturation-adapter/pkg/config"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

// FleetOptions are the flags `lab simulate` and `lab scoreboard` share: the
// trace, the engine, the fleet, the objective and the oracle, the HPA
// controller, the metrics pipelines and the adapter's scoring.
type FleetOptions struct {
	// Trace is the Azure-format trace CSV; Window shapes it.
	Trace  string
	Window simulate.WorkloadOptions
	// Profile is an engine profile file; the engine flags override its fields.
	Profile string
	Engine  emulator.Config
	// Config holds every other simulation setting.
	Config simulate.Config
	// SetPoints are the adapter's set-point flags, shared with its server and
	// explain; the keda-queue and kv autoscalers aim at the same set points.
	SetPoints setpoints.Flags
	// GPUUtilization is the gpu-util target, percent (not a set point).
	GPUUtilization int32
	// PolicyFile is the adapter's policy configuration (--config): its
	// metrics are served by the simulated adapter too.
	PolicyFile string

	engineFlags *pflag.FlagSet
}

// NewFleetOptions returns the defaults: the whole trace as recorded, the
// emulator's default engine, simulate.DefaultConfig, the adapter's set points.
func NewFleetOptions() FleetOptions {
	return FleetOptions{
		Window:         simulate.DefaultWorkloadOptions(),
		Engine:         emulator.DefaultConfig(),
		Config:         simulate.DefaultConfig(),
		SetPoints:      setpoints.New(),
		GPUUtilization: simulate.DefaultTargets().GPUUtilizationPercent,
	}
}

// addFlags adds the shared groups to fss: trace, engine, fleet, objective,
// scoring, HPA controller and metrics pipelines. The trace-window and scoring
// flags are added when window is set (scoreboard has its own slices and
// families).
func (o *FleetOptions) addFlags(fss *cliflag.NamedFlagSets, window bool) {
	fs := fss.FlagSet("trace")
	fs.StringVar(&o.Trace, "trace", o.Trace, "Trace CSV in the Azure LLM inference trace format (TIMESTAMP,ContextTokens,GeneratedTokens). Required.")
	if window {
		fs.DurationVar(&o.Window.Start, "start", o.Window.Start, "Replay the trace from this offset (trace time).")
		fs.DurationVar(&o.Window.Length, "length", o.Window.Length, "Replay this much of the trace (trace time); 0 for all of it.")
	}
	what := "each slice"
	if window {
		what = "the window"
	}
	fs.DurationVar(&o.Window.WarmUp, "warm-up", o.Window.WarmUp, "Replay this much of the trace before "+what+" first (at most what precedes it; trace time), unscored: every fleet enters "+what+" as its own autoscaler left it, not at the oracle's opening size. 0 starts cold.")
	fs.Float64Var(&o.Window.TimeScale, "time-scale", o.Window.TimeScale, "Multiply arrival times by this: 0.5 replays twice as fast in half the time.")
	fs.Float64Var(&o.Window.RateScale, "rate-scale", o.Window.RateScale, "Multiply the request rate, keeping the time shape: each row is replayed floor(x) times, plus once more with probability frac(x), copies up to 1 s apart.")

	fs = fss.FlagSet("engine")
	fs.StringVar(&o.Profile, "profile", o.Profile, "Engine profile file (YAML or JSON: name, maxNumSeqs, maxNumBatchedTokens, blockSize, numGPUBlocks, maxModelLen, stepTime); the engine flags override its fields.")
	addEngineFlags(fs, &o.Engine)
	o.engineFlags = fs

	c := &o.Config
	fs = fss.FlagSet("fleet")
	fs.DurationVar(&c.ColdStart, "cold-start", c.ColdStart, "Mean time from a pod's creation to Ready (image pull, model load, graph capture, readiness probe); it costs GPU time.")
	fs.Float64Var(&c.ColdStartSpread, "cold-start-spread", c.ColdStartSpread, "Relative spread of each pod's engine start: uniform in [1 - x, 1 + x] times its mean, in [0, 1).")
	fs.DurationVar(&c.ReadinessProbePeriod, "readiness-probe-period", c.ReadinessProbePeriod, "periodSeconds of the pods' readiness probe: a pod is Ready at the first probe after its engine is up.")
	fs.DurationVar(&c.NodeProvisioning, "node-provisioning", c.NodeProvisioning, "Added to the cold start of a pod that needs a new GPU node (more pods than --warm-nodes); 0 for none.")
	fs.IntVar(&c.WarmNodes, "warm-nodes", c.WarmNodes, "GPU nodes ready before any scaling, one pod each (with --node-provisioning).")
	fs.DurationVar(&c.AbandonAfter, "abandon-after", c.AbandonAfter, "Clients give up on a request without a first token after this long, at least --ttft-slo (it is aborted and counts as a miss); 0 waits forever.")
	fs.IntVar(&c.MinReplicas, "min-replicas", c.MinReplicas, "minReplicas of the built-in HPAs and the oracle's floor.")
	fs.IntVar(&c.MaxReplicas, "max-replicas", c.MaxReplicas, "maxReplicas of the built-in HPAs and the oracle's cap; 0 for twice the oracle's peak (cap 1024 for the oracle).")

	fs = fss.FlagSet("objective and oracle")
	fs.DurationVar(&c.TTFTSLO, "ttft-slo", c.TTFTSLO, "Time-to-first-token objective.")
	fs.DurationVar(&c.TPOTSLO, "tpot-slo", c.TPOTSLO, "Time per output token: a request's e2e objective is --ttft-slo + output tokens x this.")
	fs.Float64Var(&c.SLOTarget, "slo-target", c.SLOTarget, "Share of each interval's achievable requests the oracle keeps within --ttft-slo, in (0, 1].")
	fs.DurationVar(&c.OracleInterval, "oracle-interval", c.OracleInterval, "Length of the oracle's constant-replica intervals.")

	if window {
		fs = fss.FlagSet("scoring (the simulated adapter)")
		o.SetPoints.AddFlags(fs) // the keda-queue and kv autoscalers aim at the same set points
		fs.StringVar(&o.PolicyFile, "config", o.PolicyFile, "The adapter's policy configuration file (as for the server): its metrics are served by the simulated adapter beside the built-in ones, for --hpa manifests.")
		fs.Int32Var(&o.GPUUtilization, "gpu-utilization-target", o.GPUUtilization, "averageUtilization (percent) of the gpu-util autoscaler's HPA.")
	}

	fs = fss.FlagSet("HPA controller")
	fs.DurationVar(&c.HPA.SyncPeriod, "hpa-sync-period", c.HPA.SyncPeriod, "kube-controller-manager's --horizontal-pod-autoscaler-sync-period.")
	fs.Float64Var(&c.HPA.Tolerance, "hpa-tolerance", c.HPA.Tolerance, "kube-controller-manager's --horizontal-pod-autoscaler-tolerance.")
	fs.DurationVar(&c.HPA.DownscaleStabilizationWindow, "hpa-downscale-stabilization", c.HPA.DownscaleStabilizationWindow, "kube-controller-manager's --horizontal-pod-autoscaler-downscale-stabilization.")

	fs = fss.FlagSet("metrics pipelines")
	fs.DurationVar(&c.ScrapeInterval, "scrape-interval", c.ScrapeInterval, "The adapter's scrape interval.")
	fs.DurationVar(&c.MaxSampleAge, "max-sample-age", c.MaxSampleAge, "Age beyond which the adapter's reading of a pod is stale.")
	fs.DurationVar(&c.PrometheusScrapeInterval, "prometheus-scrape-interval", c.PrometheusScrapeInterval, "Prometheus's scrape interval (engines and GPU utilization).")
	fs.DurationVar(&c.KEDAPollingInterval, "keda-polling-interval", c.KEDAPollingInterval, "KEDA's pollingInterval for the keda-queue-cached autoscaler.")
}

// validate returns one error per bad flag.
func (o *FleetOptions) validate() []error {
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
	return errs
}

// load reads the engine profile, the policy file and the trace: the
// simulation's configuration (its adapter serving the built-in catalog and
// the file's policies), the catalog and the trace.
func (o *FleetOptions) load() (simulate.Config, *policy.Catalog, trace.Trace, error) {
	cfg := o.Config
	engine, err := engineOverProfile(o.Profile, o.engineFlags, o.Engine)
	if err != nil {
		return cfg, nil, trace.Trace{}, err
	}
	cfg.Engine = engine
	var file *config.File
	if o.PolicyFile != "" {
		data, err := os.ReadFile(o.PolicyFile)
		if err != nil {
			return cfg, nil, trace.Trace{}, fmt.Errorf("--config: %w", err)
		}
		if file, err = config.Parse(data); err != nil {
			return cfg, nil, trace.Trace{}, fmt.Errorf("--config %s: %w", o.PolicyFile, err)
		}
	}
	catalog, err := file.Catalog(policy.BuiltinPolicies(o.SetPoints.SetPoints, o.SetPoints.UnknownSaturation, policy.DefaultHoldLastGood))
	if err != nil {
		return cfg, nil, trace.Trace{}, err
	}
	cfg.NewSource = simulate.CatalogSource(catalog)
	tr, err := trace.ReadFile(o.Trace)
	if err != nil {
		return cfg, nil, trace.Trace{}, err
	}
	return cfg, catalog, tr, nil
}

// targets returns the built-in autoscalers' targets of the flags.
func (o *FleetOptions) targets() simulate.Targets {
	return simulate.Targets{SetPoints: o.SetPoints.SetPoints, GPUUtilizationPercent: o.GPUUtilization}
}

// SimulateOptions are the flags of `lab simulate`.
type SimulateOptions struct {
	FleetOptions
	// Autoscalers are the built-in autoscalers to run; HPAFiles users' own
	// HPAs, whose metrics reach them on HPAPath.
	Autoscalers []string
	HPAFiles    []string
	HPAPath     string
	// JSON and SVG are output files ("" for none).
	JSON, SVG string
}

// NewSimulateOptions returns the defaults: NewFleetOptions and every built-in
// autoscaler.
func NewSimulateOptions() *SimulateOptions {
	return &SimulateOptions{FleetOptions: NewFleetOptions(), Autoscalers: simulate.BuiltinAutoscalerNames(), HPAPath: string(simulate.PathAdapter)}
}

// Flags returns the options' flags in named groups.
func (o *SimulateOptions) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	o.addFlags(&fss, true)
	fs := fss.FlagSet("autoscalers")
	fs.StringSliceVar(&o.Autoscalers, "autoscalers", o.Autoscalers, fmt.Sprintf("Built-in autoscalers to compare with the oracle and the static fleet, from %v; empty for none.", simulate.BuiltinAutoscalerNames()))
	fs.StringSliceVar(&o.Autoscalers, "policies", o.Autoscalers, "Same as --autoscalers.")
	_ = fs.MarkDeprecated("policies", "use --autoscalers (a policy is a metric of the adapter's catalog); --policies goes in the next release")
	fs.StringArrayVar(&o.HPAFiles, "hpa", o.HPAFiles, "A HorizontalPodAutoscaler manifest (autoscaling/v2 YAML) to replay as one more autoscaler named after it; repeatable.")
	fs.StringVar(&o.HPAPath, "hpa-metrics-path", o.HPAPath, "How --hpa manifests' External metrics are served: adapter (scraped every --scrape-interval), prometheus (Prometheus, queried at each sync) or keda (Prometheus, polled by KEDA, cached).")

	c := &o.Config
	fs = fss.FlagSet("output")
	fs.StringVar(&o.JSON, "json", o.JSON, "Write the full report (settings, per-autoscaler results and time series) as JSON to this file.")
	fs.StringVar(&o.SVG, "svg", o.SVG, "Write a chart of load, replicas and queue per autoscaler as SVG to this file.")
	fs.DurationVar(&c.SampleInterval, "sample-interval", c.SampleInterval, "Resolution of the time series in the JSON and the chart.")
	fs.DurationVar(&c.DrainLimit, "drain-limit", c.DrainLimit, "How long after the last arrival requests may still finish; later ones count as misses.")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "Seed of the clocks' phases, the cold starts and --rate-scale's copies: the same seed gives the same output.")
	return fss
}

// Validate reports every invalid flag at once, each with its value.
func (o *SimulateOptions) Validate() error {
	errs := o.validate()
	switch simulate.MetricsPath(o.HPAPath) {
	case simulate.PathAdapter, simulate.PathPrometheus, simulate.PathKEDA:
	default:
		errs = append(errs, fmt.Errorf("--hpa-metrics-path=%q: want adapter, prometheus or keda", o.HPAPath))
	}
	for _, p := range o.Autoscalers {
		if !slices.Contains(simulate.BuiltinAutoscalerNames(), p) {
			errs = append(errs, fmt.Errorf("--autoscalers: unknown autoscaler %q, want some of %v", p, simulate.BuiltinAutoscalerNames()))
		}
	}
	errs = append(errs, checkOutputs(append(o.inputs(), o.HPAFiles...), output{"json", o.JSON}, output{"svg", o.SVG})...)
	return utilerrors.NewAggregate(errs)
}

// inputs are the files the fleet flags read.
func (o *FleetOptions) inputs() []string { return []string{o.Trace, o.Profile, o.PolicyFile} }

// output is an output flag and its path ("" for none).
type output struct{ flag, path string }

// checkOutputs refuses, before anything runs, an output file that is one of
// the inputs (--json naming the trace once overwrote it) or another output,
// a directory, and one whose directory does not exist (the last two would
// fail only after the whole run).
func checkOutputs(inputs []string, outs ...output) []error {
	var errs []error
	same := func(a, b string) bool {
		if filepath.Clean(a) == filepath.Clean(b) {
			return true
		}
		fa, errA := os.Stat(a)
		fb, errB := os.Stat(b)
		return errA == nil && errB == nil && os.SameFile(fa, fb)
	}
	for i, o := range outs {
		if o.path == "" {
			continue
		}
		for _, in := range inputs {
			if in != "" && same(o.path, in) {
				errs = append(errs, fmt.Errorf("--%s=%s: is an input of this run; it would be overwritten", o.flag, o.path))
			}
		}
		for _, prev := range outs[:i] {
			if prev.path != "" && same(o.path, prev.path) {
				errs = append(errs, fmt.Errorf("--%s=%s: --%s writes the same file", o.flag, o.path, prev.flag))
			}
		}
		if st, err := os.Stat(filepath.Dir(o.path)); err != nil || !st.IsDir() {
			errs = append(errs, fmt.Errorf("--%s=%s: its directory does not exist", o.flag, o.path))
		}
		if st, err := os.Stat(o.path); err == nil && st.IsDir() {
			errs = append(errs, fmt.Errorf("--%s=%s: is a directory", o.flag, o.path))
		}
	}
	return errs
}

// Run loads the inputs, runs the simulation and writes the table to out and the
// JSON and SVG files; progress goes to progress.
func (o *SimulateOptions) Run(out, progress io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	cfg, _, tr, err := o.load()
	if err != nil {
		return err
	}
	window := o.Window
	window.Seed = cfg.Seed
	w, err := simulate.NewWorkload(tr, window)
	if err != nil {
		return err
	}
	autoscalers, err := simulate.BuiltinAutoscalers(o.targets(), int32(cfg.MinReplicas), o.Autoscalers...)
	if err != nil {
		return err
	}
	if len(o.Autoscalers) == 0 {
		autoscalers = nil
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
		autoscalers = append(autoscalers, simulate.Autoscaler{Name: name, Description: "HPA from " + f, HPA: h, Path: simulate.MetricsPath(o.HPAPath)})
	}
	start := time.Now()
	cfg.OnAutoscalerDone = func(name string) {
		fmt.Fprintf(progress, "simulated %s (%.1fs)\n", name, time.Since(start).Seconds())
	}
	fmt.Fprintf(progress, "replaying %d requests over %v under the oracle, a static fleet and %d autoscalers\n", len(w.Requests), w.Duration.Round(time.Second), len(autoscalers))
	rep, err := simulate.Run(cfg, w, autoscalers)
	if err != nil {
		return err
	}
	return writeReport(out, rep, o.JSON, o.SVG, rep.WriteSVG)
}

// NewSimulateCommand returns `lab simulate`.
func NewSimulateCommand(ctx context.Context) *cobra.Command {
	o := NewSimulateOptions()
	cmd := &cobra.Command{
		Use:   "simulate --trace FILE [flags]",
		Short: "Replay a request trace against a simulated fleet under several autoscalers and compare them",
		Long: strings.TrimSpace(`
simulate replays a trace (the Azure LLM inference trace format) against a fleet of
emulated vLLM engines behind a least-outstanding-requests gateway, on a virtual clock,
under each autoscaler: an oracle that knows the future, a static fleet sized for the
oracle's peak, built-in HPAs (GPU utilization, KEDA's prometheus trigger on the queue
without and with its cache, KV-cache usage, the fused saturation score as llm_saturation
and llm_demand_replicas) and your own HPA manifests (--hpa), whose metrics may be the
policies of a configuration file (--config). Each HPA is a model of the Kubernetes 1.37
controller fed through the metrics pipeline it would have (the adapter scraping every
2 s, or Prometheus and KEDA with their intervals). Pods start in a drawn cold start;
clients give up after --abandon-after. It prints one line per autoscaler: the share of
requests within the TTFT SLO, TTFT quantiles, GPU-hours against the oracle, scale events
and how fast it reacted to load steps; --json and --svg write the details. The same
flags and --seed give the same output. To compare autoscalers fairly (frontiers, many
seeds, tuned on one slice and scored on another) use lab scoreboard.`),
		Example: `  # Five minutes of the conversation trace at 8 times its rate, every built-in autoscaler
  lab simulate --trace data/azure-llm-trace-2023/AzureLLMInferenceTrace_conv.csv --start 20m --length 5m --rate-scale 8

  # The fused score at calibrated set points beside your own HPA, with a chart
  lab simulate --trace data/azure-llm-trace-2023/AzureLLMInferenceTrace_code.csv --start 10m --length 5m --rate-scale 3 \
    --autoscalers saturation --queue-depth-set-point 2 --kv-cache-usage-set-point 0.1 --hpa my-hpa.yaml --svg sim.svg

  # A metric of a policy file (here one that sees ahead), on a calibrated engine profile
  lab simulate --trace data/azure-llm-trace-2023/AzureLLMInferenceTrace_conv.csv --start 20m --length 5m --rate-scale 8 \
    --profile docs/calibration/emulator-conv-profile.yaml --config policies.yaml --hpa chat-ahead-hpa.yaml --autoscalers ''`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return untilDone(ctx, func() error { return o.Run(cmd.OutOrStdout(), cmd.ErrOrStderr()) })
		},
	}
	help.Set(cmd, o.Flags())
	return cmd
}

// report is what a lab command prints and writes: a table for the terminal
// and the whole report as JSON.
type report interface {
	WriteTable(io.Writer) error
	WriteJSON(io.Writer) error
}

// writeReport writes r's table to out, then r's JSON to jsonPath and extra to
// extraPath (each skipped when its path is empty; see writeFile).
func writeReport(out io.Writer, r report, jsonPath, extraPath string, extra func(io.Writer) error) error {
	if err := r.WriteTable(out); err != nil {
		return err
	}
	if err := writeFile(jsonPath, r.WriteJSON); err != nil {
		return err
	}
	return writeFile(extraPath, extra)
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
