package emulator

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// tinyConfig is a small engine whose numbers are easy to follow by hand.
func tinyConfig() Config {
	return Config{
		MaxNumSeqs:          8,
		MaxNumBatchedTokens: 64,
		BlockSize:           4,
		NumBlocks:           33, // 32 usable blocks = 128 tokens
		MaxModelLen:         64,
		StepTime:            StepTimeModel{Base: 10 * time.Millisecond, PerSeq: time.Millisecond, PerPrefillToken: 100 * time.Microsecond},
	}
}

func mustEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func mustAdd(t *testing.T, e *Engine, now time.Time, reqs ...Request) {
	t.Helper()
	for _, r := range reqs {
		if err := e.Add(r, now); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStepTimeModel(t *testing.T) {
	m := DefaultConfig().StepTime
	one := m.Base + m.PerSeq
	tests := []struct {
		name                   string
		seqs, prefill, context int
		want                   time.Duration
	}{
		{"empty step", 0, 0, 0, 0},
		{"one decode, no context", 1, 0, 0, one},
		{"one decode at 1000 tokens of context", 1, 0, 1000, one + 1000*m.PerContextToken},
		{"256 decodes at 1000 tokens each", 256, 0, 256000, m.Base + 256*m.PerSeq + 256000*m.PerContextToken},
		{"lone 1000-token prompt", 1, 1000, 0, one + 1000*m.PerPrefillToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := m.Duration(tt.seqs, tt.prefill, tt.context); got != tt.want {
				t.Errorf("Duration(%d, %d, %d) = %v, want %v", tt.seqs, tt.prefill, tt.context, got, tt.want)
			}
		})
	}
}

// negativeNumber matches a negative number in a message.
var negativeNumber = regexp.MustCompile(`(^|[ (=\[])-[0-9]`)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr bool
	}{
		{"default", func(*Config) {}, false},
		{"tiny", func(c *Config) { *c = tinyConfig() }, false},
		{"zero seqs", func(c *Config) { c.MaxNumSeqs = 0 }, true},
		{"zero budget", func(c *Config) { c.MaxNumBatchedTokens = 0 }, true},
		{"one block", func(c *Config) { c.NumBlocks = 1 }, true},
		{"model longer than cache", func(c *Config) { c.NumBlocks = 100 }, true},
		{"zero step time", func(c *Config) { c.StepTime = StepTimeModel{} }, true},
		{"negative coefficient", func(c *Config) { c.StepTime.PerSeq = -1 }, true},
		// Bounds: beyond them token counts and step times overflowed (a
		// profile of 2^63-1 blocks was refused as holding "-32 tokens").
		{"blocks past the bound", func(c *Config) { c.NumBlocks = math.MaxInt64 }, true},
		{"block size past the bound", func(c *Config) { c.BlockSize = math.MaxInt64 / 2 }, true},
		{"seqs past the bound", func(c *Config) { c.MaxNumSeqs = MaxSeqs + 1 }, true},
		{"model length past the bound", func(c *Config) { c.MaxModelLen = math.MaxInt64 }, true},
		{"step base past the bound", func(c *Config) { c.StepTime.Base = time.Duration(math.MaxInt64) }, true},
		{"context cost past the bound", func(c *Config) { c.StepTime.PerContextToken = time.Second }, true},
		{"largest of everything", func(c *Config) {
			*c = Config{MaxNumSeqs: MaxSeqs, MaxNumBatchedTokens: MaxTokens, BlockSize: MaxBlockSize, NumBlocks: MaxBlocks, MaxModelLen: MaxTokens,
				StepTime: StepTimeModel{Base: MaxStepBase, PerSeq: MaxStepPerSeq, PerPrefillToken: MaxPerPrefillToken, PerContextToken: MaxPerContextToken}}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			if (err != nil) != tt.wantErr {
				t.Errorf("Validate() = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil && negativeNumber.MatchString(err.Error()) && !strings.Contains(tt.name, "negative") {
				t.Errorf("Validate() = %v: a negative number in the message of a bound", err)
			}
			if err == nil {
				// The longest step this shape can take does not overflow.
				held := (c.NumBlocks - 1) * c.BlockSize
				if d := c.StepTime.Duration(c.MaxNumSeqs, c.MaxNumBatchedTokens, held); d <= 0 {
					t.Errorf("longest step = %v, want > 0", d)
				}
			}
		})
	}
}

func TestEngineAddRejects(t *testing.T) {
	tests := []struct {
		name string
		req  Request
	}{
		{"empty id", Request{PromptTokens: 1, MaxTokens: 1}},
		{"empty prompt", Request{ID: "a", MaxTokens: 1}},
		{"zero max tokens", Request{ID: "a", PromptTokens: 1}},
		{"longer than max model len", Request{ID: "a", PromptTokens: 60, MaxTokens: 5}},
		{"duplicate id", Request{ID: "dup", PromptTokens: 1, MaxTokens: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := mustEngine(t, tinyConfig())
			mustAdd(t, e, t0, Request{ID: "dup", PromptTokens: 1, MaxTokens: 1})
			if err := e.Add(tt.req, t0); !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("Add(%+v) = %v, want ErrInvalidRequest", tt.req, err)
			}
		})
	}
}

// stepAll steps e until idle (at most limit steps), returning the step results'
// finished records and the time reached.
func stepAll(t *testing.T, e *Engine, now time.Time, limit int) ([]Finished, time.Time) {
	t.Helper()
	var fin []Finished
	for i := 0; !e.Idle(); i++ {
		if i == limit {
			t.Fatalf("engine not idle after %d steps: %+v", limit, e.Snapshot())
		}
		r := e.Step(now)
		now = r.End
		fin = append(fin, r.Finished...)
	}
	return fin, now
}

func TestEngineSingleRequestLifecycle(t *testing.T) {
	cfg := tinyConfig()
	e := mustEngine(t, cfg)
	if got, want := e.Snapshot().KVCacheUsage, 1.0/33; got != want {
		t.Errorf("idle KV usage = %v, want 1/NumBlocks = %v (the null block)", got, want)
	}
	mustAdd(t, e, t0, Request{ID: "a", PromptTokens: 10, MaxTokens: 3})

	// Step 1: the whole prompt is prefilled and the first token sampled.
	r := e.Step(t0)
	prefill := cfg.StepTime.Duration(1, 10, 0)
	if r.Duration != prefill || r.PrefillTokens != 10 || r.ScheduledTokens != 10 || len(r.Tokens) != 1 {
		t.Fatalf("step 1 = %+v, want a 10-token prefill of %v with one token", r, prefill)
	}
	if got := r.Tokens[0]; got.Index != 0 || got.Latency != prefill {
		t.Errorf("first token = %+v, want index 0 with TTFT %v", got, prefill)
	}
	if s := e.Snapshot(); s.UsedBlocks != 1+3 || s.Running != 1 || s.Waiting != 0 {
		t.Errorf("after prefill: %+v, want 3 blocks (ceil(10/4)) + null, 1 running", s)
	}

	// Steps 2 and 3: decodes.
	decode := cfg.StepTime.Duration(1, 0, 0)
	now := r.End
	for i := 1; i <= 2; i++ {
		r = e.Step(now)
		now = r.End
		if r.Duration != decode || r.PrefillTokens != 0 || len(r.Tokens) != 1 || r.Tokens[0].Index != i || r.Tokens[0].Latency != decode {
			t.Fatalf("decode step %d = %+v, want one token %d after %v", i, r, i, decode)
		}
	}
	want := []Finished{{
		ID: "a", Reason: FinishLength, PromptTokens: 10, OutputTokens: 3, MaxTokens: 3,
		Queue: 0, Prefill: prefill, Decode: 2 * decode, Inference: prefill + 2*decode, E2E: prefill + 2*decode,
	}}
	if diff := cmp.Diff(want, r.Finished); diff != "" {
		t.Errorf("finished (-want +got):\n%s", diff)
	}
	wantSnap := Snapshot{UsedBlocks: 1, TotalBlocks: 33, KVCacheUsage: 1.0 / 33,
		Counters: Counters{PromptTokens: 10, GenerationTokens: 3, Finished: [3]uint64{0, 1, 0}}}
	if diff := cmp.Diff(wantSnap, e.Snapshot()); diff != "" {
		t.Errorf("final snapshot (-want +got):\n%s", diff)
	}
	if !e.Idle() {
		t.Error("engine not idle")
	}
}

func TestEngineChunkedPrefill(t *testing.T) {
	cfg := tinyConfig()
	cfg.MaxNumBatchedTokens = 16
	e := mustEngine(t, cfg)
	mustAdd(t, e, t0, Request{ID: "decoder", PromptTokens: 2, MaxTokens: 10})
	now := e.Step(t0).End // decoder prefilled, now decoding
	mustAdd(t, e, now, Request{ID: "long", PromptTokens: 40, MaxTokens: 1})

	// Budget 16: the decoder takes 1 token, the long prompt the other 15, then
	// 15, then the last 10 and its first token.
	for i, wantChunk := range []int{15, 15, 10} {
		r := e.Step(now)
		now = r.End
		if r.ScheduledTokens != 1+wantChunk || r.PrefillTokens != wantChunk {
			t.Errorf("step %d scheduled %d tokens (%d prefill), want 1 decode + %d prefill", i, r.ScheduledTokens, r.PrefillTokens, wantChunk)
		}
		gotLong := false
		for _, tok := range r.Tokens {
			gotLong = gotLong || tok.ID == "long"
		}
		if wantLong := i == 2; gotLong != wantLong {
			t.Errorf("step %d: long prompt produced a token = %v, want %v", i, gotLong, wantLong)
		}
	}
}

func TestEngineMaxNumSeqsAndFCFS(t *testing.T) {
	cfg := tinyConfig()
	cfg.MaxNumSeqs = 2
	e := mustEngine(t, cfg)
	mustAdd(t, e, t0,
		Request{ID: "1", PromptTokens: 4, MaxTokens: 2},
		Request{ID: "2", PromptTokens: 4, MaxTokens: 4},
		Request{ID: "3", PromptTokens: 4, MaxTokens: 1})
	r := e.Step(t0)
	if s := e.Snapshot(); s.Running != 2 || s.Waiting != 1 || r.Scheduled != 2 {
		t.Fatalf("after step 1: %+v, want 2 running, 1 waiting", s)
	}
	first := r.Duration // r is overwritten by the next Step
	fin, _ := stepAll(t, e, r.End, 100)
	var order []string
	for _, f := range fin {
		order = append(order, f.ID)
	}
	// "3" is admitted only when "1" leaves, and needs one step.
	if diff := cmp.Diff([]string{"1", "3", "2"}, order); diff != "" {
		t.Errorf("finish order (-want +got):\n%s", diff)
	}
	if f := fin[1]; f.Queue != first+cfg.StepTime.Duration(2, 0, 0) {
		t.Errorf("queue time of 3 = %v, want two steps", f.Queue)
	}
}

func TestEnginePreemptsMostRecentlyAdmitted(t *testing.T) {
	cfg := tinyConfig()
	cfg.NumBlocks = 5 // 4 usable blocks = 16 tokens
	cfg.MaxModelLen = 16
	e := mustEngine(t, cfg)
	mustAdd(t, e, t0,
		Request{ID: "old", PromptTokens: 4, MaxTokens: 8},
		Request{ID: "new", PromptTokens: 4, MaxTokens: 8})
	now := t0
	var preemptedAt int
	for i := 0; i < 20 && preemptedAt == 0; i++ {
		r := e.Step(now)
		now = r.End
		if r.Preempted > 0 {
			preemptedAt = i
		}
	}
	if preemptedAt == 0 {
		t.Fatalf("no preemption: %+v", e.Snapshot())
	}
	s := e.Snapshot()
	if s.Running != 1 || s.Waiting != 1 || s.Preemptions != 1 {
		t.Fatalf("after preemption: %+v, want 1 running, 1 waiting, 1 preemption", s)
	}
	if e.running[0].req.ID != "old" || e.waiting.front().req.ID != "new" {
		t.Errorf("running %q, waiting front %q; want old running, new preempted", e.running[0].req.ID, e.waiting.front().req.ID)
	}
	if e.waiting.front().computed != 0 || e.waiting.front().blocks != 0 {
		t.Errorf("preempted request keeps state: %+v", *e.waiting.front())
	}
	// A later arrival queues behind the preempted request.
	mustAdd(t, e, now, Request{ID: "later", PromptTokens: 4, MaxTokens: 1})
	if e.waiting.front().req.ID != "new" {
		t.Errorf("waiting front = %q, want the preempted request", e.waiting.front().req.ID)
	}
	fin, _ := stepAll(t, e, now, 200)
	got := map[string]Finished{}
	for _, f := range fin {
		got[f.ID] = f
	}
	for id, want := range map[string]int{"old": 8, "new": 8, "later": 1} {
		if got[id].OutputTokens != want || got[id].Reason != FinishLength {
			t.Errorf("%s finished %+v, want %d tokens, length", id, got[id], want)
		}
	}
	s = e.Snapshot()
	if s.PromptTokens != 12 || s.GenerationTokens != 17 || s.UsedBlocks != 1 {
		t.Errorf("counters %+v: want prompt tokens counted once (12), 17 generated, only the null block used", s)
	}
}

func TestEngineStopAndAbort(t *testing.T) {
	e := mustEngine(t, tinyConfig())
	mustAdd(t, e, t0,
		Request{ID: "stops", PromptTokens: 4, MaxTokens: 10, StopAfter: 2},
		Request{ID: "aborted-running", PromptTokens: 4, MaxTokens: 10})
	now := e.Step(t0).End
	mustAdd(t, e, now, Request{ID: "aborted-waiting", PromptTokens: 4, MaxTokens: 10})
	for _, id := range []string{"aborted-running", "aborted-waiting"} {
		f, ok := e.Abort(id, now)
		if !ok || f.Reason != FinishAbort {
			t.Errorf("Abort(%s) = %+v, %v", id, f, ok)
		}
	}
	if _, ok := e.Abort("unknown", now); ok {
		t.Error("Abort(unknown) = true")
	}
	fin, _ := stepAll(t, e, now, 10)
	if len(fin) != 1 || fin[0].Reason != FinishStop || fin[0].OutputTokens != 2 {
		t.Errorf("finished = %+v, want stops with 2 tokens, reason stop", fin)
	}
	s := e.Snapshot()
	if s.Finished != [3]uint64{1, 0, 2} || s.UsedBlocks != 1 {
		t.Errorf("snapshot %+v, want 1 stop, 2 aborts, blocks freed", s)
	}
}

func TestFinishReasonsOrder(t *testing.T) {
	var got []string
	for _, r := range FinishReasons() {
		got = append(got, fmt.Sprint(r))
	}
	if diff := cmp.Diff([]string{"stop", "length", "abort"}, got); diff != "" {
		t.Error(diff)
	}
}

// TestDecodeStepGrowsWithContext: a decode step reads every scheduled
// request's KV cache, so with PerContextToken it costs more as the context
// grows: the k-th decode of a 10-token prompt reads 10 + k - 1 tokens.
func TestDecodeStepGrowsWithContext(t *testing.T) {
	cfg := tinyConfig()
	cfg.StepTime.PerContextToken = 10 * time.Microsecond
	e := mustEngine(t, cfg)
	mustAdd(t, e, t0, Request{ID: "a", PromptTokens: 10, MaxTokens: 4})
	r := e.Step(t0)
	if want := cfg.StepTime.Duration(1, 10, 0); r.Duration != want || r.ContextTokens != 0 {
		t.Fatalf("prefill step %v with %d context tokens, want %v and 0", r.Duration, r.ContextTokens, want)
	}
	now := r.End
	for k := 1; k <= 3; k++ {
		r = e.Step(now)
		now = r.End
		ctx := 10 + k - 1
		if want := cfg.StepTime.Duration(1, 0, ctx); r.Duration != want || r.ContextTokens != ctx {
			t.Errorf("decode %d: %v over %d context tokens, want %v over %d", k, r.Duration, r.ContextTokens, want, ctx)
		}
	}
}

// TestAbortUnstarted: a client that gives up before its first token aborts a
// waiting request (freeing nothing it did not hold) and a request in prefill,
// never one that has a token.
func TestAbortUnstarted(t *testing.T) {
	cfg := tinyConfig()
	cfg.MaxNumSeqs = 1
	e := mustEngine(t, cfg)
	mustAdd(t, e, t0, Request{ID: "a", PromptTokens: 10, MaxTokens: 4})
	mustAdd(t, e, t0, Request{ID: "b", PromptTokens: 10, MaxTokens: 4})
	r := e.Step(t0) // a prefilled, its first token out; b waits
	if _, ok := e.AbortUnstarted("a", r.End); ok {
		t.Error("a has a token: AbortUnstarted must leave it")
	}
	f, ok := e.AbortUnstarted("b", r.End)
	if !ok || f.Reason != FinishAbort {
		t.Fatalf("AbortUnstarted(b) = %+v, %v; want b aborted", f, ok)
	}
	if s := e.Snapshot(); s.Waiting != 0 || s.Running != 1 || s.Finished[2] != 1 {
		t.Errorf("after the abort %+v, want a alone running and one abort counted", s)
	}
}
