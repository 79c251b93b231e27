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

	"github.com/saturation-adapter/saturation-adapter/test/e2e/loadgen"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		tracePath = flag.String("trace", "", "Azure LLM trace CSV (default: the repository's data/azure-llm-trace-2023/AzureLLMInferenceTrace_conv.csv)")
		from      = flag.Duration("from", 20*time.Minute, "offset into the trace where the replay starts")
		length    = flag.Duration("duration", 3*time.Minute, "wall-clock length of the replay")
		calm      = flag.Duration("calm", 40*time.Second, "first part of the replay at real speed, before the burst")
		speedup   = flag.Float64("speedup", 3.5, "time compression of the trace during the burst (trace seconds per wall second)")
		tokScale  = flag.Float64("token-scale", 0.25, "multiplier on the trace's output token counts (keeps the demo light on 2 cores)")
		interval  = flag.Duration("interval", 5*time.Second, "table refresh period")
		keep      = flag.Bool("keep", false, "keep the cluster running after the replay and print the kubeconfig path (Ctrl-C to stop)")
		out       = flag.String("out", "", "directory for the chart and the timeline CSV (default test/e2e/_artifacts/demo)")
		emuArgs   = flag.String("emulator-args", strings.Join(demoEmulatorArgs, " "), "arguments for every emulated engine (space-separated)")
		coldStart = flag.Duration("cold-start", 5*time.Second, "emulated cold start of a new pod (model load)")
		maxRep    = flag.Int("max-replicas", 8, "HPA maxReplicas")
	)
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tools, bin, err := stack.DirsFromEnv()
	if err != nil {
		return err
	}
	repo, err := repoRoot()
	if err != nil {
		return err
	}
	if *tracePath == "" {
		*tracePath = filepath.Join(repo, "data", "azure-llm-trace-2023", "AzureLLMInferenceTrace_conv.csv")
	}
	if *out == "" {
		*out = filepath.Join(repo, "test", "e2e", "_artifacts", "demo")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	trace, err := loadgen.ReadAzureTrace(*tracePath)
	if err != nil {
		return err
	}
	// A calm start at real speed, then the burst: the next part of the trace compressed.
	reqs := loadgen.Window(trace, *from, *calm)
	burst := loadgen.Compress(loadgen.Window(trace, *from+*calm, time.Duration(float64(*length-*calm)*(*speedup))), *speedup)
	for _, r := range burst {
		r.At += *calm
		reqs = append(reqs, r)
	}
	for i := range reqs {
		reqs[i].OutputTokens = max(1, int(math.Round(float64(reqs[i].OutputTokens)*(*tokScale))))
	}

	dir, err := os.MkdirTemp("", "saturation-demo-")
	if err != nil {
		return err
	}
	fmt.Printf("starting control plane, adapter and node agent in %s ...\n", dir)
	t0 := time.Now()
	s, err := stack.Start(ctx, stack.Options{
		ToolsDir: tools, BinDir: bin, Dir: dir, Namespace: "demo",
		HPASyncPeriod: 5 * time.Second,
		ColdStart:     *coldStart,
		Adapter:       stack.AdapterOptions{ScrapeInterval: time.Second},
		EmulatorArgs:  strings.Fields(*emuArgs),
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

	c := s.Cluster.Client
	dep := stack.EngineDeployment("vllm", 1, stack.EmulatorImage)
	if _, err := c.AppsV1().Deployments(s.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return err
	}
	hpa := stack.HPA("vllm", "vllm", "llm_saturation", dep.Spec.Selector.MatchLabels, autoscalingv2.ValueMetricType, "1", 1, int32(*maxRep), 30*time.Second)
	if _, err := c.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		return err
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
	for len(s.ReadyPods(sel)) == 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	fmt.Printf("Deployment vllm (1 replica, emulated vLLM) Ready; HPA vllm: llm_saturation, type Value, value 1, max %d replicas\n", *maxRep)
	fmt.Printf("replaying %d requests of the Azure conversation trace from %s: %s at real speed, then a %gx burst; %s in all\n\n",
		len(reqs), *from, *calm, *speedup, *length)

	gw := loadgen.New(stack.EmulatorGateway(s.Endpoints(sel)))
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
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	// After the replay, keep watching until the pool is back to one replica (or 2 min).
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
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}

	// Summary.
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
	chart := filepath.Join(*out, "timeline.svg")
	if err := writeChart(chart, fmt.Sprintf("HPA on llm_saturation (Value 1) · Azure conversation trace, calm then %gx burst", *speedup), samples); err != nil {
		return err
	}
	csvPath := filepath.Join(*out, "timeline.csv")
	if err := writeCSV(csvPath, start, samples); err != nil {
		return err
	}
	fmt.Printf("  chart: %s\n  data:  %s\n", chart, csvPath)

	if *keep {
		fmt.Printf("\ncluster kept running. Try:\n  export KUBECONFIG=%s\n  %s get hpa -n demo -w\n  %s get --raw \"/apis/external.metrics.k8s.io/v1beta1/namespaces/demo/llm_saturation?labelSelector=app%%3Dvllm\"\nCtrl-C to stop.\n",
			s.Cluster.AdminKubeconfig, filepath.Join(tools, "kubectl"), filepath.Join(tools, "kubectl"))
		<-ctx.Done()
	}
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

// repoRoot finds the repository root from the working directory (make runs the demo in
// test/e2e).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "cmd", "adapter")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("repository root not found above %s", dir)
		}
	}
}
