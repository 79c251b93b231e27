package simulate

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func newTestFleet(t *testing.T, reqs []Request, coldStart time.Duration) (*fleet, *fullRecorder) {
	t.Helper()
	rec := newFullRecorder(len(reqs))
	return newFleet(slowEngine(), ColdStart{Mean: coldStart}, epoch(), reqs, rec, time.Hour), rec
}

// ttfts returns the TTFT of every request, -1 for none.
func ttfts(rec *fullRecorder, reqs []Request) []time.Duration {
	out := make([]time.Duration, len(reqs))
	for i := range reqs {
		out[i] = -1
		if rec.first[i] != unset {
			out[i] = rec.first[i] - reqs[i].At
		}
	}
	return out
}

func TestGatewayHoldsWhileNoPodIsReady(t *testing.T) {
	reqs := []Request{{At: sec(1), PromptTokens: 10, OutputTokens: 10}, {At: sec(2), PromptTokens: 10, OutputTokens: 10}}
	f, rec := newTestFleet(t, reqs, sec(5))
	if err := f.setReplicas(1); err != nil {
		t.Fatal(err)
	}
	f.advance(sec(4))
	if _, held, _ := f.load(); held != 2 {
		t.Fatalf("held = %d at 4 s, want both requests held while the pod starts", held)
	}
	f.advance(sec(10))
	// Ready at 5 s: the first request's first token at 5.1 s, the second waits for
	// the first to finish (6.0 s): first token at 6.1 s.
	want := []time.Duration{sec(4.1), sec(4.1)}
	if diff := cmp.Diff(want, ttfts(rec, reqs)); diff != "" {
		t.Errorf("TTFTs (-want +got):\n%s", diff)
	}
	if f.done != 2 || rec.finish[1] != sec(7) {
		t.Errorf("done %d, second finished at %v; want 2 and 7 s", f.done, rec.finish[1])
	}
}

func TestLeastOutstandingRouting(t *testing.T) {
	reqs := []Request{{At: 0, PromptTokens: 10, OutputTokens: 10}, {At: 0, PromptTokens: 10, OutputTokens: 10}, {At: 0, PromptTokens: 10, OutputTokens: 10}}
	f, _ := newTestFleet(t, reqs, 0)
	if err := f.addReady(2); err != nil {
		t.Fatal(err)
	}
	f.advance(0)
	got := []int{f.pods[0].outstanding, f.pods[1].outstanding}
	if diff := cmp.Diff([]int{2, 1}, got); diff != "" {
		t.Errorf("outstanding per pod (-want +got):\n%s", diff)
	}
}

func TestDrainFinishesInFlightWork(t *testing.T) {
	reqs := every(0, sec(3), sec(1), 10) // 0, 1, 2 s, one second each
	f, rec := newTestFleet(t, reqs, 0)
	if err := f.addReady(1); err != nil {
		t.Fatal(err)
	}
	f.advance(sec(1.5))
	if err := f.setReplicas(0); err != nil { // the pod drains the 1 s request
		t.Fatal(err)
	}
	f.advance(sec(10))
	if rec.finish[1] != sec(2) || rec.first[2] != unset || f.held[0] != 2 {
		t.Errorf("finished %v, third request's first token %v, held %v: want the in-flight request done at 2 s and the next one held", rec.finish[1], rec.first[2], f.held)
	}
	if len(f.pods) != 0 || f.gpuTime() != sec(2) {
		t.Errorf("pods %d, GPU time %v; want the pod gone at 2 s", len(f.pods), f.gpuTime())
	}
	if diff := cmp.Diff([]scaleChange{{at: sec(1.5), from: 1, to: 0}}, f.changes, cmp.AllowUnexported(scaleChange{})); diff != "" {
		t.Errorf("scale changes (-want +got):\n%s", diff)
	}
}

// TestScaleDownOrder: a ReplicaSet deletes starting pods first (newest first),
// then the most recently Ready.
func TestScaleDownOrder(t *testing.T) {
	f, _ := newTestFleet(t, nil, sec(10))
	if err := f.addReady(2); err != nil { // pod-0, pod-1 Ready at 0
		t.Fatal(err)
	}
	f.advance(sec(1))
	f.setReplicas(3) // pod-2 starting, Ready at 11
	f.advance(sec(20))
	f.setReplicas(5) // pod-3, pod-4 starting
	f.advance(sec(21))
	var gone []string
	for n := 4; n >= 1; n-- {
		before := map[string]bool{}
		for _, p := range f.pods {
			if p.phase != phaseDraining {
				before[p.name] = true
			}
		}
		f.setReplicas(n)
		for _, p := range f.pods {
			if p.phase != phaseDraining {
				delete(before, p.name)
			}
		}
		for name := range before {
			gone = append(gone, name)
		}
	}
	if diff := cmp.Diff([]string{"pod-4", "pod-3", "pod-2", "pod-1"}, gone); diff != "" {
		t.Errorf("deletion order (-want +got):\n%s", diff)
	}
}

func TestPodObjectsAndBusyTime(t *testing.T) {
	reqs := []Request{{At: 0, PromptTokens: 10, OutputTokens: 10}}
	f, _ := newTestFleet(t, reqs, sec(30))
	if err := f.addReady(1); err != nil {
		t.Fatal(err)
	}
	f.setReplicas(2)
	f.advance(sec(0.55))
	if got := f.pods[0].busyAt(sec(0.55)); got != sec(0.55) {
		t.Errorf("busy at 0.55 s = %v, want 0.55 s (one step in flight counts up to now)", got)
	}
	f.advance(sec(4))
	if got := f.pods[0].busyAt(sec(4)); got != sec(1) {
		t.Errorf("busy at 4 s = %v, want 1 s", got)
	}
	f.deletePod(f.pods[0])
	objs := f.podObjects()
	ready := func(i int) corev1.ConditionStatus { return objs[i].Status.Conditions[0].Status }
	if len(objs) != 2 || ready(0) != corev1.ConditionFalse || objs[0].DeletionTimestamp == nil ||
		ready(1) != corev1.ConditionFalse || objs[1].DeletionTimestamp != nil || objs[1].Status.Phase != corev1.PodRunning {
		t.Errorf("pod objects = %+v, want a terminating pod and a Running, not Ready starting pod", objs)
	}
	if q := objs[1].Spec.Containers[0].Resources.Requests[GPUResource]; q.MilliValue() != 1000 {
		t.Errorf("GPU request = %s, want 1", q.String())
	}
}

// TestClientsAbandon: on slowEngine (one request at a time, 1 s each for 10
// output tokens), five requests at once with clients that give up after 2.5 s
// without a first token: the first three get theirs (0.1, 1.1 and 2.1 s), the
// last two are aborted in the engine (freeing it) and never served; requests
// held at the gateway give up too.
func TestClientsAbandon(t *testing.T) {
	reqs := burst(5)
	f, rec := newTestFleet(t, reqs, 0)
	f.abandonAfter = 2500 * time.Millisecond
	if err := f.addReady(1); err != nil {
		t.Fatal(err)
	}
	f.advance(sec(10))
	got := ttfts(rec, reqs)
	want := []time.Duration{sec(0.1), sec(1.1), sec(2.1), -1, -1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("TTFTs (-want +got):\n%s", diff)
	}
	if abandonedCount(rec) != 2 || f.done != 5 {
		t.Errorf("abandoned %d, done %d; want 2 and 5", abandonedCount(rec), f.done)
	}
	if s := f.pods[0].engine.Snapshot(); s.Finished[2] != 2 {
		t.Errorf("the engine counted %d aborts, want 2", s.Finished[2])
	}

	held := []Request{{At: 0, PromptTokens: 10, OutputTokens: 10}}
	g, grec := newTestFleet(t, held, sec(30))
	g.abandonAfter = sec(5)
	if err := g.setReplicas(1); err != nil {
		t.Fatal(err)
	}
	g.advance(sec(40))
	if abandonedCount(grec) != 1 || grec.first[0] != unset {
		t.Errorf("a request held 30 s at the gateway: abandoned %d, first token %v; want abandoned", abandonedCount(grec), grec.first[0])
	}
}

// abandonedCount counts the requests r saw abandoned.
func abandonedCount(r *fullRecorder) int {
	n := 0
	for i := range r.gone {
		if r.abandonedAt(i) {
			n++
		}
	}
	return n
}
