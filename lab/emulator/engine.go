package emulator

import (
	"errors"
	"fmt"
	"time"
)

// FinishReason is why a request finished, vLLM's finished_reason label value.
type FinishReason string

// The finish reasons vLLM V1 reports in vllm:request_success_total.
const (
	// FinishStop: the model emitted end-of-sequence (simulated by Request.StopAfter).
	FinishStop FinishReason = "stop"
	// FinishLength: max_tokens (or max_model_len) reached.
	FinishLength FinishReason = "length"
	// FinishAbort: the client went away or the request was aborted.
	FinishAbort FinishReason = "abort"
)

// numFinishReasons is the number of FinishReason values.
const numFinishReasons = 3

// FinishReasons returns every FinishReason in vLLM's order (stop, length,
// abort), the order of Counters.Finished.
func FinishReasons() [numFinishReasons]FinishReason {
	return [...]FinishReason{FinishStop, FinishLength, FinishAbort}
}

// Request is one generation request as the engine sees it.
type Request struct {
	// ID identifies the request; unique among the requests the engine holds.
	ID string
	// PromptTokens is the prompt length in tokens, >= 1.
	PromptTokens int
	// MaxTokens is the most output tokens to generate, >= 1.
	MaxTokens int
	// StopAfter, if 0 < StopAfter < MaxTokens, simulates the model emitting
	// end-of-sequence after StopAfter output tokens: the request finishes with
	// FinishStop. Otherwise it generates MaxTokens tokens and finishes with
	// FinishLength.
	StopAfter int
}

// OutputTarget returns how many tokens r generates and why it then stops.
func (r Request) OutputTarget() (int, FinishReason) {
	if r.StopAfter > 0 && r.StopAfter < r.MaxTokens {
		return r.StopAfter, FinishStop
	}
	return r.MaxTokens, FinishLength
}

// TokenEvent is one output token sampled at the end of a step.
type TokenEvent struct {
	// ID is the request's ID.
	ID string
	// Index is the 0-based index of the token in the request's output.
	Index int
	// Latency is, for the first token (Index 0), the time to first token since
	// the request was added; for later tokens, the inter-token latency since the
	// previous one (including any stall from preemption).
	Latency time.Duration
}

// Finished describes a request that left the engine.
type Finished struct {
	// ID is the request's ID.
	ID string
	// Reason is why it finished.
	Reason FinishReason
	// PromptTokens, OutputTokens and MaxTokens are its sizes in tokens.
	PromptTokens, OutputTokens, MaxTokens int
	// The phase durations as vLLM V1 defines them (vllm/v1/metrics/stats.py):
	// Queue = first scheduled - added; Prefill = first token - first scheduled;
	// Decode = last token - first token; Inference = last token - first scheduled;
	// E2E = finished - added. Zero for phases never reached (aborts).
	Queue, Prefill, Decode, Inference, E2E time.Duration
}

// StepResult is what one [Engine.Step] did. It is owned by the engine and
// overwritten by the next Step; copy what you keep.
type StepResult struct {
	// Start is the time the step started; End = Start + Duration, when its
	// tokens are out.
	Start, End time.Time
	// Duration is the modelled time of the step; 0 when nothing was scheduled.
	Duration time.Duration
	// Scheduled is the number of requests in the batch.
	Scheduled int
	// ScheduledTokens is the number of tokens computed (prefill + decode), the
	// value vLLM observes in vllm:iteration_tokens_total.
	ScheduledTokens int
	// PrefillTokens is the part of ScheduledTokens that was prefill or
	// recomputation.
	PrefillTokens int
	// ContextTokens is the tokens the scheduled requests held in the KV cache
	// before the step (what attention read).
	ContextTokens int
	// Preempted is the number of requests preempted in this step.
	Preempted int
	// Tokens are the output tokens sampled at End.
	Tokens []TokenEvent
	// Finished are the requests that finished at End.
	Finished []Finished
}

// Counters are an engine's cumulative counts since it was created.
type Counters struct {
	// Preemptions counts preempted requests (vllm:num_preemptions_total).
	Preemptions uint64
	// PromptTokens counts prompt tokens of requests that produced their first
	// token, once per request (vllm:prompt_tokens_total).
	PromptTokens uint64
	// GenerationTokens counts output tokens (vllm:generation_tokens_total).
	GenerationTokens uint64
	// Finished counts finished requests by reason, indexed like FinishReasons()
	// (vllm:request_success_total).
	Finished [numFinishReasons]uint64
}

// Snapshot is an engine's state at one instant.
type Snapshot struct {
	// Waiting is the number of queued requests, preempted ones included
	// (vllm:num_requests_waiting).
	Waiting int
	// Running is the number of admitted requests, prefilling or decoding
	// (vllm:num_requests_running).
	Running int
	// UsedBlocks counts KV blocks in use, the null block included; TotalBlocks is
	// Config.NumBlocks.
	UsedBlocks, TotalBlocks int
	// KVCacheUsage is UsedBlocks/TotalBlocks, 0..1 (vllm:kv_cache_usage_perc).
	KVCacheUsage float64
	// Counters are the cumulative counts.
	Counters
}

// seq is the engine's state of one request.
type seq struct {
	req      Request
	target   int
	reason   FinishReason
	added    time.Time
	schedAt  time.Time // first scheduled; zero until then
	firstTok time.Time
	lastTok  time.Time
	computed int // tokens whose KV is in the cache (vLLM num_computed_tokens)
	output   int // output tokens sampled
	blocks   int
	sched    int // tokens scheduled in the current step
	running  bool
	done     bool
}

// numTokens is the request's current length: prompt plus sampled output.
func (s *seq) numTokens() int { return s.req.PromptTokens + s.output }

// Engine is one continuous-batching engine. It is not safe for concurrent use;
// [Runner] serialises access for real-time serving.
type Engine struct {
	cfg        Config
	waiting    deque
	running    []*seq
	freeBlocks int
	byID       map[string]*seq
	counters   Counters
	res        StepResult
	batch      []*seq
}

// ErrInvalidRequest is wrapped by [Engine.Add] errors for requests the engine
// refuses (vLLM answers those with HTTP 400).
var ErrInvalidRequest = errors.New("invalid request")

// NewEngine returns an idle engine of the given shape; it fails if cfg does not
// validate.
func NewEngine(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("engine config: %w", err)
	}
	return &Engine{
		cfg:        cfg,
		freeBlocks: cfg.NumBlocks - 1, // one null block, as in vLLM V1's BlockPool
		byID:       make(map[string]*seq),
	}, nil
}

// Config returns the engine's shape.
func (e *Engine) Config() Config { return e.cfg }

// Add queues req, arrived at now. It fails, wrapping ErrInvalidRequest, for an
// empty or duplicate ID, sizes below 1, or PromptTokens + MaxTokens above
// Config.MaxModelLen (vLLM's check on prompt + max_tokens).
func (e *Engine) Add(req Request, now time.Time) error {
	switch {
	case req.ID == "":
		return fmt.Errorf("%w: empty id", ErrInvalidRequest)
	case req.PromptTokens < 1:
		return fmt.Errorf("%w: prompt of %d tokens", ErrInvalidRequest, req.PromptTokens)
	case req.MaxTokens < 1:
		return fmt.Errorf("%w: max_tokens %d, want >= 1", ErrInvalidRequest, req.MaxTokens)
	case req.PromptTokens+req.MaxTokens > e.cfg.MaxModelLen:
		return fmt.Errorf("%w: this model's maximum context length is %d tokens, but %d were requested (%d in the prompt, %d for the completion)",
			ErrInvalidRequest, e.cfg.MaxModelLen, req.PromptTokens+req.MaxTokens, req.PromptTokens, req.MaxTokens)
	}
	if _, ok := e.byID[req.ID]; ok {
		return fmt.Errorf("%w: duplicate id %q", ErrInvalidRequest, req.ID)
	}
	s := &seq{req: req, added: now}
	s.target, s.reason = req.OutputTarget()
	e.byID[req.ID] = s
	e.waiting.pushBack(s)
	return nil
}

// Idle reports whether the engine holds no request.
func (e *Engine) Idle() bool { return e.waiting.len() == 0 && len(e.running) == 0 }

// Snapshot returns the engine's current state.
func (e *Engine) Snapshot() Snapshot {
	used := e.cfg.NumBlocks - e.freeBlocks
	return Snapshot{
		Waiting:      e.waiting.len(),
		Running:      len(e.running),
		UsedBlocks:   used,
		TotalBlocks:  e.cfg.NumBlocks,
		KVCacheUsage: float64(used) / float64(e.cfg.NumBlocks),
		Counters:     e.counters,
	}
}

// allocate gives s the blocks for n more computed tokens, or reports false
// and changes nothing if too few blocks are free.
func (e *Engine) allocate(s *seq, n int) bool {
	need := ceilDiv(s.computed+n, e.cfg.BlockSize) - s.blocks
	if need > e.freeBlocks {
		return false
	}
	if need > 0 {
		e.freeBlocks -= need
		s.blocks += need
	}
	return true
}

func (e *Engine) free(s *seq) {
	e.freeBlocks += s.blocks
	s.blocks = 0
}

// Step runs one scheduler iteration and forward pass starting at now; see the
// package documentation for the rules. The result is valid until the next call.
func (e *Engine) Step(now time.Time) *StepResult {
	r := &e.res
	*r = StepResult{Start: now, End: now, Tokens: r.Tokens[:0], Finished: r.Finished[:0]}
	budget := e.scheduleRunning(e.cfg.MaxNumBatchedTokens)
	if r.Preempted == 0 {
		e.admitWaiting(now, budget)
	}
	e.timeStep(now)
	e.emitOutputs()
	return r
}

// scheduleRunning schedules the running requests, in admission order, within
// the token budget, preempting for KV blocks as vLLM V1 does (phase 1 of Step).
// It returns the budget left.
func (e *Engine) scheduleRunning(budget int) int {
	e.batch = e.batch[:0]
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		n := min(s.numTokens()-s.computed, budget)
		if !e.allocateOrPreempt(s, n) {
			break // s itself was preempted
		}
		s.sched = n
		budget -= n
		e.batch = append(e.batch, s)
	}
	return budget
}

// admitWaiting admits waiting requests FCFS while the budget, max_num_seqs and
// free KV blocks allow (phase 2; only in a step without preemption).
func (e *Engine) admitWaiting(now time.Time, budget int) {
	for e.waiting.len() > 0 && budget > 0 && len(e.running) < e.cfg.MaxNumSeqs {
		s := e.waiting.front()
		n := min(s.numTokens()-s.computed, budget)
		if !e.allocate(s, n) {
			break // head-of-line blocking, as vLLM's FCFS policy
		}
		e.waiting.popFront()
		s.running = true
		e.running = append(e.running, s)
		if s.schedAt.IsZero() {
			s.schedAt = now
		}
		s.sched = n
		budget -= n
		e.batch = append(e.batch, s)
	}
}

// timeStep sets the step's token counts and its duration from the step-time
// model (phase 3).
func (e *Engine) timeStep(now time.Time) {
	r := &e.res
	for _, s := range e.batch {
		r.ScheduledTokens += s.sched
		r.ContextTokens += s.computed
		decoding := s.sched == 1 && s.output > 0 && s.computed == s.numTokens()-1
		if !decoding {
			r.PrefillTokens += s.sched
		}
	}
	r.Scheduled = len(e.batch)
	r.Duration = e.cfg.StepTime.Duration(len(e.batch), r.PrefillTokens, r.ContextTokens)
	r.End = now.Add(r.Duration)
}

// emitOutputs advances every scheduled request at the end of the step: a
// finished prefill or a decode yields a token; a request at its target or the
// model's length finishes and leaves the running list (phase 4).
func (e *Engine) emitOutputs() {
	r := &e.res
	end := r.End
	finished := false
	for _, s := range e.batch {
		s.computed += s.sched
		s.sched = 0
		if s.computed < s.numTokens() {
			continue // a prefill chunk: no token yet
		}
		ev := TokenEvent{ID: s.req.ID, Index: s.output}
		if s.output == 0 {
			s.firstTok = end
			ev.Latency = end.Sub(s.added)
			e.counters.PromptTokens += uint64(s.req.PromptTokens)
		} else {
			ev.Latency = end.Sub(s.lastTok)
		}
		s.output++
		s.lastTok = end
		e.counters.GenerationTokens++
		r.Tokens = append(r.Tokens, ev)
		reason, done := s.reason, s.output >= s.target
		if !done && s.numTokens() >= e.cfg.MaxModelLen {
			reason, done = FinishLength, true
		}
		if done {
			e.finish(s, reason, end)
			finished = true
		}
	}
	if finished {
		kept := e.running[:0]
		for _, s := range e.running {
			if !s.done {
				kept = append(kept, s)
			}
		}
		clear(e.running[len(kept):])
		e.running = kept
	}
}

// allocateOrPreempt allocates n tokens' blocks for the running request s,
// preempting from the end of the running list until it fits. It reports false if
// s itself had to be preempted.
func (e *Engine) allocateOrPreempt(s *seq, n int) bool {
	for !e.allocate(s, n) {
		victim := e.running[len(e.running)-1]
		e.running[len(e.running)-1] = nil
		e.running = e.running[:len(e.running)-1]
		e.free(victim)
		victim.computed = 0
		victim.running = false
		e.waiting.pushFront(victim)
		e.counters.Preemptions++
		e.res.Preempted++
		if victim == s {
			return false
		}
	}
	return true
}

// finish records s as finished at t and releases it; the caller removes it from
// the running list.
func (e *Engine) finish(s *seq, reason FinishReason, t time.Time) {
	e.free(s)
	s.done = true
	delete(e.byID, s.req.ID)
	e.counters.Finished[reasonIndex(reason)]++
	e.res.Finished = append(e.res.Finished, finishedOf(s, reason, t))
}

func finishedOf(s *seq, reason FinishReason, t time.Time) Finished {
	f := Finished{
		ID: s.req.ID, Reason: reason,
		PromptTokens: s.req.PromptTokens, OutputTokens: s.output, MaxTokens: s.req.MaxTokens,
		E2E: t.Sub(s.added),
	}
	if !s.schedAt.IsZero() {
		f.Queue = s.schedAt.Sub(s.added)
	}
	if !s.firstTok.IsZero() {
		f.Prefill = s.firstTok.Sub(s.schedAt)
		f.Decode = s.lastTok.Sub(s.firstTok)
		f.Inference = s.lastTok.Sub(s.schedAt)
	}
	return f
}

// Abort removes the request id from the engine at now, frees its blocks and
// counts it as finished with FinishAbort. It reports false if the engine does not
// hold id (unknown or already finished).
func (e *Engine) Abort(id string, now time.Time) (Finished, bool) {
	s, ok := e.byID[id]
	if !ok {
		return Finished{}, false
	}
	if s.running {
		for i, r := range e.running {
			if r == s {
				e.running = append(e.running[:i], e.running[i+1:]...)
				break
			}
		}
	} else {
		e.waiting.remove(s)
	}
	e.free(s)
	s.done = true
	delete(e.byID, id)
	e.counters.Finished[reasonIndex(FinishAbort)]++
	return finishedOf(s, FinishAbort, now), true
}

// AbortUnstarted aborts the request id, as Abort does, only while it has no
// output token yet (waiting, or its prompt still in prefill): a client that
// gives up on the first token. It reports false otherwise.
func (e *Engine) AbortUnstarted(id string, now time.Time) (Finished, bool) {
	s, ok := e.byID[id]
	if !ok || s.output > 0 {
		return Finished{}, false
	}
	return e.Abort(id, now)
}

func reasonIndex(r FinishReason) int {
	for i, x := range FinishReasons() {
		if x == r {
			return i
		}
	}
	panic(fmt.Sprintf("emulator: unknown finish reason %q", r))
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// deque is a FIFO of requests that also takes preempted requests at its front.
type deque struct {
	items []*seq
	head  int
}

func (d *deque) len() int        { return len(d.items) - d.head }
func (d *deque) front() *seq     { return d.items[d.head] }
func (d *deque) pushBack(s *seq) { d.items = append(d.items, s) }

func (d *deque) popFront() *seq {
	s := d.items[d.head]
	d.items[d.head] = nil
	d.head++
	if d.head == len(d.items) {
		d.items, d.head = d.items[:0], 0
	} else if d.head > 1024 && d.head > len(d.items)/2 {
		n := copy(d.items, d.items[d.head:])
		clear(d.items[n:])
		d.items, d.head = d.items[:n], 0
	}
	return s
}

func (d *deque) pushFront(s *seq) {
	if d.head > 0 {
		d.head--
		d.items[d.head] = s
		return
	}
	d.items = append(d.items, nil)
	copy(d.items[1:], d.items)
	d.items[0] = s
}

func (d *deque) remove(s *seq) {
	for i := d.head; i < len(d.items); i++ {
		if d.items[i] == s {
			copy(d.items[i:], d.items[i+1:])
			d.items[len(d.items)-1] = nil
			d.items = d.items[:len(d.items)-1]
			return
		}
	}
}

// Clone returns an independent copy of the engine: the same queued and running
// requests, KV blocks, counters and last step result. Stepping either never
// changes the other. lab/simulate uses it to try alternatives from one state.
func (e *Engine) Clone() *Engine {
	c := &Engine{
		cfg:        e.cfg,
		freeBlocks: e.freeBlocks,
		counters:   e.counters,
		byID:       make(map[string]*seq, len(e.byID)),
		running:    make([]*seq, 0, len(e.running)),
	}
	cp := func(s *seq) *seq {
		n := *s
		c.byID[n.req.ID] = &n
		return &n
	}
	c.waiting.items = make([]*seq, 0, e.waiting.len())
	for _, s := range e.waiting.items[e.waiting.head:] {
		c.waiting.items = append(c.waiting.items, cp(s))
	}
	for _, s := range e.running {
		c.running = append(c.running, cp(s))
	}
	c.res = e.res
	c.res.Tokens = append([]TokenEvent(nil), e.res.Tokens...)
	c.res.Finished = append([]Finished(nil), e.res.Finished...)
	return c
}
