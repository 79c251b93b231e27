package emulator

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// driveClock steps the fake clock whenever the runner waits on it, until stop
// is closed.
func driveClock(fc *clocktesting.FakeClock, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		if fc.HasWaiters() {
			fc.Step(time.Millisecond)
		} else {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

func TestRunnerOnFakeClock(t *testing.T) {
	fc := clocktesting.NewFakeClock(t0)
	cfg := tinyConfig()
	var mu sync.Mutex
	var steps int
	r, err := NewRunner(cfg, fc, func(*StepResult) { mu.Lock(); steps++; mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()

	s, err := r.Submit(Request{ID: "a", PromptTokens: 10, MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Submit(Request{ID: "a", PromptTokens: 10, MaxTokens: 5}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("duplicate Submit() = %v, want ErrInvalidRequest", err)
	}
	stop := make(chan struct{})
	go driveClock(fc, stop)
	deadline := time.After(10 * time.Second)
	for {
		tokens, reason, ok := s.Progress()
		if ok {
			if tokens != 5 || reason != FinishLength {
				t.Errorf("finished with %d tokens, %q; want 5, length", tokens, reason)
			}
			break
		}
		select {
		case <-s.Changed():
		case <-deadline:
			t.Fatal("request did not finish")
		}
	}
	close(stop)
	// Prefill step plus 4 decode steps, in fake time.
	want := cfg.StepTime.Duration(1, 10, 0) + 4*cfg.StepTime.Duration(1, 0, 0)
	if got := fc.Since(t0); got < want || got > want+5*time.Millisecond {
		t.Errorf("fake time elapsed %v, want ≈ %v", got, want)
	}
	mu.Lock()
	if steps != 5 {
		t.Errorf("onStep called %d times, want 5", steps)
	}
	mu.Unlock()
	cancel()
	<-done
}

func TestRunnerFreezeAndAbort(t *testing.T) {
	fc := clocktesting.NewFakeClock(t0)
	r, err := NewRunner(tinyConfig(), fc, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)

	r.SetFrozen(true)
	s, err := r.Submit(Request{ID: "a", PromptTokens: 10, MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if fc.HasWaiters() {
		t.Error("a frozen engine started a step")
	}
	if snap := r.Snapshot(); snap.Waiting != 1 || snap.Running != 0 {
		t.Errorf("frozen: %+v, want the request queued", snap)
	}
	if !r.Abort("a") {
		t.Error("Abort(a) = false")
	}
	if _, reason, done := s.Progress(); !done || reason != FinishAbort {
		t.Errorf("after abort: done %v reason %q", done, reason)
	}
	if snap := r.Snapshot(); snap.Waiting != 0 || snap.Finished[2] != 1 {
		t.Errorf("after abort: %+v", snap)
	}
	r.SetFrozen(false)
	if r.Frozen() {
		t.Error("still frozen")
	}
}
