package emulator

import (
	"fmt"
	"sort"
	"time"
)

// Arrival is a request that reaches a simulated engine at a given time.
type Arrival struct {
	// At is the arrival time relative to the simulation's start.
	At time.Duration
	// Request is the request.
	Request Request
}

// Simulator drives one [Engine] on a virtual clock: time jumps to the end of each
// step while the engine is busy and to the next arrival while it is idle, so an
// hour of load runs in about a second of CPU and every run is identical.
// Requests arriving during a step are added at their arrival time and scheduled
// from the next step on, as in vLLM. Not safe for concurrent use.
type Simulator struct {
	engine   *Engine
	start    time.Time
	now      time.Time
	arrivals []Arrival
	next     int
	rejected []error
	onStep   func(*StepResult)
}

// NewSimulator returns a simulator of an engine of shape cfg whose virtual clock
// reads start. onStep, if not nil, is called after every step with its result
// (valid during the call only).
func NewSimulator(cfg Config, start time.Time, onStep func(*StepResult)) (*Simulator, error) {
	e, err := NewEngine(cfg)
	if err != nil {
		return nil, err
	}
	return &Simulator{engine: e, start: start, now: start, onStep: onStep}, nil
}

// Engine returns the simulated engine, for snapshots between runs.
func (s *Simulator) Engine() *Engine { return s.engine }

// Now returns the virtual time.
func (s *Simulator) Now() time.Time { return s.now }

// Elapsed returns the virtual time since the start.
func (s *Simulator) Elapsed() time.Duration { return s.now.Sub(s.start) }

// Rejected returns the errors of arrivals the engine refused so far.
func (s *Simulator) Rejected() []error { return s.rejected }

// Schedule adds future arrivals. Arrivals before the current virtual time are
// added at the current time.
func (s *Simulator) Schedule(arrivals ...Arrival) {
	pending := append(s.arrivals[s.next:], arrivals...)
	sort.SliceStable(pending, func(i, j int) bool { return pending[i].At < pending[j].At })
	s.arrivals, s.next = pending, 0
}

// admit adds every arrival due at the current time.
func (s *Simulator) admit() {
	for s.next < len(s.arrivals) {
		a := s.arrivals[s.next]
		at := s.start.Add(a.At)
		if at.After(s.now) {
			return
		}
		if at.Before(s.now) {
			at = s.now
		}
		if err := s.engine.Add(a.Request, at); err != nil {
			s.rejected = append(s.rejected, fmt.Errorf("arrival at %v: %w", a.At, err))
		}
		s.arrivals[s.next] = Arrival{}
		s.next++
	}
}

// RunFor advances the virtual clock by d; see [Simulator.RunUntil].
func (s *Simulator) RunFor(d time.Duration) { s.RunUntil(s.now.Add(d)) }

// RunUntil advances the virtual clock to t: it adds due arrivals and runs steps
// back to back while the engine is busy. A step that starts before t completes,
// so the clock may end slightly past t.
func (s *Simulator) RunUntil(t time.Time) { s.advance(t, false) }

// advance implements RunUntil; with drain it stops as soon as the engine is idle
// and no arrival is left.
func (s *Simulator) advance(t time.Time, drain bool) {
	for {
		s.admit()
		if s.engine.Idle() {
			if drain && s.next == len(s.arrivals) {
				return
			}
			if s.next < len(s.arrivals) {
				if at := s.start.Add(s.arrivals[s.next].At); !at.After(t) {
					s.now = at
					continue
				}
			}
			if s.now.Before(t) {
				s.now = t
			}
			return
		}
		if !s.now.Before(t) {
			return
		}
		res := s.engine.Step(s.now)
		if res.Duration <= 0 {
			// Cannot happen with a valid Config (an idle check precedes and a
			// non-empty engine always schedules its queue head); guard anyway.
			s.now = t
			return
		}
		s.now = res.End
		if s.onStep != nil {
			s.onStep(res)
		}
	}
}

// Drain runs until every arrival has been added and the engine is idle, or the
// virtual clock reaches limit. It reports whether the engine drained.
func (s *Simulator) Drain(limit time.Time) bool {
	s.advance(limit, true)
	return s.engine.Idle() && s.next == len(s.arrivals)
}
