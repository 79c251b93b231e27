package emulator

import (
	"context"
	"sync"
	"sync/atomic"

	"k8s.io/utils/clock"
)

// Stream follows one request submitted to a [Runner]: how many tokens it has so
// far and whether it finished. Safe for concurrent use.
type Stream struct {
	changed chan struct{}

	mu     sync.Mutex
	tokens int
	done   bool
	reason FinishReason
}

// Changed returns a channel that receives after the stream changed (coalesced:
// one receive may stand for several tokens); re-read [Stream.Progress] then.
func (s *Stream) Changed() <-chan struct{} { return s.changed }

// Progress returns the number of output tokens so far and, once done, why the
// request finished.
func (s *Stream) Progress() (tokens int, reason FinishReason, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokens, s.reason, s.done
}

func (s *Stream) update(tokens int, reason FinishReason, done bool) {
	s.mu.Lock()
	if tokens > s.tokens {
		s.tokens = tokens
	}
	if done && !s.done {
		s.done, s.reason = true, reason
	}
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Runner drives one [Engine] in real time: it runs steps back to back while the
// engine holds requests, sleeping each step's modelled duration on its clock, and
// publishes tokens to the requests' streams at the end of each step. The engine's
// gauges change when a step starts, its tokens appear when it ends.
type Runner struct {
	engine *Engine
	clock  clock.Clock
	onStep func(*StepResult)
	wake   chan struct{}
	frozen atomic.Bool

	mu      sync.Mutex // guards engine and streams
	streams map[string]*Stream
}

// NewRunner returns a runner of a new engine of shape cfg on clk. onStep, if not
// nil, is called from the runner's goroutine with every step's result once the
// step has ended (valid during the call only), e.g. [Metrics.Observe].
func NewRunner(cfg Config, clk clock.Clock, onStep func(*StepResult)) (*Runner, error) {
	e, err := NewEngine(cfg)
	if err != nil {
		return nil, err
	}
	return &Runner{engine: e, clock: clk, onStep: onStep, wake: make(chan struct{}, 1), streams: make(map[string]*Stream)}, nil
}

// Config returns the engine's shape.
func (r *Runner) Config() Config { return r.engine.Config() }

// Submit queues req now and returns its stream. Errors are the engine's
// (wrapping ErrInvalidRequest).
func (r *Runner) Submit(req Request) (*Stream, error) {
	r.mu.Lock()
	err := r.engine.Add(req, r.clock.Now())
	var s *Stream
	if err == nil {
		s = &Stream{changed: make(chan struct{}, 1)}
		r.streams[req.ID] = s
	}
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	r.poke()
	return s, nil
}

// Abort aborts the request id (a client that went away) and finishes its stream
// with FinishAbort. It reports false if the request already finished.
func (r *Runner) Abort(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.engine.Abort(id, r.clock.Now())
	if s := r.streams[id]; s != nil {
		delete(r.streams, id)
		s.update(0, FinishAbort, true)
	}
	return ok
}

// Snapshot returns the engine's current state.
func (r *Runner) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.engine.Snapshot()
}

// SetFrozen freezes (true) or thaws (false) the engine: a frozen engine accepts
// and queues requests but runs no step, like a hung GPU worker; its metrics stay
// served.
func (r *Runner) SetFrozen(frozen bool) {
	r.frozen.Store(frozen)
	r.poke()
}

// Frozen reports whether the engine is frozen.
func (r *Runner) Frozen() bool { return r.frozen.Load() }

func (r *Runner) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run drives the engine until ctx is done. Call it once.
func (r *Runner) Run(ctx context.Context) {
	for {
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		if r.frozen.Load() || r.engine.Idle() {
			r.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
			}
			continue
		}
		res := r.engine.Step(r.clock.Now())
		r.mu.Unlock()

		if res.Duration > 0 {
			t := r.clock.NewTimer(res.Duration)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
		}
		// Metrics first, so that a client that sees its request finish then
		// finds it in the histograms.
		if r.onStep != nil {
			r.onStep(res)
		}
		r.publish(res)
	}
}

// publish hands a step's tokens and completions to the streams. res belongs to
// the engine but only Step writes it, and only this goroutine calls Step.
func (r *Runner) publish(res *StepResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Finished first, so that a stream's last token and its end are published
	// in one update; the finished streams are then gone from the map.
	for _, f := range res.Finished {
		if s := r.streams[f.ID]; s != nil {
			delete(r.streams, f.ID)
			s.update(f.OutputTokens, f.Reason, true)
		}
	}
	for _, t := range res.Tokens {
		if s := r.streams[t.ID]; s != nil {
			s.update(t.Index+1, "", false)
		}
	}
}
