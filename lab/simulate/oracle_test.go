package simulate

import (
	"fmt"
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
			got, initial := shapeSchedule(tt.raw, 10*time.Second, tt.coldStart, tt.coldStart)
			if diff := cmp.Diff(tt.want, got); diff != "" || initial != tt.initial {
				t.Errorf("shapeSchedule = %v, initial %d; want %v, %d (-want +got):\n%s", got, initial, tt.want, tt.initial, diff)
			}
		})
	}
}

func TestScheduleEvents(t *testing.T) {
	got := scheduleEvents([]int{2, 4, 4, 1, 3}, 10*time.Second, ColdStart{Mean: 15 * time.Second})
	want := []scheduleEvent{
		{at: 0, create: 1, readyAt: 10 * time.Second},
		{at: 0, create: 1, readyAt: 10 * time.Second},
		{at: 25 * time.Second, create: 1, readyAt: 40 * time.Second},
		{at: 25 * time.Second, create: 1, readyAt: 40 * time.Second},
		{at: 30 * time.Second, drain: 3},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(scheduleEvent{})); diff != "" {
		t.Errorf("scheduleEvents (-want +got):\n%s", diff)
	}
	// Drawn cold starts: each pod is created its own draw ahead of the rise.
	cs := ColdStart{Mean: 15 * time.Second, Spread: 0.5, ProbePeriod: 2 * time.Second, Seed: 3}
	for i, e := range scheduleEvents([]int{2, 4, 4, 1, 3}, 10*time.Second, cs) {
		if e.create > 0 && e.at != max(0, e.readyAt-cs.draw(i, 0)) && e.at != max(0, e.readyAt-cs.draw(i, 2)) {
			t.Errorf("event %d %+v: not its draw ahead of its rise", i, e)
		}
	}
}

// TestColdStartDraws: the draws have the configured mean, stay within
// [start − spread, start + spread] rounded up to a probe, depend only on the
// seed and the pod's rank, and node provisioning adds to the pods beyond the
// warm nodes.
func TestColdStartDraws(t *testing.T) {
	cs := ColdStart{Mean: 120 * time.Second, Spread: 0.25, ProbePeriod: 10 * time.Second, Seed: 1}
	var sum time.Duration
	const n = 4000
	for k := range n {
		d := cs.draw(k, 0)
		if d != cs.draw(k, 0) {
			t.Fatal("a draw is not a function of the seed and the rank")
		}
		if lo := time.Duration(float64(115*time.Second) * 0.75); d < lo || d > cs.Max() {
			t.Fatalf("draw %d = %v, outside [%v, %v]", k, d, lo, cs.Max())
		}
		sum += d
	}
	if mean := sum / n; mean < 118*time.Second || mean > 122*time.Second {
		t.Errorf("mean cold start %v, want 120s within 2s", mean)
	}
	cs.NodeProvisioning, cs.WarmNodes = time.Minute, 3
	if d, e := cs.draw(7, 2), cs.draw(7, 3); e-d != time.Minute {
		t.Errorf("the 4th pod on 3 warm nodes waits %v more than the 3rd, want the 1m provisioning", e-d)
	}
	if err := (ColdStart{Mean: time.Second, Spread: 1}).Validate(); err == nil {
		t.Error("a spread of 1 was accepted")
	}
}

// burst returns n requests of 10 prompt and 10 output tokens (1 s each on
// slowEngine) arriving together at t=0.
func burst(n int) []Request {
	var r []Request
	for range n {
		r = append(r, Request{At: 0, PromptTokens: 10, OutputTokens: 10})
	}
	return r
}

// TestOracleGoldenSLOTarget checks the per-interval target on a burst worked out
// by hand: 10 one-second requests at t=0 on slowEngine (one request at a time,
// TTFT SLO 1 s). With r replicas the least-outstanding gateway gives each pod
// at most ceil(10/r) of them; a pod's first request has a TTFT of 0.1 s, its
// second 1.1 s (a miss). Target 0.8 allows floor(0.2 × 10) = 2 misses: 8 replicas
// (2 misses) pass and 7 (3 misses) do not. Target 0.5 allows 5: 5 replicas (each
// pod 2 requests, 5 misses) pass, 4 (pods of 3, 3, 2, 2: 6 misses) do not. The
// schedule is one 10 s interval, so GPU time is replicas × 10 s.
func TestOracleGoldenSLOTarget(t *testing.T) {
	tests := []struct {
		target   float64
		replicas int
		within   float64
		p50, p95 float64
	}{
		{target: 1, replicas: 10, within: 1, p50: 0.1, p95: 0.1},
		{target: 0.8, replicas: 8, within: 0.8, p50: 0.1, p95: 1.1},
		{target: 0.5, replicas: 5, within: 0.5, p50: 0.1, p95: 1.1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.target), func(t *testing.T) {
			cfg := testConfig(0)
			cfg.SLOTarget = tt.target
			rep := mustRun(t, cfg, Workload{Requests: burst(10), Duration: sec(10)}, nil)
			or := result(t, rep, "oracle")
			if diff := cmp.Diff([]int{tt.replicas}, or.Schedule); diff != "" {
				t.Errorf("schedule (-want +got):\n%s", diff)
			}
			if got := or.GPUHours * 3600; abs(got-float64(10*tt.replicas)) > 0.01 {
				t.Errorf("GPU time = %.2fs, want %d replicas × 10 s", got, tt.replicas)
			}
			if abs(or.TTFTWithinSLO-tt.within) > 1e-9 || abs(deref(or.TTFTSeconds.P50).(float64)-tt.p50) > 1e-3 ||
				abs(deref(or.TTFTSeconds.P95).(float64)-tt.p95) > 1e-3 {
				t.Errorf("TTFT within SLO %v, p50 %v, p95 %v; want %v, %gs, %gs", or.TTFTWithinSLO, deref(or.TTFTSeconds.P50),
					deref(or.TTFTSeconds.P95), tt.within, tt.p50, tt.p95)
			}
		})
	}
}

// TestOracleGoldenUnattainable: a request the engine refuses (prompt + output
// above maxModelLen 4096) cannot meet the SLO on any fleet; the oracle leaves it
// out of its target instead of calling the interval infeasible, the report
// counts it, and it is a miss: the burst of 10 still gets 10 replicas and 10 of
// 11 requests meet the SLO.
func TestOracleGoldenUnattainable(t *testing.T) {
	reqs := append(burst(10), Request{At: sec(1), PromptTokens: 5000, OutputTokens: 10})
	rep := mustRun(t, testConfig(0), Workload{Requests: reqs, Duration: sec(10)}, nil)
	or := result(t, rep, "oracle")
	if rep.Workload.Unattainable != 1 || or.Infeasible != 0 || !cmp.Equal(or.Schedule, []int{10}) || or.Rejected != 1 {
		t.Errorf("unattainable %d, infeasible %d, schedule %v, rejected %d; want 1, 0, [10], 1",
			rep.Workload.Unattainable, or.Infeasible, or.Schedule, or.Rejected)
	}
	if abs(or.TTFTWithinSLO-10.0/11) > 1e-4 {
		t.Errorf("TTFT within SLO = %v, want 10/11", or.TTFTWithinSLO)
	}
}

// TestOracleGoldenFillsADip: a dip shorter than the cold start is kept, worked
// out by hand. On slowEngine with 0.9 s requests (9 output tokens), two per
// second (at whole and half seconds) need 2 replicas and one per second (at
// half seconds) 1; so intervals of 10 s at 2, 1, 2, 1 per second give the raw
// schedule [2 1 2 1]. With a 10 s cold start (one interval) the dip in interval 1
// is filled: [2 2 2 1]. Both pods are Ready from the start (the first cold
// start's count), no request waits (TTFT 0.1 s), and at t=30 the drained pod is
// idle (the 29.5 s request holds the other until 30.4 s): it is gone at once. GPU
// time: 40 s + 30 s.
func TestOracleGoldenFillsADip(t *testing.T) {
	var reqs []Request
	for k, perSec := range []int{2, 1, 2, 1} {
		start := sec(float64(10 * k))
		if perSec == 2 {
			reqs = append(reqs, every(start, start+sec(10), sec(0.5), 9)...)
		} else {
			reqs = append(reqs, every(start+sec(0.5), start+sec(10), sec(1), 9)...)
		}
	}
	w := Workload{Requests: reqs, Duration: sec(40)}
	rep := mustRun(t, testConfig(sec(10)), w, nil)
	or := result(t, rep, "oracle")
	if diff := cmp.Diff([]int{2, 2, 2, 1}, or.Schedule); diff != "" {
		t.Errorf("schedule (-want +got):\n%s", diff)
	}
	if got := or.GPUHours * 3600; abs(got-70) > 0.01 {
		t.Errorf("GPU time = %.2fs, want 70 s", got)
	}
	if or.TTFTWithinSLO != 1 || or.TTFTSeconds.P99 == nil || abs(*or.TTFTSeconds.P99-0.1) > 1e-3 {
		t.Errorf("TTFT within SLO %v, p99 %v; want 1 and 0.1 s", or.TTFTWithinSLO, deref(or.TTFTSeconds.P99))
	}
	// Without the cold start the dip is not filled.
	rep = mustRun(t, testConfig(0), w, nil)
	if got := result(t, rep, "oracle").Schedule; !cmp.Equal(got, []int{2, 1, 2, 1}) {
		t.Errorf("schedule without a cold start = %v, want the raw [2 1 2 1]", got)
	}
}

// TestOracleGoldenMinReplicas: the oracle never goes below MinReplicas: one
// request per second needs one replica, and with MinReplicas 2 it gets 2 in
// every interval (60 GPU-seconds over 30 s).
func TestOracleGoldenMinReplicas(t *testing.T) {
	cfg := testConfig(0)
	cfg.MinReplicas = 2
	rep := mustRun(t, cfg, Workload{Requests: every(0, sec(30), sec(1), 10), Duration: sec(30)}, nil)
	or := result(t, rep, "oracle")
	if !cmp.Equal(or.Schedule, []int{2, 2, 2}) || abs(or.GPUHours*3600-60) > 0.01 {
		t.Errorf("schedule %v, GPU time %.2fs; want [2 2 2] and 60 s", or.Schedule, or.GPUHours*3600)
	}
}
