package app

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/saturation-adapter/saturation-adapter/cmd/internal/help"
	"github.com/saturation-adapter/saturation-adapter/lab/scoreboard"
	"github.com/saturation-adapter/saturation-adapter/lab/simulate"
)

// ScoreboardOptions are the flags of `lab scoreboard`.
type ScoreboardOptions struct {
	FleetOptions
	// TuneStart, ScoreStart and SliceLength are the slices (trace time).
	TuneStart, ScoreStart, SliceLength time.Duration
	// Seeds is the number of seeds, from FirstSeed.
	Seeds     int
	FirstSeed uint64
	// Workers bounds the replays at once (GOMAXPROCS when 0).
	Workers int
	// SLOGoal and CostGoal are the goal of the verdict.
	SLOGoal, CostGoal float64
	// Grid is every family's sweep; Families keeps some of them (all when
	// empty).
	Grid     scoreboard.Grid
	Families []string
	// ScaleUpWindows are every HPA's scale-up stabilization windows, passed
	// on as the grid's (scoreboard.Grid's ScaleUpWindows: one is every
	// family's, several are swept like targets). ScaleUpPods, ScaleUpPercent
	// and ScaleUpPeriod are its scale-up policies: at most ScaleUpPods pods
	// per ScaleUpPeriod or, when ScaleUpPercent is above 0, that percentage of
	// the replicas, whichever allows more (selectPolicy Max). ScaleDownWindow,
	// ScaleDownPeriod and ScaleDownPercent are its scale-down side: the
	// stabilization window, then one pod per period or, when ScaleDownPercent
	// is above 0, that percentage, whichever removes more. The defaults are
	// simulate.RecommendedBehavior's: up after 30 s by 2 pods per 60 s, down
	// after 300 s by one pod per 120 s.
	ScaleUpWindows                   []time.Duration
	ScaleUpPods, ScaleUpPercent      int32
	ScaleUpPeriod                    time.Duration
	ScaleDownWindow, ScaleDownPeriod time.Duration
	ScaleDownPercent                 int32
	// JSON and SVG are output files ("" for none).
	JSON, SVG string
}

// NewScoreboardOptions returns the defaults: the first half-hour to tune, the
// second to score, each after up to 10 minutes of unscored warm-up (longer
// than the recommended 5 min scale-down window plus a 2 min cold start), 10
// seeds, the project's goal (99 % within the TTFT SLO at 1.15 × the oracle's
// GPU-hours), and the grid around the emulator's default engine under
// conversation-like requests (scoreboard.DefaultGrid(3, 0.3, 12)).
func NewScoreboardOptions() *ScoreboardOptions {
	o := &ScoreboardOptions{FleetOptions: NewFleetOptions(), ScoreStart: 30 * time.Minute, SliceLength: 30 * time.Minute,
		Seeds: 10, FirstSeed: 1, SLOGoal: 0.99, CostGoal: 1.15, Grid: scoreboard.DefaultGrid(3, 0.3, 12),
		ScaleUpWindows: []time.Duration{30 * time.Second}, ScaleDownWindow: 300 * time.Second, ScaleDownPeriod: 120 * time.Second,
		ScaleUpPods: 2, ScaleUpPeriod: 60 * time.Second}
	o.Window.WarmUp = 10 * time.Minute
	return o
}

// Flags returns the options' flags in named groups.
func (o *ScoreboardOptions) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	o.addFlags(&fss, false)
	fs := fss.FlagSet("slices and seeds")
	fs.DurationVar(&o.TuneStart, "tune-start", o.TuneStart, "Start of the slice set points are chosen on (trace time).")
	fs.DurationVar(&o.ScoreStart, "score-start", o.ScoreStart, "Start of the slice the choices are scored on (trace time).")
	fs.DurationVar(&o.SliceLength, "slice-length", o.SliceLength, "Length of each slice (trace time).")
	fs.IntVar(&o.Seeds, "seeds", o.Seeds, "Seeds per slice, from --first-seed: every point is replayed on each (clock phases, cold starts, --rate-scale copies).")
	fs.Uint64Var(&o.FirstSeed, "first-seed", o.FirstSeed, "The first seed.")
	fs.IntVar(&o.Workers, "workers", o.Workers, "Replays at once; 0 for GOMAXPROCS.")
	fs.Float64Var(&o.SLOGoal, "slo-goal", o.SLOGoal, "Share of requests within --ttft-slo a tuned point must keep on the tune slice, and the verdict's bar.")
	fs.Float64Var(&o.CostGoal, "cost-goal", o.CostGoal, "GPU-hours against the oracle's that the verdict accepts.")

	g := &o.Grid
	fs = fss.FlagSet("families")
	fs.StringSliceVar(&o.Families, "families", o.Families, "Families to compare (gpu-util, keda-queue, keda-queue-cached, queue, kv, saturation, saturation+rate, saturation+rate+peak, saturation+minimum, and saturation+rate+trend, compared only when named); empty for all the others.")
	fs.Int32SliceVar(&g.GPUUtilization, "gpu-utilization-targets", g.GPUUtilization, "gpu-util's averageUtilization targets, percent.")
	fs.Float64SliceVar(&g.Queue, "queue-targets", g.Queue, "Waiting requests per pod of keda-queue, keda-queue-cached and queue.")
	fs.Float64SliceVar(&g.KV, "kv-targets", g.KV, "KV-cache usage targets of kv.")
	fs.Float64Var(&g.SaturationQueue, "saturation-queue-set-point", g.SaturationQueue, "Queue set point of the fused families (lab calibrate measures it).")
	fs.Float64SliceVar(&g.SaturationKV, "saturation-kv-set-points", g.SaturationKV, "KV-cache set points saturation sweeps (beside its default 5, 0.8).")
	fs.Float64Var(&g.DemandKV, "rate-kv-set-point", g.DemandKV, "KV-cache set point of the families with a demand-rate term.")
	fs.Float64SliceVar(&g.DemandRate, "rates", g.DemandRate, "Requests per second per replica the demand-rate families sweep (lab calibrate measures the capacity).")
	fs.DurationVar(&g.DemandWindow, "rate-window", g.DemandWindow, "Window of the demand-rate term.")
	fs.DurationVar(&g.Peak.Window, "peak-window", g.Peak.Window, "How long saturation+rate+peak holds a peak.")
	fs.Float64Var(&g.Peak.Headroom, "peak-headroom", g.Peak.Headroom, "Headroom above the held peak (0.1: 10 %).")
	fs.DurationVar(&g.Peak.HalfLife, "peak-half-life", g.Peak.HalfLife, "Half-life of a held peak; 0 holds it whole for the window.")
	fs.DurationVar(&g.Trend.Window, "trend-window", g.Trend.Window, "Span saturation+rate+trend fits the demand's slope over.")
	fs.DurationVar(&g.Trend.Lookahead, "trend-lookahead", g.Trend.Lookahead, "How far ahead saturation+rate+trend extrapolates a rising demand.")
	fs.Float64SliceVar(&g.Floors, "minimums", g.Floors, "Least replicas saturation+minimum sweeps (a scheduled minimum open over the slice).")
	fs.DurationSliceVar(&o.ScaleUpWindows, "scale-up-windows", o.ScaleUpWindows, "Every HPA's behavior.scaleUp.stabilizationWindowSeconds (its policy: --scale-up-pods per --scale-up-period); several (at most 10), e.g. 30s,60s, are swept like targets: every point once per window (labels end ,up=60s), each family choosing its window on the tune slice.")
	fs.Int32Var(&o.ScaleUpPods, "scale-up-pods", o.ScaleUpPods, "Every HPA's scale-up policy: at most this many pods added per --scale-up-period.")
	fs.Int32Var(&o.ScaleUpPercent, "scale-up-percent", o.ScaleUpPercent, "Every HPA's second scale-up policy, when above 0: this percentage of the replicas added per --scale-up-period, if more than --scale-up-pods (selectPolicy Max; Kubernetes' default behavior is --scale-up-windows 0s --scale-up-pods 4 --scale-up-percent 100 --scale-up-period 15s).")
	fs.DurationVar(&o.ScaleUpPeriod, "scale-up-period", o.ScaleUpPeriod, "Every HPA's scale-up policies: their period.")
	fs.DurationVar(&o.ScaleDownWindow, "scale-down-window", o.ScaleDownWindow, "Every HPA's behavior.scaleDown.stabilizationWindowSeconds.")
	fs.DurationVar(&o.ScaleDownPeriod, "scale-down-period", o.ScaleDownPeriod, "Every HPA's scale-down policy: one pod per this period.")
	fs.Int32Var(&o.ScaleDownPercent, "scale-down-percent", o.ScaleDownPercent, "Every HPA's second scale-down policy, when above 0: this percentage of the replicas removed per --scale-down-period, if more than one pod (selectPolicy Max; Kubernetes' default behavior is --scale-down-window 5m --scale-down-percent 100 --scale-down-period 15s).")

	fs = fss.FlagSet("output")
	fs.StringVar(&o.JSON, "json", o.JSON, "Write every point's results (medians and ranges on both slices) as JSON to this file.")
	fs.StringVar(&o.SVG, "svg", o.SVG, "Write the score slice's frontiers as an SVG chart to this file.")
	return fss
}

// MaxSeeds is the most seeds per slice --seeds takes: each replays every
// point on both slices, and results are kept for all of them.
const MaxSeeds = 1000

// MaxScaleUpWindows is the most windows --scale-up-windows takes: each
// replays every point again (scoreboard.MaxScaleUpWindows).
const MaxScaleUpWindows = scoreboard.MaxScaleUpWindows

// MaxScaleUpPercent bounds --scale-up-percent: 100 times the replicas added
// per period, far past any autoscaler's need. --scale-up-pods is bounded by
// the largest fleet (simulate.MaxFleet): the HPA model adds it to the
// replicas in int32, as the controller does.
const MaxScaleUpPercent = 10000

// Validate reports every invalid flag at once.
func (o *ScoreboardOptions) Validate() error {
	errs := o.validate()
	if o.Seeds < 1 || o.Seeds > MaxSeeds {
		errs = append(errs, fmt.Errorf("--seeds=%d: want 1 to %d", o.Seeds, MaxSeeds))
	} else if o.FirstSeed > math.MaxUint64-uint64(o.Seeds-1) {
		errs = append(errs, fmt.Errorf("--first-seed=%d --seeds=%d: the seeds would wrap around past %d", o.FirstSeed, o.Seeds, uint64(math.MaxUint64)))
	}
	if o.Workers < 0 {
		errs = append(errs, fmt.Errorf("--workers=%d: want 0 (GOMAXPROCS) or more", o.Workers))
	}
	errs = append(errs, checkOutputs(o.inputs(), output{"json", o.JSON}, output{"svg", o.SVG})...)
	if o.SliceLength <= 0 {
		errs = append(errs, fmt.Errorf("--slice-length=%v: want > 0", o.SliceLength))
	}
	// The grid's check (scoreboard.Grid.Validate runs it too, when the
	// families are built): here the windows are refused before the trace is
	// read, naming the flag.
	for _, err := range scoreboard.ScaleUpWindowErrors(o.ScaleUpWindows) {
		errs = append(errs, fmt.Errorf("--scale-up-windows: %w", err))
	}
	if !wholeSeconds(o.ScaleDownWindow, 0, time.Hour) || !wholeSeconds(o.ScaleDownPeriod, time.Second, 30*time.Minute) {
		errs = append(errs, fmt.Errorf("--scale-down-window=%v --scale-down-period=%v: want whole seconds, a window in [0, 1h] and a period in [1s, 30m] (the HPA API's ranges)", o.ScaleDownWindow, o.ScaleDownPeriod))
	}
	if o.ScaleDownPercent < 0 || o.ScaleDownPercent > 100 {
		errs = append(errs, fmt.Errorf("--scale-down-percent=%d: want a percentage in [0, 100] (0 for none)", o.ScaleDownPercent))
	}
	if o.ScaleUpPods < 1 || o.ScaleUpPods > simulate.MaxFleet || o.ScaleUpPercent < 0 || o.ScaleUpPercent > MaxScaleUpPercent ||
		!wholeSeconds(o.ScaleUpPeriod, time.Second, 30*time.Minute) {
		errs = append(errs, fmt.Errorf("--scale-up-pods=%d --scale-up-percent=%d --scale-up-period=%v: want 1 to %d pods (the largest fleet), a percentage in [0, %d] (0 for none) and whole seconds in [1s, 30m] (the HPA API's range)",
			o.ScaleUpPods, o.ScaleUpPercent, o.ScaleUpPeriod, simulate.MaxFleet, MaxScaleUpPercent))
	}
	return utilerrors.NewAggregate(errs)
}

// addPercentPolicy adds to rules a Percent policy of percent over the period
// of its first policy, when percent is above 0.
func addPercentPolicy(rules *autoscalingv2.HPAScalingRules, percent int32) {
	if percent > 0 {
		rules.Policies = append(rules.Policies, autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PercentScalingPolicy,
			Value: percent, PeriodSeconds: rules.Policies[0].PeriodSeconds})
	}
}

// wholeSeconds reports whether d is a whole number of seconds in [lo, hi]:
// the HPA API's behavior counts seconds in int32 fields.
func wholeSeconds(d, lo, hi time.Duration) bool {
	return d >= lo && d <= hi && d%time.Second == 0
}

// grid returns the grid of the flags, minReplicas aside (Run sets the
// fleet's): o.Grid with the recommended HPA behavior
// (simulate.RecommendedBehavior) at the scale-down window and period of
// --scale-down-window, --scale-down-period and --scale-down-percent, the
// scale-up policies of --scale-up-pods, --scale-up-percent and
// --scale-up-period, and the scale-up windows of --scale-up-windows, which the grid applies (Grid.HPABehavior, Families).
func (o *ScoreboardOptions) grid() scoreboard.Grid {
	b := simulate.RecommendedBehavior()
	window, period := int32(o.ScaleDownWindow/time.Second), int32(o.ScaleDownPeriod/time.Second)
	b.ScaleDown.StabilizationWindowSeconds = &window
	b.ScaleDown.Policies[0].PeriodSeconds = period
	addPercentPolicy(b.ScaleDown, o.ScaleDownPercent)
	b.ScaleUp.Policies[0].Value = o.ScaleUpPods
	b.ScaleUp.Policies[0].PeriodSeconds = int32(o.ScaleUpPeriod / time.Second)
	addPercentPolicy(b.ScaleUp, o.ScaleUpPercent)
	g := o.Grid
	g.Behavior = b
	g.ScaleUpWindows = o.ScaleUpWindows
	return g
}

// Run replays every family's points on both slices and every seed and writes
// the table to out and the JSON and SVG files; progress goes to progress.
func (o *ScoreboardOptions) Run(out, progress io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	cfg, _, tr, err := o.load()
	if err != nil {
		return err
	}
	g := o.grid()
	g.MinReplicas = int32(cfg.MinReplicas)
	families, err := scoreboard.Families(g)
	if err != nil {
		return err
	}
	if len(o.Families) > 0 {
		var keep []scoreboard.Family
		for _, name := range o.Families {
			found := false
			for _, f := range families {
				if f.Name == name {
					keep, found = append(keep, f), true
				}
			}
			if !found {
				return fmt.Errorf("--families: unknown family %q", name)
			}
		}
		families = keep
	} else {
		families = slices.DeleteFunc(families, func(f scoreboard.Family) bool { return f.Named })
	}
	seeds := make([]uint64, o.Seeds)
	for i := range seeds {
		seeds[i] = o.FirstSeed + uint64(i)
	}
	start := time.Now()
	sc := scoreboard.Config{Sim: cfg, Trace: tr, Window: o.Window, Seeds: seeds, Families: families,
		Tune:    scoreboard.Slice{Start: o.TuneStart, Length: o.SliceLength},
		Score:   scoreboard.Slice{Start: o.ScoreStart, Length: o.SliceLength},
		SLOGoal: o.SLOGoal, CostGoal: o.CostGoal, Workers: o.Workers,
		Progress: func(line string) { fmt.Fprintln(progress, line) }}
	points := 0
	for _, f := range families {
		points += len(f.Points)
	}
	fmt.Fprintf(progress, "replaying %d points of %d families on 2 slices × %d seeds\n", points, len(families), len(seeds))
	res, err := scoreboard.Run(sc)
	if err != nil {
		return err
	}
	fmt.Fprintf(progress, "done in %.0fs\n", time.Since(start).Seconds())
	return writeReport(out, res, o.JSON, o.SVG, res.WriteSVG)
}

// NewScoreboardCommand returns `lab scoreboard`.
func NewScoreboardCommand(ctx context.Context) *cobra.Command {
	o := NewScoreboardOptions()
	cmd := &cobra.Command{
		Use:   "scoreboard --trace FILE [flags]",
		Short: "Compare autoscaler families fairly: frontiers over many seeds, tuned on one slice and scored on another",
		Long: strings.TrimSpace(`
scoreboard compares autoscaler families the way a skeptical SRE would. Every family is
a frontier: its target is swept (the GPU-utilization HPA's averageUtilization, KEDA's
queue threshold with and without its cache, the queue-only and KV-only HPAs' targets,
the fused score's set points, the demand-rate term's capacity per replica, with a held
peak, with a scheduled minimum). Every point is replayed (lab simulate's fleet, HPA
model and metrics pipelines) on --seeds seeds of two slices of the trace: it is chosen
on the tune slice and reported on the score slice, as medians and ranges over the seeds
of the share of requests within the TTFT SLO and of the GPU-hours against the oracle of
the same seed. Points beaten on both axes are named with who beats them; each family's
tuned point is checked against the goal (--slo-goal at --cost-goal × the oracle), and
again the other way round (chosen on the score slice, checked on the tune slice), so
that neither slice alone decides.
It prints Markdown; --svg draws the frontiers. Replays run in parallel (--workers); the
output does not depend on how many.`),
		Example: `  # A quick look: two 5-minute slices of the conversation trace, 2 seeds, three families
  lab scoreboard --trace data/azure-llm-trace-2023/AzureLLMInferenceTrace_conv.csv --rate-scale 8 \
    --tune-start 20m --score-start 25m --slice-length 5m --seeds 2 --families gpu-util,keda-queue,saturation+rate

  # The scoreboard of docs/scoreboard.md: both half-hours, 10 seeds, every family
  lab scoreboard --trace data/azure-llm-trace-2023/AzureLLMInferenceTrace_conv.csv --rate-scale 8 \
    --profile docs/calibration/emulator-conv-profile.yaml --json conv-scoreboard.json --svg conv-frontier.svg`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return untilDone(ctx, func() error { return o.Run(cmd.OutOrStdout(), cmd.ErrOrStderr()) })
		},
	}
	help.Set(cmd, o.Flags())
	return cmd
}
