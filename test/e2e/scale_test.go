package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/loadgen"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// Load and engine shape for the scaling tests. Each emulated engine runs at most 4
// requests at once with a 30 ms step, so one replica serves about 3.2 requests/s of
// 200+40-token requests, and a full batch holds about 75 % of its 75 KV blocks
// (saturation ≈ 0.93 by the KV term at 0.8). testRPS needs about four replicas.
var (
	testEmulatorArgs = []string{
		"--max-num-seqs=4",
		"--num-gpu-blocks=76",
		"--max-model-len=1024",
		"--step-time-base=20ms",
		"--step-time-per-seq=2500us",
		"--step-time-per-prefill-token=50us",
	}
	testRPS          = 12.0
	testPrompt       = 200
	testOutputTokens = 40
	testMaxReplicas  = int32(6)
	loadLength       = 100 * time.Second
)

// scaleRun is one HPA-driven run: a 1-replica engine Deployment, an HPA on one metric, a
// load step; it records a timeline.
type scaleRun struct {
	t        *testing.T
	s        *stack.Stack
	name     string
	selector labels.Selector
	gw       *loadgen.Gateway
	samples  []stack.Sample
}

func newScaleRun(t *testing.T, s *stack.Stack, name, image, metric string, targetType autoscalingv2.MetricTargetType, value string, engineArgs ...string) *scaleRun {
	t.Helper()
	ctx := context.Background()
	dep := stack.EngineDeployment(name, 1, image, engineArgs...)
	if _, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
	r := &scaleRun{t: t, s: s, name: name, selector: sel}
	r.waitFor("1 Ready replica", 90*time.Second, func(smp stack.Sample) bool { return smp.Ready == 1 })
	hpa := stack.HPA(name, name, metric, dep.Spec.Selector.MatchLabels, targetType, value, 1, testMaxReplicas, 10*time.Second)
	if _, err := s.Cluster.Client.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if image == stack.EmulatorImage {
		r.gw = loadgen.New(stack.EmulatorGateway(s.Endpoints(sel)))
	} else {
		// ignore_eos makes vLLM (and llm-d-inference-sim) generate exactly max_tokens.
		r.gw = loadgen.New(loadgen.Options{Endpoints: s.Endpoints(sel), Model: stack.Model, ExtraBody: map[string]any{"ignore_eos": true}})
	}
	return r
}

// observe takes a sample and logs it.
func (r *scaleRun) observe() stack.Sample {
	smp := r.s.Observe(context.Background(), r.name, r.name, r.selector)
	r.samples = append(r.samples, smp)
	r.t.Logf("%s spec=%d desired=%d ready=%d hpa=%s sat=%.3f demand=%.3f queue=%.0f kv=%.3f inflight=%d %s",
		r.name, smp.Spec, smp.Desired, smp.Ready, fmtF(smp.HPAValue), smp.Saturation, smp.Demand, smp.Queue, smp.KV, r.gw.Inflight(), smp.HPACondition)
	return smp
}

// waitFor samples every second until cond holds or timeout passes.
func (r *scaleRun) waitFor(what string, timeout time.Duration, cond func(stack.Sample) bool) stack.Sample {
	r.t.Helper()
	var last stack.Sample
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(context.Context) (bool, error) {
		if r.gw == nil {
			last = r.s.Observe(context.Background(), r.name, r.name, r.selector)
		} else {
			last = r.observe()
		}
		return cond(last), nil
	})
	if err != nil {
		r.t.Fatalf("%s: waiting for %s: %v (last sample %+v)", r.name, what, err, last)
	}
	return last
}

// startLoad runs a load step in the background; the returned channel closes when done.
func (r *scaleRun) startLoad(ctx context.Context, rps float64, length time.Duration) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.gw.Run(ctx, loadgen.Step(0, rps, length, testPrompt, testOutputTokens))
	}()
	return done
}

func (r *scaleRun) maxDesired() int32 {
	var m int32
	for _, s := range r.samples {
		m = max(m, s.Desired)
	}
	return m
}

// closed returns a waitFor condition that holds once ch is closed.
func closed(ch <-chan struct{}) func(stack.Sample) bool {
	return func(stack.Sample) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}

func fmtF(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.3f", v)
}

func scaleStack(t *testing.T) *stack.Stack {
	return startStack(t, stack.Options{
		ColdStart:    2 * time.Second,
		Adapter:      stack.AdapterOptions{ScrapeInterval: time.Second, ScrapeTimeout: 500 * time.Millisecond},
		EmulatorArgs: testEmulatorArgs,
	})
}

// TestScaling covers, on one cluster: scale-up on llm_saturation (Value 1) under a load
// step, the queue draining once scaled, `kubectl get --raw` through the aggregator agreeing
// with the HPA's value, scale-down after the load stops, and the same load on
// llm_demand_replicas (AverageValue 1) reaching the same replica count within one.
func TestScaling(t *testing.T) {
	t.Parallel()
	s := scaleStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	a := newScaleRun(t, s, "vllm-sat", stack.EmulatorImage, "llm_saturation", autoscalingv2.ValueMetricType, "1")
	loadDone := a.startLoad(ctx, testRPS, loadLength)
	loadStart := time.Now()

	t.Run("scale up on llm_saturation", func(t *testing.T) {
		smp := a.waitFor("≥3 desired replicas", loadLength, func(smp stack.Sample) bool { return smp.Desired >= 3 })
		t.Logf("HPA wants %d replicas %s after the load started", smp.Desired, time.Since(loadStart).Round(time.Second))
	})
	t.Run("queue drains", func(t *testing.T) {
		smp := a.waitFor("queue ≤ 1 with ≥3 ready", time.Until(loadStart.Add(loadLength)), func(smp stack.Sample) bool {
			return smp.Ready >= 3 && smp.Queue <= 1
		})
		t.Logf("queue %.0f with %d ready replicas while the load goes on", smp.Queue, smp.Ready)
	})
	t.Run("kubectl get --raw agrees with the HPA", func(t *testing.T) {
		// The HPA's status holds the value of its last sync; the adapter's answer moves
		// with the load, so compare the raw read with the HPA value of the same sync: poll
		// until a raw read falls within 10 % of the status value read just before it.
		path := fmt.Sprintf("/apis/external.metrics.k8s.io/v1beta1/namespaces/%s/llm_saturation?labelSelector=%s", s.Namespace, "app%3Dvllm-sat")
		var got, want float64
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			h, err := s.Cluster.Client.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Get(ctx, "vllm-sat", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			want = stack.HPAMetricValue(h)
			out, err := s.Cluster.Kubectl(ctx, "get", "--raw", path)
			if err != nil {
				return false, err
			}
			got, err = sumItems(out, "llm_saturation")
			if err != nil {
				return false, err
			}
			return math.Abs(got-want) <= 0.1*math.Max(want, 0.1), nil
		})
		if err != nil {
			t.Errorf("kubectl get --raw %s = %.3f, HPA status = %.3f: %v", path, got, want, err)
		} else {
			t.Logf("kubectl get --raw: llm_saturation %.3f; HPA status %.3f", got, want)
		}
	})
	a.waitFor("load end", loadLength+10*time.Second, closed(loadDone))
	peakA, endA := a.maxDesired(), a.samples[len(a.samples)-1].Desired
	t.Run("scale down after the load stops", func(t *testing.T) {
		stop := time.Now()
		smp := a.waitFor("1 replica", 2*time.Minute, func(smp stack.Sample) bool { return smp.Spec == 1 && smp.Ready == 1 })
		t.Logf("back to %d replica %s after the load stopped", smp.Spec, time.Since(stop).Round(time.Second))
	})
	if r := a.gw.Results(); len(r) > 0 {
		t.Logf("llm_saturation run: %s", loadgen.Summarize(r, time.Time{}))
	}

	t.Run("llm_demand_replicas reaches the same count", func(t *testing.T) {
		b := newScaleRun(t, s, "vllm-demand", stack.EmulatorImage, "llm_demand_replicas", autoscalingv2.AverageValueMetricType, "1")
		done := b.startLoad(ctx, testRPS, loadLength)
		b.waitFor("load end", loadLength+10*time.Second, closed(done))
		peakB, endB := b.maxDesired(), b.samples[len(b.samples)-1].Desired
		t.Logf("desired replicas, peak / at the end of the load: llm_saturation %d / %d, llm_demand_replicas %d / %d; demand run: %s",
			peakA, endA, peakB, endB, loadgen.Summarize(b.gw.Results(), time.Time{}))
		if d := peakA - peakB; d > 1 || d < -1 {
			t.Errorf("peak replicas differ by more than 1: llm_saturation %d, llm_demand_replicas %d", peakA, peakB)
		}
		if d := endA - endB; d > 1 || d < -1 {
			t.Errorf("replicas at the end of the load differ by more than 1: llm_saturation %d, llm_demand_replicas %d", endA, endB)
		}
	})
}

// sumItems sums the items of an ExternalMetricValueList JSON body.
func sumItems(body []byte, metric string) (float64, error) {
	var list struct {
		Items []struct {
			MetricName string `json:"metricName"`
			Value      string `json:"value"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return 0, err
	}
	if len(list.Items) == 0 {
		return 0, fmt.Errorf("no items in %s", body)
	}
	sum := 0.0
	for _, it := range list.Items {
		if it.MetricName != metric {
			return 0, fmt.Errorf("item for metric %q, want %q", it.MetricName, metric)
		}
		q, err := resource.ParseQuantity(it.Value)
		if err != nil {
			return 0, fmt.Errorf("item value %q: %w", it.Value, err)
		}
		sum += q.AsApproximateFloat64()
	}
	return sum, nil
}
