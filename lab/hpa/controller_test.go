package hpa

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
)

// step is one reconcile of a scripted timeline: at a virtual time (seconds), the
// External metric llm_demand_replicas (AverageValue 1, so the metric's proposal
// is ceil(value)) reads milli, or fails with err; want is the replicas after.
type step struct {
	at    float64
	milli int64
	err   error
	want  int32
}

// runSteps drives c from current replicas through steps: every pod exists and is
// Ready at once, so the spec replicas, status replicas and Ready pods agree.
func runSteps(t *testing.T, c *Controller, current int32, steps []step) {
	t.Helper()
	for _, s := range steps {
		m := &fakeMetrics{external: map[string][]int64{"llm_demand_replicas": {s.milli}}}
		if s.err != nil {
			m.externalErr = map[string]error{"llm_demand_replicas": s.err}
		}
		var ps []*corev1.Pod
		for i := range current {
			ps = append(ps, readyPod(fmt.Sprint("p", i)))
		}
		res := c.Sync(at(s.at), Scale{SpecReplicas: current, StatusReplicas: current}, ps, m)
		if res.DesiredReplicas != s.want {
			t.Fatalf("at %gs (metric %dm, from %d): replicas %d, want %d (result %+v)", s.at, s.milli, current, res.DesiredReplicas, s.want, res)
		}
		current = res.DesiredReplicas
	}
}

func condition(c *Controller, typ autoscalingv2.HorizontalPodAutoscalerConditionType) string {
	for _, cond := range c.HPA().Status.Conditions {
		if cond.Type == typ {
			return string(cond.Status) + "/" + cond.Reason
		}
	}
	return ""
}

func TestWithoutBehavior(t *testing.T) {
	t.Run("scale-up limit max(2 × current, 4)", func(t *testing.T) {
		c := mustNew(t, hpaYAML(1, 20, externalAverage))
		runSteps(t, c, 1, []step{{0, 10000, nil, 4}, {15, 10000, nil, 8}, {30, 10000, nil, 10}})
	})
	t.Run("maxReplicas caps before the rate limit", func(t *testing.T) {
		c := mustNew(t, hpaYAML(1, 3, externalAverage))
		runSteps(t, c, 1, []step{{0, 10000, nil, 3}})
		if got := condition(c, autoscalingv2.ScalingLimited); got != "True/TooManyReplicas" {
			t.Errorf("ScalingLimited = %s, want True/TooManyReplicas", got)
		}
	})
	t.Run("downscale stabilization: the highest recommendation of the last 5 minutes", func(t *testing.T) {
		c := mustNew(t, hpaYAML(1, 20, externalAverage))
		steps := []step{{0, 10000, nil, 10}}
		for s := 15.0; s <= 300; s += 15 {
			steps = append(steps, step{s, 2000, nil, 10})
		}
		steps = append(steps, step{315, 2000, nil, 2})
		runSteps(t, c, 10, steps)
	})
	t.Run("a lower recommendation inside the window does not hold a scale-up", func(t *testing.T) {
		c := mustNew(t, hpaYAML(1, 20, externalAverage))
		runSteps(t, c, 2, []step{{0, 2000, nil, 2}, {15, 4000, nil, 4}})
	})
}

func TestBehaviorPolicies(t *testing.T) {
	const b = `  behavior:
    scaleUp:
      stabilizationWindowSeconds: 0
      policies: [{type: Pods, value: 2, periodSeconds: 60}]
    scaleDown:
      stabilizationWindowSeconds: 0
      policies: [{type: Pods, value: 1, periodSeconds: 120}]
`
	t.Run("Pods policy: +2 per 60 s, counted from the period's start", func(t *testing.T) {
		c := mustNew(t, hpaYAML(1, 20, externalAverage+b))
		runSteps(t, c, 2, []step{{0, 10000, nil, 4}, {15, 10000, nil, 4}, {45, 10000, nil, 4}, {60, 10000, nil, 6}, {75, 10000, nil, 6}, {120, 10000, nil, 8}})
		if got := condition(c, autoscalingv2.ScalingLimited); got != "True/ScaleUpLimit" {
			t.Errorf("ScalingLimited = %s, want True/ScaleUpLimit", got)
		}
	})
	t.Run("Pods policy: -1 per 120 s", func(t *testing.T) {
		c := mustNew(t, hpaYAML(1, 20, externalAverage+b))
		runSteps(t, c, 5, []step{{0, 1000, nil, 4}, {15, 1000, nil, 4}, {119, 1000, nil, 4}, {120, 1000, nil, 3}, {240, 1000, nil, 2}})
		if got := condition(c, autoscalingv2.ScalingLimited); got != "True/ScaleDownLimit" {
			t.Errorf("ScalingLimited = %s, want True/ScaleDownLimit", got)
		}
	})
	t.Run("a scale-down in the period gives a scale-up more room", func(t *testing.T) {
		c := mustNew(t, hpaYAML(1, 20, externalAverage+b))
		// -1 at 0 (5 -> 4); at 30 the scale-up period started at 4 + 1 = 5: limit 7.
		runSteps(t, c, 5, []step{{0, 1000, nil, 4}, {30, 10000, nil, 7}})
	})
	t.Run("Percent policy rounds a scale-up up and a scale-down down", func(t *testing.T) {
		c := mustNew(t, hpaYAML(1, 100, externalAverage+`  behavior:
    scaleUp: {policies: [{type: Percent, value: 50, periodSeconds: 15}]}
    scaleDown: {stabilizationWindowSeconds: 0, policies: [{type: Percent, value: 50, periodSeconds: 15}]}
`))
		// up: ceil(3 × 1.5) = 5, ceil(5 × 1.5) = 8; down: int(8 × 0.5) = 4, int(4 × 0.5) = 2
		runSteps(t, c, 3, []step{{0, 50000, nil, 5}, {15, 50000, nil, 8}, {30, 1000, nil, 4}, {45, 1000, nil, 2}})
	})
	for _, tc := range []struct {
		policy string
		want   int32
	}{{"Max", 20}, {"Min", 14}} {
		t.Run("selectPolicy "+tc.policy, func(t *testing.T) {
			c := mustNew(t, hpaYAML(1, 100, externalAverage+`  behavior:
    scaleUp:
      selectPolicy: `+tc.policy+`
      policies: [{type: Pods, value: 4, periodSeconds: 60}, {type: Percent, value: 100, periodSeconds: 60}]
`))
			runSteps(t, c, 10, []step{{0, 50000, nil, tc.want}})
		})
	}
	t.Run("selectPolicy Disabled on scale-down", func(t *testing.T) {
		c := mustNew(t, hpaYAML(1, 100, externalAverage+`  behavior:
    scaleDown: {selectPolicy: Disabled, stabilizationWindowSeconds: 0}
`))
		runSteps(t, c, 5, []step{{0, 1000, nil, 5}, {15, 1000, nil, 5}, {30, 9000, nil, 9}})
	})
	t.Run("selectPolicy Min on scale-down keeps the smallest change", func(t *testing.T) {
		c := mustNew(t, hpaYAML(1, 100, externalAverage+`  behavior:
    scaleDown:
      selectPolicy: Min
      stabilizationWindowSeconds: 0
      policies: [{type: Pods, value: 1, periodSeconds: 60}, {type: Percent, value: 50, periodSeconds: 60}]
`))
		runSteps(t, c, 10, []step{{0, 1000, nil, 9}})
	})
}

func TestBehaviorStabilization(t *testing.T) {
	t.Run("scale-up window: the lowest recommendation of the last 60 s", func(t *testing.T) {
		c := mustNew(t, hpaYAML(1, 100, externalAverage+`  behavior:
    scaleUp: {stabilizationWindowSeconds: 60}
`))
		// The initial recommendation (2 at t=0) holds the scale-up until it leaves the window.
		runSteps(t, c, 2, []step{{0, 5000, nil, 2}, {15, 5000, nil, 2}, {45, 5000, nil, 2}})
		if got := condition(c, autoscalingv2.AbleToScale); got != "True/ScaleUpStabilized" {
			t.Errorf("AbleToScale = %s, want True/ScaleUpStabilized", got)
		}
		runSteps(t, c, 2, []step{{60, 5000, nil, 5}})
	})
	t.Run("scale-up window: a dip inside the window caps the scale-up", func(t *testing.T) {
		c := mustNew(t, hpaYAML(1, 100, externalAverage+`  behavior:
    scaleUp: {stabilizationWindowSeconds: 30}
`))
		// At 61 the dip (3 at 31) has left the window (After is strict); the default
		// scale-up policies then allow max(3 + 4, 3 × 2) = 7.
		runSteps(t, c, 2, []step{{0, 2000, nil, 2}, {31, 3000, nil, 3}, {45, 8000, nil, 3}, {61, 8000, nil, 7}, {76, 8000, nil, 8}})
	})
	t.Run("scale-down window from behavior", func(t *testing.T) {
		c := mustNew(t, hpaYAML(1, 100, externalAverage+`  behavior:
    scaleDown: {stabilizationWindowSeconds: 60}
`))
		runSteps(t, c, 6, []step{{0, 6000, nil, 6}, {15, 1000, nil, 6}, {45, 1000, nil, 6}, {60, 1000, nil, 1}})
		if got := condition(c, autoscalingv2.AbleToScale); got != "True/SucceededRescale" {
			t.Errorf("AbleToScale = %s, want True/SucceededRescale", got)
		}
	})
	t.Run("scale-down window defaults to the controller's 5 minutes", func(t *testing.T) {
		c := mustNew(t, hpaYAML(1, 100, externalAverage+`  behavior:
    scaleUp: {stabilizationWindowSeconds: 0}
`))
		// With behavior the window test is strict (After): the 6 at t=0 is out at 300,
		// where the no-behavior rule (Before) still counts it.
		runSteps(t, c, 6, []step{{0, 6000, nil, 6}, {15, 1000, nil, 6}, {285, 1000, nil, 6}, {300, 1000, nil, 1}})
	})
	t.Run("stabilized scale-down reports ScaleDownStabilized", func(t *testing.T) {
		c := mustNew(t, hpaYAML(1, 100, externalAverage+`  behavior:
    scaleDown: {stabilizationWindowSeconds: 60}
`))
		runSteps(t, c, 6, []step{{0, 6000, nil, 6}, {15, 1000, nil, 6}})
		if got := condition(c, autoscalingv2.AbleToScale); got != "True/ScaleDownStabilized" {
			t.Errorf("AbleToScale = %s, want True/ScaleDownStabilized", got)
		}
	})
}

func TestMinMaxAndErrors(t *testing.T) {
	failing := errors.New("503: none has fresh data")
	t.Run("above maxReplicas: clamped without reading metrics", func(t *testing.T) {
		c := mustNew(t, hpaYAML(1, 10, externalAverage))
		res := c.Sync(t0, Scale{SpecReplicas: 12, StatusReplicas: 12}, nil, &fakeMetrics{})
		want := Result{DesiredReplicas: 10, Rescale: true, Reason: "Current number of replicas above Spec.MaxReplicas"}
		if diff := cmp.Diff(want, res); diff != "" {
			t.Errorf("Sync (-want +got):\n%s", diff)
		}
	})
	t.Run("below minReplicas", func(t *testing.T) {
		c := mustNew(t, hpaYAML(3, 10, externalAverage))
		res := c.Sync(t0, Scale{SpecReplicas: 1, StatusReplicas: 1}, pods(readyPod("a")), &fakeMetrics{})
		if res.DesiredReplicas != 3 || res.Reason != "Current number of replicas below Spec.MinReplicas" {
			t.Errorf("Sync = %+v, want 3 replicas for minReplicas", res)
		}
	})
	t.Run("the metric proposal is clamped to minReplicas", func(t *testing.T) {
		c := mustNew(t, hpaYAML(2, 10, externalAverage+`  behavior:
    scaleDown: {stabilizationWindowSeconds: 0}
`))
		runSteps(t, c, 5, []step{{0, 100, nil, 2}})
		if got := condition(c, autoscalingv2.ScalingLimited); got != "True/TooFewReplicas" {
			t.Errorf("ScalingLimited = %s, want True/TooFewReplicas", got)
		}
	})
	t.Run("a failing metric holds the replicas", func(t *testing.T) {
		c := mustNew(t, hpaYAML(1, 10, externalAverage+`  behavior:
    scaleDown: {stabilizationWindowSeconds: 0}
`))
		runSteps(t, c, 5, []step{{0, 0, failing, 5}, {15, 0, failing, 5}, {30, 1000, nil, 1}})
	})
	const two = `  metrics:
  - type: External
    external:
      metric: {name: a}
      target: {type: AverageValue, averageValue: "1"}
  - type: External
    external:
      metric: {name: b}
      target: {type: AverageValue, averageValue: "1"}
  behavior:
    scaleDown: {stabilizationWindowSeconds: 0}
`
	for _, tc := range []struct {
		name      string
		b         int64
		want      int32
		rescale   bool
		proposal  int32
		condition string
	}{
		{"one failing metric does not stop a scale-up on the other", 8000, 8, true, 8, "True/ValidMetricFound"},
		{"one failing metric stops a scale-down on the other", 1000, 4, false, -1, "False/FailedGetExternalMetric"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustNew(t, hpaYAML(1, 10, two))
			m := &fakeMetrics{external: map[string][]int64{"b": {tc.b}}, externalErr: map[string]error{"a": failing}}
			res := c.Sync(t0, Scale{SpecReplicas: 4, StatusReplicas: 4}, pods(readyPod("a"), readyPod("b"), readyPod("c"), readyPod("d")), m)
			if res.DesiredReplicas != tc.want || res.Rescale != tc.rescale || res.MetricReplicas != tc.proposal || res.Err == nil {
				t.Errorf("Sync = %+v, want %d replicas, rescale %v, proposal %d and the error", res, tc.want, tc.rescale, tc.proposal)
			}
			if !strings.Contains(res.Err.Error(), "1 invalid out of 2") {
				t.Errorf("error %q does not count the invalid metrics", res.Err)
			}
			if got := condition(c, autoscalingv2.ScalingActive); got != tc.condition {
				t.Errorf("ScalingActive = %s, want %s", got, tc.condition)
			}
		})
	}
}

func TestScaleToZero(t *testing.T) {
	const fast = `  behavior:
    scaleDown: {stabilizationWindowSeconds: 0}
`
	t.Run("AverageValue: to zero and back at ceil(sum / target)", func(t *testing.T) {
		c := mustNew(t, hpaYAML(0, 10, externalAverage+fast))
		runSteps(t, c, 2, []step{{0, 0, nil, 0}})
		if got := condition(c, autoscalingv2.ScaledToZero); got != "True/ScaledToZero" {
			t.Fatalf("ScaledToZero = %s, want True/ScaledToZero", got)
		}
		runSteps(t, c, 0, []step{{15, 0, nil, 0}, {30, 2500, nil, 3}})
		if got := condition(c, autoscalingv2.ScaledToZero); got != "False/NotScaledToZero" {
			t.Errorf("ScaledToZero = %s, want False/NotScaledToZero", got)
		}
	})
	t.Run("Value: from zero at ceil(sum / target), ignoring tolerance and Ready pods", func(t *testing.T) {
		c := mustNew(t, hpaYAML(0, 10, strings.Replace(externalValue, "llm_saturation", "llm_demand_replicas", 1)+fast))
		runSteps(t, c, 1, []step{{0, 0, nil, 0}, {15, 1050, nil, 2}})
	})
	t.Run("a target scaled to zero by hand stays there", func(t *testing.T) {
		c := mustNew(t, hpaYAML(0, 10, externalAverage))
		res := c.Sync(t0, Scale{}, nil, &fakeMetrics{external: map[string][]int64{"llm_demand_replicas": {5000}}})
		if res.DesiredReplicas != 0 || res.Rescale {
			t.Errorf("Sync = %+v, want to stay at 0", res)
		}
		if got := condition(c, autoscalingv2.ScalingActive); got != "False/ScalingDisabled" {
			t.Errorf("ScalingActive = %s, want False/ScalingDisabled", got)
		}
	})
	t.Run("without the feature gate, minReplicas 0 is invalid", func(t *testing.T) {
		opts := DefaultOptions()
		opts.ScaleToZero = false
		if _, err := New(mustParse(t, hpaYAML(0, 10, externalAverage)), opts); err == nil || !strings.Contains(err.Error(), "minReplicas") {
			t.Errorf("New error = %v, want a minReplicas error", err)
		}
	})
}

func TestStatus(t *testing.T) {
	c := mustNew(t, hpaYAML(1, 10, externalAverage))
	runSteps(t, c, 1, []step{{0, 3000, nil, 3}})
	st := c.HPA().Status
	if st.CurrentReplicas != 1 || st.DesiredReplicas != 3 || st.LastScaleTime == nil || !st.LastScaleTime.Time.Equal(t0) {
		t.Errorf("status = %+v, want current 1, desired 3, last scale at t0", st)
	}
	if len(st.CurrentMetrics) != 1 || st.CurrentMetrics[0].External.Current.AverageValue.String() != "3" {
		t.Errorf("current metrics = %+v, want an average value of 3 per pod", st.CurrentMetrics)
	}
	// A condition keeps its transition time while its status does not change.
	runSteps(t, c, 3, []step{{15, 3000, nil, 3}})
	for _, cond := range c.HPA().Status.Conditions {
		if cond.Type == autoscalingv2.ScalingActive && !cond.LastTransitionTime.Time.Equal(t0) {
			t.Errorf("ScalingActive moved to %v without changing status", cond.LastTransitionTime)
		}
	}
}
