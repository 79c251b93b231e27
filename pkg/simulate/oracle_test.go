package simulate

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestOracleGolden checks the oracle on small traces worked out by hand on
// slowEngine (one request at a time, 100 ms steps; TTFT SLO 1 s, target 100 %,
// 10 s intervals).
//
// The "step" trace: one 1-second request per second in [0, 10) and [20, 30), two
// per second in [10, 20). One engine serves one 1-second request per second with
// a TTFT of 0.1 s; at two per second a single engine falls behind by 0.5 s per
// request (the third request waits 1.1 s), so interval 1 needs 2 replicas, and
// then each pod gets every other request: TTFT 0.1 s. At an instant, arrivals are
// routed before the schedule acts, and ties go round-robin. Without a cold start
// the second pod is created at t=10 after the 10 s request went to the first, so
// the first pod takes the whole seconds; at t=20 it takes the 20 s request, the
// second still serves the 19.5 s one; both hold one, the newer pod drains and is
// gone at 20.5 s: 30 + 10.5 s of GPU time. With a cold start the second pod is
// Ready at t=10 before the 10 s request, which the round-robin gives it: it takes
// the whole seconds, drains with the 20 s request and is gone at 21 s, having been
// created a cold start before t=10. The schedule is [1 2 1] either way.
func TestOracleGolden(t *testing.T) {
	step := append(append(every(0, sec(10), sec(1), 10), every(sec(10), sec(20), sec(0.5), 10)...), every(sec(20), sec(30), sec(1), 10)...)
	tests := []struct {
		name      string
		w         Workload
		coldStart time.Duration
		schedule  []int
		gpuSec    float64
		p99       float64
	}{
		{
			name: "steady: one replica", w: Workload{Requests: every(0, sec(30), sec(1), 10), Duration: sec(30)},
			schedule: []int{1, 1, 1}, gpuSec: 30, p99: 0.1,
		},
		{
			name: "step up and down, instant start", w: Workload{Requests: step, Duration: sec(30)},
			schedule: []int{1, 2, 1}, gpuSec: 40.5, p99: 0.1,
		},
		{
			name: "step up and down, 5 s cold start", w: Workload{Requests: step, Duration: sec(30)}, coldStart: sec(5),
			schedule: []int{1, 2, 1}, gpuSec: 46, p99: 0.1,
		},
		{
			// A cold start of 10 s (one interval) cannot fit in front of interval 1:
			// the first cold start's intervals (0 only) hold their largest count,
			// and the pod for interval 1 starts at t=0.
			name: "step up and down, 10 s cold start", w: Workload{Requests: step, Duration: sec(30)}, coldStart: sec(10),
			schedule: []int{1, 2, 1}, gpuSec: 51, p99: 0.1,
		},
		{
			// Three requests per second need three replicas.
			name: "three per second", w: Workload{Requests: every(0, sec(20), time.Second/3, 10), Duration: sec(20)},
			schedule: []int{3, 3}, gpuSec: 60, p99: 0.1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := mustRun(t, testConfig(tt.coldStart), tt.w, nil)
			or := result(t, rep, "oracle")
			if diff := cmp.Diff(tt.schedule, or.Schedule); diff != "" {
				t.Errorf("schedule (-want +got):\n%s", diff)
			}
			if got := or.GPUHours * 3600; abs(got-tt.gpuSec) > 0.01 {
				t.Errorf("GPU time = %.1fs, want %.1fs", got, tt.gpuSec)
			}
			if or.TTFTWithinSLO != 1 || or.TTFTSeconds.P99 == nil || abs(*or.TTFTSeconds.P99-tt.p99) > 1e-3 {
				t.Errorf("oracle TTFT within SLO %v, p99 %v; want 1 and %gs", or.TTFTWithinSLO, deref(or.TTFTSeconds.P99), tt.p99)
			}
			st := result(t, rep, "static")
			peak := 0
			for _, r := range tt.schedule {
				peak = max(peak, r)
			}
			if st.PeakReplicas != peak || abs(st.GPUHours*3600-float64(peak)*tt.w.Duration.Seconds()) > 0.01 {
				t.Errorf("static: peak %d, %.1f GPU-s; want %d pods throughout", st.PeakReplicas, st.GPUHours*3600, peak)
			}
		})
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

// TestOracleOneReplicaIsNotEnough checks the premise of the golden step trace: a
// single replica misses the SLO in the two-per-second interval.
func TestOracleOneReplicaIsNotEnough(t *testing.T) {
	step := every(0, sec(10), sec(0.5), 10)
	cfg := testConfig(0)
	cfg.MaxReplicas = 1
	rep := mustRun(t, cfg, Workload{Requests: step, Duration: sec(10)}, nil)
	or := result(t, rep, "oracle")
	if or.Infeasible != 1 || or.TTFTWithinSLO > 0.5 {
		t.Errorf("with one replica at most: infeasible intervals %d, TTFT within SLO %v; want 1 and under half", or.Infeasible, or.TTFTWithinSLO)
	}
	// Request j waits 0.5 j s: TTFT 0.1, 0.6, 1.1, ... s.
	if or.TTFTSeconds.P50 == nil || abs(*or.TTFTSeconds.P50-(0.5*9+0.1)) > 1e-3 {
		t.Errorf("p50 TTFT = %v, want %gs (the 10th of 20 requests waits 4.5 s)", or.TTFTSeconds.P50, 0.5*9+0.1)
	}
}

func TestShapeSchedule(t *testing.T) {
	tests := []struct {
		name      string
		raw       []int
		coldStart time.Duration
		want      []int
		initial   int
	}{
		{"no cold start: unchanged", []int{1, 3, 1, 2}, 0, []int{1, 3, 1, 2}, 1},
		{"a one-interval dip within the cold start is filled", []int{2, 1, 2, 1}, 10 * time.Second, []int{2, 2, 2, 1}, 2},
		{"a dip longer than the cold start stays", []int{1, 2, 1, 1, 2}, 10 * time.Second, []int{1, 2, 1, 1, 2}, 1},
		{"a dip is filled to the lower of its two sides", []int{1, 4, 1, 3, 1}, 10 * time.Second, []int{1, 4, 3, 3, 1}, 1},
		{"the first cold start holds its peak", []int{1, 1, 3, 1, 1, 1}, 25 * time.Second, []int{3, 3, 3, 1, 1, 1}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, initial := shapeSchedule(tt.raw, 10*time.Second, tt.coldStart)
			if diff := cmp.Diff(tt.want, got); diff != "" || initial != tt.initial {
				t.Errorf("shapeSchedule = %v, initial %d; want %v, %d (-want +got):\n%s", got, initial, tt.want, tt.initial, diff)
			}
		})
	}
}

func TestScheduleEvents(t *testing.T) {
	got := scheduleEvents([]int{2, 4, 4, 1, 3}, 10*time.Second, 15*time.Second)
	want := []scheduleEvent{
		{at: -5 * time.Second, create: 2},
		{at: 25 * time.Second, create: 2},
		{at: 30 * time.Second, drain: 3},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(scheduleEvent{})); diff != "" {
		t.Errorf("scheduleEvents (-want +got):\n%s", diff)
	}
}
