// Command demo shows the product end to end on one machine: a loopback control plane, the
// adapter registered as the external metrics API, an HPA on llm_saturation and a 1-replica
// Deployment of emulated vLLM engines, then a burst of the Azure LLM conversation trace
// (Splitwise, ISCA 2024, CC-BY 4.0) replayed time-compressed through a least-outstanding-
// requests gateway. It prints a live table, a summary, and writes an SVG chart of the
// timeline. Run it with `make demo` (DEMO_FLAGS="--keep" keeps the cluster running).
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/saturation-adapter/saturation-adapter/pkg/trace"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/loadgen"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// options are the demo's flags.
type options struct {
	tracePath, out, emuArgs string
	from, length, calm      time.Duration
	interval, coldStart     time.Duration
	speedup, tokScale       float64
	keep                    bool
	maxReplicas             int
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.tracePath, "trace", "", "Azure LLM trace CSV (default: the repository's data/azure-llm-trace-2023/AzureLLMInferenceTrace_conv.csv)")
	flag.DurationVar(&o.from, "from", 20*time.Minute, "offset into the trace where the replay starts")
	flag.DurationVar(&o.length, "duration", 3*time.Minute, "wall-clock length of the replay")
	flag.DurationVar(&o.calm, "calm", 40*time.Second, "first part of the replay at real speed, before the burst")
	flag.Float64Var(&o.speedup, "speedup", 3.5, "time compression of the trace during the burst (trace seconds per wall second)")
	flag.Float64Var(&o.tokScale, "token-scale", 0.25, "multiplier on the trace's output token counts (keeps the demo light on 2 cores)")
	flag.DurationVar(&o.interval, "interval", 5*time.Second, "table refresh period")
	flag.BoolVar(&o.keep, "keep", false, "keep the cluster running after the replay and print the kubeconfig path (Ctrl-C to stop)")
	flag.StringVar(&o.out, "out", "", "directory for the chart and the timeline CSV (default test/e2e/_artifacts/demo)")
	flag.StringVar(&o.emuArgs, "emulator-args", strings.Join(demoEmulatorArgs, " "), "arguments for every emulated engine (space-separated)")
	flag.DurationVar(&o.coldStart, "cold-start", 5*time.Second, "emulated cold start of a new pod (model load)")
	flag.IntVar(&o.maxReplicas, "max-replicas", 8, "HPA maxReplicas")
	flag.Parse()
	return o
}

func run() error {
	o := parseFlags()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

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
	fmt.Printf("starting control plane, adapter and node agent in %s ...\n", dir)
	t0 := time.Now()
	s, err := stack.Start(ctx, stack.Options{
		ToolsDir: tools, BinDir: bin, Dir: dir, Namespace: "demo",
		HPASyncPeriod: 5 * time.Second,
		ColdStart:     o.coldStart,
		Adapter:       stack.AdapterOptions{ScrapeInterval: time.Second},
		EmulatorArgs:  strings.Fields(o.emuArgs),
	})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("shutting down ...")
		s.Stop()
		_ = os.RemoveAll(dir)
		fmt.Println("stopped; nothing left running")
	}()
	fmt.Printf("ready in %s\n", time.Since(t0).Round(100*time.Millisecond))

	// Phase 2: the workload and its HPA.
	sel, err := o.deploy(ctx, s)
	if err != nil {
		return err
	}
	fmt.Printf("replaying %d requests of the Azure conversation trace from %s: %s at real speed, then a %gx burst; %s in all\n\n",
		len(reqs), o.from, o.calm, o.speedup, o.length)

	// Phase 3: the replay, with a live table until the pool is back to one replica.
	gw := loadgen.New(stack.EmulatorGateway(s.Endpoints(sel)))
	start, samples, err := watch(ctx, s, gw, sel, reqs, o.interval)
	if err != nil {
		return err
	}

	// Phase 4: the summary and the chart.
	if err := o.report(start, gw, samples); err != nil {
		return err
	}
	if o.keep {
		fmt.Printf("\ncluster kept running. Try:\n  export KUBECONFIG=%s\n  %s get hpa -n demo -w\n  %s get --raw \"/apis/external.metrics.k8s.io/v1beta1/namespaces/demo/llm_saturation?labelSelector=app%%3Dvllm\"\nCtrl-C to stop.\n",
			s.Cluster.AdminKubeconfig, filepath.Join(tools, "kubectl"), filepath.Join(tools, "kubectl"))
		<-ctx.Done()
	}
	return nil
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

// load reads the trace (with the adapter's pkg/trace reader) and shapes the
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
	hpa := stack.HPA("vllm", "vllm", "llm_saturation", dep.Spec.Selector.MatchLabels, autoscalingv2.ValueMetricType, "1", 1, int32(o.maxReplicas), 30*time.Second)
	if _, err := c.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		return len(s.ReadyPods(sel)) > 0, nil
	}); err != nil {
		return nil, err
	}
	fmt.Printf("Deployment vllm (1 replica, emulated vLLM) Ready; HPA vllm: llm_saturation, type Value, value 1, max %d replicas\n", o.maxReplicas)
	return sel, nil
}

// watch replays reqs through gw and prints a table row every interval until
// the replay is over and the pool is back to one replica (or 2 minutes later).
func watch(ctx context.Context, s *stack.Stack, gw *loadgen.Gateway, sel labels.Selector, reqs []loadgen.Request, interval time.Duration) (time.Time, []stack.Sample, error) {
	replayCtx, cancelReplay := context.WithCancel(ctx)
	defer cancelReplay()
	replayDone := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(replayDone)
		gw.Run(replayCtx, reqs)
	}()

	var samples []stack.Sample
	header := fmt.Sprintf("%7s  %6s  %7s  %5s  %14s  %6s  %6s  %9s  %8s", "time", "req/s", "desired", "ready", "llm_saturation", "queue", "KV", "TTFT p95", "inflight")
	fmt.Println(header)
	fmt.Println(strings.Repeat("-", len(header)))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var doneAt time.Time
	prevT, prevSent := start, 0
	for {
		smp := s.Observe(ctx, "vllm", "vllm", sel)
		sent := gw.Sent()
		if dt := smp.T.Sub(prevT).Seconds(); dt > 0 {
			smp.OfferedRPS = float64(sent-prevSent) / dt
		}
		prevT, prevSent = smp.T, sent
		samples = append(samples, smp)
		window := loadgen.Summarize(gw.Results(), time.Now().Add(-30*time.Second))
		fmt.Printf("%6.0fs  %6.1f  %7d  %5d  %14s  %6s  %6s  %9s  %8d\n", smp.T.Sub(start).Seconds(), smp.OfferedRPS, smp.Desired, smp.Ready,
			num(smp.Saturation, 3), num(smp.Queue, 0), pct(smp.KV), window.TTFTp95.Round(time.Millisecond), gw.Inflight())
		if doneAt.IsZero() {
			select {
			case <-replayDone:
				doneAt = time.Now()
				fmt.Println("-- replay finished; watching the scale-down --")
			default:
			}
		} else if (smp.Desired <= 1 && smp.Ready <= 1) || time.Since(doneAt) > 2*time.Minute {
			return start, samples, nil
		}
		select {
		case <-ctx.Done():
			return start, samples, ctx.Err()
		case <-tick.C:
		}
	}
}

// report prints the summary and writes the chart and the timeline CSV.
func (o *options) report(start time.Time, gw *loadgen.Gateway, samples []stack.Sample) error {
	all := loadgen.Summarize(gw.Results(), time.Time{})
	var peakDesired, peakReady int32
	var peakSat, peakQueue float64
	var firstScale time.Duration
	for _, smp := range samples {
		peakDesired, peakReady = max(peakDesired, smp.Desired), max(peakReady, smp.Ready)
		if !math.IsNaN(smp.Saturation) {
			peakSat = max(peakSat, smp.Saturation)
		}
		if !math.IsNaN(smp.Queue) {
			peakQueue = max(peakQueue, smp.Queue)
		}
		if firstScale == 0 && smp.Desired > 1 {
			firstScale = smp.T.Sub(start)
		}
	}
	fmt.Printf("\nsummary\n  requests: %s\n  replicas: 1 → peak %d desired / %d ready (first scale-up after %s), back to %d\n  peak llm_saturation %.3f, peak queue %.0f\n",
		all, peakDesired, peakReady, firstScale.Round(time.Second), samples[len(samples)-1].Ready, peakSat, peakQueue)
	chart := filepath.Join(o.out, "timeline.svg")
	if err := writeChart(chart, fmt.Sprintf("HPA on llm_saturation (Value 1) · Azure conversation trace, calm then %gx burst", o.speedup), samples); err != nil {
		return err
	}
	csvPath := filepath.Join(o.out, "timeline.csv")
	if err := writeCSV(csvPath, start, samples); err != nil {
		return err
	}
	fmt.Printf("  chart: %s\n  data:  %s\n", chart, csvPath)
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

func writeCSV(path string, start time.Time, samples []stack.Sample) error {
	var b strings.Builder
	b.WriteString("seconds,offered_rps,spec,desired,ready,hpa_value,llm_saturation,llm_demand_replicas,queue,kv\n")
	for _, s := range samples {
		fmt.Fprintf(&b, "%.1f,%.2f,%d,%d,%d,%g,%g,%g,%g,%g\n", s.T.Sub(start).Seconds(), s.OfferedRPS, s.Spec, s.Desired, s.Ready, s.HPAValue, s.Saturation, s.Demand, s.Queue, s.KV)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
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
