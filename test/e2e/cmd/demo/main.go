// Command demo shows the product end to end on one machine: a loopback control plane, the
// adapter registered as the external metrics API, an HPA on llm_saturation and a 1-replica
// Deployment of emulated vLLM engines, then a burst of the Azure LLM conversation trace
// (Splitwise, ISCA 2024, CC-BY 4.0) replayed time-compressed through a least-outstanding-
// requests gateway. It prints a live table, a summary, and writes an SVG chart of the
// timeline. Run it with `make demo` (DEMO_FLAGS="--keep" keeps the cluster running;
// DEMO_FLAGS=--from-zero tells the scale-from-zero story behind a flow-controlled gateway).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/saturation-adapter/saturation-adapter/lab/trace"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/flowgate"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/loadgen"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

func main() {
	// The node agent runs this binary as the flow-controlled gateway's pod (--from-zero).
	if gw, ok, err := flowgate.PodArgs(os.Args[1:]); ok || err != nil {
		os.Exit(servePod(gw, err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// servePod runs the gateway's pod mode until SIGTERM; its exit code.
func servePod(o flowgate.PodOptions, err error) int {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o.Model = stack.Model
	if err := flowgate.RunPod(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// options are the demo's flags.
type options struct {
	tracePath, out, emuArgs string
	from, length, calm      time.Duration
	interval, coldStart     time.Duration
	speedup, tokScale       float64
	keep, fromZero          bool
	maxReplicas             int
	// w receives everything the demo prints.
	w io.Writer
}

func parseFlags(args []string, w io.Writer) (options, error) {
	o := options{w: w}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(w)
	fs.StringVar(&o.tracePath, "trace", "", "Azure LLM trace CSV (default: the repository's data/azure-llm-trace-2023/AzureLLMInferenceTrace_conv.csv)")
	fs.DurationVar(&o.from, "from", 20*time.Minute, "offset into the trace where the replay starts")
	fs.DurationVar(&o.length, "duration", 3*time.Minute, "wall-clock length of the replay")
	fs.DurationVar(&o.calm, "calm", 40*time.Second, "first part of the replay at real speed, before the burst")
	fs.Float64Var(&o.speedup, "speedup", 3.5, "time compression of the trace during the burst (trace seconds per wall second)")
	fs.Float64Var(&o.tokScale, "token-scale", 0.25, "multiplier on the trace's output token counts (keeps the demo light on 2 cores)")
	fs.DurationVar(&o.interval, "interval", 5*time.Second, "table refresh period")
	fs.BoolVar(&o.keep, "keep", false, "keep the cluster running after the replay and print the kubeconfig path (Ctrl-C to stop)")
	fs.BoolVar(&o.fromZero, "from-zero", false, "scale from zero: a flow-controlled gateway holds the load while the HPA (minReplicas 0) wakes the pool on a policy with a gateway input")
	fs.StringVar(&o.out, "out", "", "directory for the chart and the timeline CSV (default test/e2e/_artifacts/demo)")
	fs.StringVar(&o.emuArgs, "emulator-args", strings.Join(demoEmulatorArgs, " "), "arguments for every emulated engine (space-separated)")
	fs.DurationVar(&o.coldStart, "cold-start", 5*time.Second, "emulated cold start of a new pod (model load)")
	fs.IntVar(&o.maxReplicas, "max-replicas", 8, "HPA maxReplicas")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.calm < 0 || o.calm >= o.length || o.speedup <= 0 || o.tokScale <= 0 || o.interval <= 0 || o.maxReplicas < 1 {
		return o, fmt.Errorf("need 0 <= --calm < --duration, --speedup, --token-scale and --interval above 0, --max-replicas at least 1")
	}
	return o, nil
}

func run(ctx context.Context, args []string, w io.Writer) error {
	o, err := parseFlags(args, w)
	if err != nil {
		return err
	}
	tools, bin, err := stack.DirsFromEnv()
	if err != nil {
		return err
	}
	if err := o.defaults(); err != nil {
		return err
	}
	reqs, err := o.load()
	if err != nil {
		return err
	}

	// Phase 1: the cluster, the adapter and the node agent.
	dir, err := os.MkdirTemp("", "saturation-demo-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	so := stack.Options{
		ToolsDir: tools, BinDir: bin, Dir: dir, Namespace: "demo",
		HPASyncPeriod: 5 * time.Second,
		ColdStart:     o.coldStart,
		Adapter:       stack.AdapterOptions{ScrapeInterval: time.Second},
		EmulatorArgs:  strings.Fields(o.emuArgs),
	}
	if o.fromZero {
		if err := zeroStackOptions(&so, dir); err != nil {
			return err
		}
	}
	fmt.Fprintf(o.w, "starting control plane, adapter and node agent in %s ...\n", dir)
	t0 := time.Now()
	s, err := stack.Start(ctx, so)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(o.w, "shutting down ...")
		s.Stop()
		fmt.Fprintln(o.w, "stopped; nothing left running")
	}()
	fmt.Fprintf(o.w, "ready in %s\n", time.Since(t0).Round(100*time.Millisecond))

	metric := "llm_saturation"
	if o.fromZero {
		if err := o.runFromZero(ctx, s, reqs); err != nil {
			return err
		}
		metric = zeroPolicy
	} else if err := o.runBurst(ctx, s, reqs); err != nil {
		return err
	}
	if o.keep {
		kubectl := filepath.Join(tools, "kubectl")
		fmt.Fprintf(o.w, "\ncluster kept running. Try:\n  export KUBECONFIG=%s\n  %s get hpa -n demo -w\n  %s get --raw \"/apis/external.metrics.k8s.io/v1beta1/namespaces/demo/%s?labelSelector=app%%3Dvllm\"\nCtrl-C to stop.\n",
			s.Cluster.AdminKubeconfig, kubectl, kubectl, metric)
		<-ctx.Done()
	}
	return nil
}

// runBurst is the default story: 1 replica, a calm start, a burst, the scale-down.
func (o *options) runBurst(ctx context.Context, s *stack.Stack, reqs []loadgen.Request) error {
	sel, err := o.deploy(ctx, s)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.w, "replaying %d requests of the Azure conversation trace from %s: %s at real speed, then a %gx burst; %s in all\n\n",
		len(reqs), o.from, o.calm, o.speedup, o.length)
	gw := loadgen.New(stack.EmulatorGateway(s.Endpoints(sel)))
	start, points, err := o.watch(ctx, s, gw, sel, reqs)
	if err != nil {
		return err
	}
	return o.report(start, gw, points)
}

// defaults fills the paths that depend on the repository's location.
func (o *options) defaults() error {
	repo, err := stack.RepoRoot()
	if err != nil {
		return err
	}
	if o.tracePath == "" {
		o.tracePath = filepath.Join(repo, "data", "azure-llm-trace-2023", "AzureLLMInferenceTrace_conv.csv")
	}
	if o.out == "" {
		o.out = filepath.Join(repo, "test", "e2e", "_artifacts", "demo")
	}
	return os.MkdirAll(o.out, 0o755)
}

// load reads the trace (with the adapter's lab/trace reader) and shapes the
// replay: a calm start at real speed, then the next part of the trace
// compressed, output lengths scaled.
func (o *options) load() ([]loadgen.Request, error) {
	tr, err := trace.ReadFile(o.tracePath)
	if err != nil {
		return nil, err
	}
	all := loadgen.FromTrace(tr)
	reqs := loadgen.Window(all, o.from, o.calm)
	burst := loadgen.Compress(loadgen.Window(all, o.from+o.calm, time.Duration(float64(o.length-o.calm)*o.speedup)), o.speedup)
	for _, r := range burst {
		r.At += o.calm
		reqs = append(reqs, r)
	}
	for i := range reqs {
		reqs[i].OutputTokens = max(1, int(math.Round(float64(reqs[i].OutputTokens)*o.tokScale)))
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("%s has no requests between %s and %s", o.tracePath, o.from, o.from+o.calm+time.Duration(float64(o.length-o.calm)*o.speedup))
	}
	return reqs, nil
}

// deploy creates the 1-replica engine Deployment and its HPA, and waits for the
// first Ready pod. It returns the pods' selector.
func (o *options) deploy(ctx context.Context, s *stack.Stack) (labels.Selector, error) {
	c := s.Cluster.Client
	dep := stack.EngineDeployment("vllm", 1, stack.EmulatorImage)
	if _, err := c.AppsV1().Deployments(s.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	hpa := demoHPA("vllm", "llm_saturation", dep.Spec.Selector.MatchLabels, autoscalingv2.ValueMetricType, 1, int32(o.maxReplicas))
	if _, err := c.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		return len(s.ReadyPods(sel)) > 0, nil
	}); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.w, "Deployment vllm (1 replica, emulated vLLM) Ready; HPA vllm: llm_saturation, type Value, value 1, %d–%d replicas\n", 1, o.maxReplicas)
	printBehavior(o.w, burstBehavior)
	return sel, nil
}

// watch replays reqs through gw and prints a table row every interval until the replay
// is over and the pool is back to one replica (or scaleDownWait later).
func (o *options) watch(ctx context.Context, s *stack.Stack, gw *loadgen.Gateway, sel labels.Selector, reqs []loadgen.Request) (time.Time, []point, error) {
	replayCtx, cancelReplay := context.WithCancel(ctx)
	defer cancelReplay()
	replayDone := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(replayDone)
		gw.Run(replayCtx, reqs)
	}()

	var points []point
	header := fmt.Sprintf("%7s  %-5s  %6s  %7s  %5s  %14s  %6s  %6s  %9s  %8s", "time", "phase", "req/s", "desired", "ready", "llm_saturation", "queue", "KV", "TTFT p95", "inflight")
	fmt.Fprintln(o.w, header)
	fmt.Fprintln(o.w, strings.Repeat("-", len(header)))
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	var doneAt time.Time
	prevT, prevSent := start, 0
	for {
		p := observe(ctx, s, gw, sel, "")
		sent := gw.Sent()
		if dt := p.T.Sub(prevT).Seconds(); dt > 0 {
			p.OfferedRPS = float64(sent-prevSent) / dt
		}
		prevT, prevSent = p.T, sent
		points = append(points, p)
		fmt.Fprintf(o.w, "%6.0fs  %-5s  %6.1f  %7s  %5d  %14s  %6s  %6s  %9s  %8d\n", p.T.Sub(start).Seconds(), o.phaseAt(p.T.Sub(start), !doneAt.IsZero()),
			p.OfferedRPS, desired(p), p.Ready, num(p.Saturation, 3), num(p.Queue, 0), pct(p.KV), secs(p.TTFTp95), gw.Inflight())
		if doneAt.IsZero() {
			select {
			case <-replayDone:
				doneAt = time.Now()
				fmt.Fprintln(o.w, "-- replay finished; watching the scale-down --")
			default:
			}
		} else if (p.HPASynced && p.Desired <= 1 && p.Ready <= 1) || time.Since(doneAt) > scaleDownWait(o.maxReplicas) {
			return start, points, nil
		}
		select {
		case <-ctx.Done():
			return start, points, ctx.Err()
		case <-tick.C:
		}
	}
}

// phaseAt names the replay's phase at offset d: calm, burst, drain (every request
// sent, the backlog still being served), or after (every request answered).
func (o *options) phaseAt(d time.Duration, over bool) string {
	switch {
	case over:
		return "after"
	case d < o.calm:
		return "calm"
	case d < o.length:
		return "burst"
	default:
		return "drain"
	}
}

// phases are the replay's shaded spans on the chart.
func (o *options) phases() []phase {
	return []phase{
		{name: "calm: trace at real speed", from: 0, to: o.calm},
		{name: fmt.Sprintf("burst: trace %gx", o.speedup), from: o.calm, to: o.length, shade: true},
	}
}

// report prints the summary and writes the chart and the timeline CSV.
func (o *options) report(start time.Time, gw *loadgen.Gateway, points []point) error {
	all := loadgen.Summarize(gw.Results(), time.Time{})
	var peakDesired, peakReady int32
	var peakSat, peakQueue float64
	var firstScale time.Duration
	for _, p := range points {
		peakDesired, peakReady = max(peakDesired, p.Desired), max(peakReady, p.Ready)
		if !math.IsNaN(p.Saturation) {
			peakSat = max(peakSat, p.Saturation)
		}
		if !math.IsNaN(p.Queue) {
			peakQueue = max(peakQueue, p.Queue)
		}
		if firstScale == 0 && p.Desired > 1 {
			firstScale = p.T.Sub(start)
		}
	}
	fmt.Fprintf(o.w, "\nsummary\n  requests: %s\n  replicas: 1 → peak %d desired / %d ready (first scale-up after %s), back to %d\n  peak llm_saturation %.3f, peak queue %.0f\n",
		all, peakDesired, peakReady, firstScale.Round(time.Second), points[len(points)-1].Ready, peakSat, peakQueue)
	fmt.Fprint(o.w, milliNote)
	return o.writeOutputs(start, points, chartSpec{
		title:  fmt.Sprintf("HPA on llm_saturation (Value 1) · Azure conversation trace, calm then %gx burst", o.speedup),
		metric: "llm_saturation", target: 1, clip: true,
		phases: o.phases(),
	})
}

// milliNote explains the numbers `kubectl get hpa` shows.
const milliNote = `  kubectl get hpa shows TARGETS as <value>/<target> in Kubernetes quantities, milli units
  when not whole: "2m/1" is 0.002 against a target of 1 (an idle pool), "1500m/1" is 1.5
  (50 % over the set point: the HPA adds replicas), "1/1" is exactly at the set point.
`

// writeOutputs writes the chart and the timeline CSV under o.out and prints their paths.
func (o *options) writeOutputs(start time.Time, points []point, spec chartSpec) error {
	chart := filepath.Join(o.out, "timeline.svg")
	if err := writeChart(chart, spec, start, points); err != nil {
		return err
	}
	csvPath := filepath.Join(o.out, "timeline.csv")
	if err := writeCSV(csvPath, start, points); err != nil {
		return err
	}
	fmt.Fprintf(o.w, "  chart: %s\n  data:  %s\n", chart, csvPath)
	return nil
}

// demoEmulatorArgs give each emulated engine a small capacity so that a time-compressed
// slice of the trace saturates one replica on a 2-core machine.
var demoEmulatorArgs = []string{
	"--max-num-seqs=8",
	"--num-gpu-blocks=720",
	"--max-model-len=8192",
	"--step-time-base=20ms",
	"--step-time-per-seq=2ms",
	"--step-time-per-prefill-token=10us",
}

func writeCSV(path string, start time.Time, points []point) error {
	var b strings.Builder
	b.WriteString("seconds,offered_rps,spec,desired,ready,hpa_value,llm_saturation,llm_demand_replicas,queue,kv,gateway_queue,ttft_p95_seconds\n")
	for _, p := range points {
		fmt.Fprintf(&b, "%.1f,%.2f,%d,%s,%d,%g,%g,%g,%g,%g,%g,%g\n", p.T.Sub(start).Seconds(), p.OfferedRPS, p.Spec, desiredCSV(p), p.Ready, p.HPAValue,
			p.Saturation, p.Demand, p.Queue, p.KV, p.GatewayQueue, p.TTFTp95)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// desired is the HPA's desired replicas for the table, "-" until the HPA controller has
// reconciled the HPA once (its status then says 0 whatever the pool needs).
func desired(p point) string {
	if !p.HPASynced {
		return "-"
	}
	return strconv.Itoa(int(p.Desired))
}

// desiredCSV is desired for the CSV: NaN, like the other columns' missing values, until
// the HPA has been reconciled.
func desiredCSV(p point) string {
	if !p.HPASynced {
		return "NaN"
	}
	return strconv.Itoa(int(p.Desired))
}

func num(v float64, prec int) string {
	if math.IsNaN(v) {
		return "-" // the adapter has no value (yet): its error is in the HPA status
	}
	return fmt.Sprintf("%.*f", prec, v)
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "-" // the adapter has no value (yet): its error is in the HPA status
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}

func secs(v float64) string {
	if math.IsNaN(v) {
		return "-" // no request finished in the window
	}
	return (time.Duration(v * float64(time.Second))).Round(time.Millisecond).String()
}
