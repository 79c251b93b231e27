package emulator

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestCloneEvolvesLikeTheOriginal fills an engine past its KV cache (so it holds
// waiting, running and preempted requests), clones it, and steps both with the
// same further arrivals: every step result and snapshot must agree. Then the clone
// alone takes more work, which must not show in the original.
func TestCloneEvolvesLikeTheOriginal(t *testing.T) {
	cfg := shortConfig()
	cfg.NumBlocks, cfg.MaxModelLen = 2000, 8192
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	arrivals := poisson(8, 20*time.Second, 2000, 400, 7)
	add := func(e *Engine, from, to time.Duration) {
		for _, a := range arrivals {
			if a.At >= from && a.At < to {
				if err := e.Add(a.Request, now); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	var last time.Duration
	for now.Sub(t0) < 10*time.Second {
		add(e, last, now.Sub(t0)+time.Nanosecond)
		last = now.Sub(t0) + time.Nanosecond
		if r := e.Step(now); r.Duration > 0 {
			now = r.End
		} else {
			now = now.Add(10 * time.Millisecond)
		}
	}
	if s := e.Snapshot(); s.Waiting == 0 || s.Running == 0 || s.Preemptions == 0 {
		t.Fatalf("want a loaded engine with preemptions to clone, got %+v", s)
	}
	c := e.Clone()
	if diff := cmp.Diff(e.Snapshot(), c.Snapshot()); diff != "" {
		t.Fatalf("clone snapshot (-orig +clone):\n%s", diff)
	}
	start := now
	for now.Sub(t0) < 20*time.Second {
		add(e, last, now.Sub(t0)+time.Nanosecond)
		add(c, last, now.Sub(t0)+time.Nanosecond)
		last = now.Sub(t0) + time.Nanosecond
		r1 := *e.Step(now)
		r2 := *c.Step(now)
		if diff := cmp.Diff(r1, r2, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("step at %v (-orig +clone):\n%s", now.Sub(t0), diff)
		}
		if r1.Duration > 0 {
			now = r1.End
		} else {
			now = now.Add(10 * time.Millisecond)
		}
	}
	if now.Equal(start) {
		t.Fatal("no step ran after the clone")
	}
	before := e.Snapshot()
	for i := range 50 {
		if err := c.Add(Request{ID: "extra" + string(rune('a'+i%26)) + string(rune('a'+i/26)), PromptTokens: 100, MaxTokens: 10}, now); err != nil {
			t.Fatal(err)
		}
	}
	c.Step(now)
	if diff := cmp.Diff(before, e.Snapshot()); diff != "" {
		t.Errorf("working the clone changed the original (-before +after):\n%s", diff)
	}
}
