package simulate

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/saturation-adapter/saturation-adapter/lab/trace"
)

// Request is one request of a workload.
type Request struct {
	// At is the arrival time at the gateway, from the start of the simulation.
	At time.Duration
	// PromptTokens and OutputTokens are the request's sizes; the engine generates
	// exactly OutputTokens tokens (the trace's GeneratedTokens).
	PromptTokens, OutputTokens int
}

// Workload is the arrivals a simulation replays, sorted by arrival time.
type Workload struct {
	// Requests are the arrivals in time order.
	Requests []Request
	// Duration is the end of the traffic window: costs are counted over
	// [ScoreFrom, Duration]. At least the last arrival.
	Duration time.Duration
	// ScoreFrom ends the warm-up: requests arriving before it are served
	// but not scored, and GPU time before it is not counted (0: no warm-up).
	// It spares every fleet the initial condition of a slice cut from the
	// middle of a trace (see WorkloadOptions.WarmUp).
	ScoreFrom time.Duration
}

// Scored reports whether request i counts (it arrives after the warm-up).
func (w Workload) Scored(i int) bool { return w.scoredAt(w.Requests[i].At) }

// scoredAt reports whether what happens from t on counts (t is not in the
// warm-up): requests arriving then, oracle intervals and load steps starting
// then.
func (w Workload) scoredAt(t time.Duration) bool { return t >= w.ScoreFrom }

// WorkloadOptions shape a trace into a workload.
type WorkloadOptions struct {
	// Start and Length select the rows whose offset from the trace's first row is
	// in [Start, Start+Length), in trace time; Length 0 means to the end.
	Start, Length time.Duration
	// WarmUp replays this much of the trace before Start (at most Start) first,
	// unscored: every fleet then enters the window in the state its own
	// autoscaler left it in, not in one the window's cut imposes (initial-
	// condition bias, A. M. Law, "Simulation Modeling and Analysis", 5th ed.,
	// ch. 9.5: the warm-up period). 0 starts the window cold.
	WarmUp time.Duration
	// TimeScale multiplies every arrival offset: 0.5 replays the window twice as
	// fast, in half the time. Must be > 0.
	TimeScale float64
	// RateScale multiplies the request rate while keeping the time shape: each row
	// becomes floor(RateScale) requests, plus one more with probability
	// frac(RateScale); every copy after the first arrives a uniformly random delay
	// in [0, CopyJitter) after the row. Must be > 0.
	RateScale float64
	// CopyJitter spreads the copies of one row (default 1 s of scaled time).
	CopyJitter time.Duration
	// Seed drives the copies' draws and delays.
	Seed uint64
}

// DefaultWorkloadOptions returns the whole trace as it was recorded.
func DefaultWorkloadOptions() WorkloadOptions {
	return WorkloadOptions{TimeScale: 1, RateScale: 1, CopyJitter: time.Second}
}

// Validate reports every invalid option at once.
func (o WorkloadOptions) Validate() error {
	var errs []error
	if o.Start < 0 || o.Length < 0 {
		errs = append(errs, fmt.Errorf("trace window start and length must be >= 0, got %v and %v", o.Start, o.Length))
	}
	if o.WarmUp < 0 {
		errs = append(errs, fmt.Errorf("warm-up must be >= 0, got %v", o.WarmUp))
	}
	if !(o.TimeScale > 0) || math.IsInf(o.TimeScale, 0) {
		errs = append(errs, fmt.Errorf("time scale must be a finite number > 0, got %g", o.TimeScale))
	}
	if !(o.RateScale > 0) || o.RateScale > 1000 {
		errs = append(errs, fmt.Errorf("rate scale must be in (0, 1000], got %g", o.RateScale))
	}
	if o.CopyJitter < 0 {
		errs = append(errs, fmt.Errorf("copy jitter must be >= 0, got %v", o.CopyJitter))
	}
	return errors.Join(errs...)
}

// MinReplay is the shortest replay NewWorkload accepts: one second of virtual
// time. A shorter one has no arrival rate, and its GPU-hours (the oracle's
// too) are about 0, so every ratio to them would be 0/0.
const MinReplay = time.Second

// NewWorkload turns the rows of tr into a workload: the window's rows, after
// the warm-up's (WorkloadOptions.WarmUp, Workload.ScoreFrom). It fails on
// invalid options, on a window without requests, on a replay shorter than
// MinReplay and on one longer than trace.MaxSpan (virtual time).
func NewWorkload(tr trace.Trace, o WorkloadOptions) (Workload, error) {
	if err := o.Validate(); err != nil {
		return Workload{}, err
	}
	rows := slices.Clone(tr.Requests)
	slices.SortStableFunc(rows, func(a, b trace.Request) int { return cmp.Compare(a.Offset, b.Offset) })
	end := time.Duration(math.MaxInt64)
	if o.Length > 0 {
		end = o.Start + o.Length
	}
	warm := min(o.WarmUp, o.Start)
	from := o.Start - warm
	scale := func(d time.Duration) time.Duration { return time.Duration(math.Round(float64(d) * o.TimeScale)) }
	rng := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	whole, frac := math.Modf(o.RateScale)
	var w Workload
	// tooLong reports whether trace time d lasts longer than trace.MaxSpan once
	// scaled (computed in float64: the scaled Duration could overflow).
	tooLong := func(d time.Duration) bool { return float64(d)*o.TimeScale > float64(trace.MaxSpan) }
	for _, r := range rows {
		if r.Offset < from || r.Offset >= end {
			continue
		}
		if tooLong(r.Offset - from) {
			return Workload{}, fmt.Errorf("the replay would last more than %v of virtual time (the window after %v of warm-up, × time scale %g): shorten --length or the time scale", trace.MaxSpan, warm, o.TimeScale)
		}
		at := scale(r.Offset - from)
		copies := int(whole)
		if frac > 0 && rng.Float64() < frac {
			copies++
		}
		for c := range copies {
			a := at
			if c > 0 && o.CopyJitter > 0 {
				a += time.Duration(rng.Int64N(int64(o.CopyJitter)))
			}
			w.Requests = append(w.Requests, Request{At: a, PromptTokens: r.PromptTokens, OutputTokens: r.OutputTokens})
		}
	}
	slices.SortStableFunc(w.Requests, func(a, b Request) int { return cmp.Compare(a.At, b.At) })
	w.ScoreFrom = scale(warm)
	if len(w.Requests) == 0 || !w.Scored(len(w.Requests)-1) {
		return Workload{}, fmt.Errorf("no request in the trace window [%v, %v) of a trace lasting %v", o.Start, end, tr.Duration())
	}
	w.Duration = w.Requests[len(w.Requests)-1].At
	if o.Length > 0 {
		if tooLong(warm + o.Length) {
			return Workload{}, fmt.Errorf("the replay would last more than %v of virtual time (%v of warm-up and %v of window, × time scale %g): shorten --length or the time scale", trace.MaxSpan, warm, o.Length, o.TimeScale)
		}
		w.Duration = max(w.Duration, scale(warm+o.Length))
	}
	if w.Duration < MinReplay {
		return Workload{}, fmt.Errorf("the replay lasts %v, under %v: every arrival of the window falls at one instant (a single row, equal timestamps, or a time scale of %g); give a --length or a longer window", w.Duration, MinReplay, o.TimeScale)
	}
	return w, nil
}
