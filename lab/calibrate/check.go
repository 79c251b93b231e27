package calibrate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
)

// ProfileCheck is the fitted profile replayed: the steps' requests, at the times
// and sizes they were sent, on lab/emulator's simulator with the profile, judged
// by the same rules as the live steps.
type ProfileCheck struct {
	// SaturationRateRequestsPerSecond is the saturation point the profile
	// predicts; nil when its first step already fails.
	SaturationRateRequestsPerSecond *float64 `json:"saturationRateRequestsPerSecond"`
	// CapacityRequestsPerSecond is the most requests per second it completes in a step.
	CapacityRequestsPerSecond float64 `json:"capacityRequestsPerSecond"`
	// Steps are the simulated steps.
	Steps []StepReport `json:"steps"`
	// Agrees reports whether the profile reproduces the engine: the replay's
	// saturation point is within SaturationTolerance of the measured one.
	// Without a measured saturation point (the first step already failed)
	// nothing checks the profile, and it does not agree. Disagreement says why
	// when not.
	Agrees       bool   `json:"agrees"`
	Disagreement string `json:"disagreement,omitempty"`
}

// SaturationTolerance is how far, as a fraction of the measured saturation
// rate, the fitted profile's saturation point may lie from it and still count
// as reproducing the engine: 10 %, the tolerance the project sets for the
// emulator's saturation point against a real engine's. With steps 2
// requests/s apart it asks for the same step below 20 requests/s.
const SaturationTolerance = 0.1

// judge sets Agrees and Disagreement against the measured saturation point
// (nil when the engine's first step already failed).
func (c *ProfileCheck) judge(measured *Saturation) {
	got := c.SaturationRateRequestsPerSecond
	switch {
	case measured == nil && got == nil:
		c.Disagreement = "the engine failed the first step, so no saturation point checks the profile (lower the rates)"
	case measured == nil:
		c.Disagreement = fmt.Sprintf("the profile saturates at %g requests/s, the engine failed the first step", *got)
	case got == nil:
		c.Disagreement = fmt.Sprintf("the profile fails the first step, the engine saturated at %g requests/s", measured.RateRequestsPerSecond)
	case math.Abs(*got-measured.RateRequestsPerSecond) > SaturationTolerance*measured.RateRequestsPerSecond:
		c.Disagreement = fmt.Sprintf("the profile saturates at %g requests/s, the engine at %g (more than %.0f %% apart)",
			*got, measured.RateRequestsPerSecond, 100*SaturationTolerance)
	default:
		c.Agrees = true
	}
}

// errNoToken marks a replayed request that got no token: the simulated engine
// rejected it (longer than maxModelLen) or it still waited when the replay ended.
var errNoToken = errors.New("no token in the replay")

// checkProfile replays the live steps' requests on a simulated engine of shape
// cfg (see ProfileCheck).
func (r *runner) checkProfile(cfg emulator.Config, windows []window) (*ProfileCheck, error) {
	base, end := windows[0].start, windows[len(windows)-1].end
	var sent []record
	for _, rec := range r.records {
		if rec.step < 0 {
			continue
		}
		c := *rec
		if rec.err != nil || rec.tokens < 1 {
			c.tokens = rec.shape.OutputTokens
		}
		sent = append(sent, c)
	}
	// Read at the live readings' times: the same phases against the arrivals
	// (an arrival waits until the next engine step, so a reading at an arrival's
	// instant sees it queued).
	var at []time.Duration
	for _, s := range r.samples {
		if s.at >= base && s.at < end {
			at = append(at, s.at)
		}
	}
	recs, samples, err := replay(cfg, sent, at, end+r.cfg.RequestTimeout)
	if err != nil {
		return nil, err
	}
	chk := &ProfileCheck{}
	for i, w := range windows {
		st := judgeStep(r.cfg, w, i, recs, samples)
		chk.Steps = append(chk.Steps, st)
		chk.CapacityRequestsPerSecond = max(chk.CapacityRequestsPerSecond, st.ThroughputRequestsPerSecond)
	}
	if sat, _ := saturationIndex(chk.Steps); sat >= 0 {
		v := chk.Steps[sat].RateRequestsPerSecond
		chk.SaturationRateRequestsPerSecond = &v
	}
	return chk, nil
}

// replay runs requests on a simulated engine of shape cfg (lab/emulator's
// Simulator, virtual time): each arrives at its sent time with its prompt
// tokens and generates its tokens (output tokens; both at least 1). It returns
// the requests as a client would have seen them (first and last token, end,
// tokens; errNoToken for those without a token by limit) and a reading of the
// engine at each of the times at (increasing). Times are offsets from the run's
// start.
func replay(cfg emulator.Config, reqs []record, at []time.Duration, limit time.Duration) ([]record, []sample, error) {
	if len(reqs) == 0 {
		return nil, nil, nil
	}
	rp := newReplayRun(reqs)
	sim, err := emulator.NewSimulator(cfg, rp.t0, rp.observe)
	if err != nil {
		return nil, nil, err
	}
	sim.Schedule(rp.arrivals...)
	var samples []sample
	for _, t := range at {
		samples = append(samples, rp.readingAt(sim, t))
	}
	sim.Drain(rp.t0.Add(limit - rp.base))
	for i := range rp.recs {
		if rp.recs[i].first < 0 {
			rp.recs[i].err = errNoToken
		}
	}
	return rp.recs, samples, nil
}

// replayRun is one replay in progress: the requests as the client sees them
// and the engine steps that ended, filled by observe as the simulator runs.
type replayRun struct {
	// base is the earliest request's sent time, the simulator's t0.
	base time.Duration
	t0   time.Time
	// recs are the requests as the client sees them, byID their index by the
	// simulator's request ID; arrivals the simulator's requests.
	recs     []record
	byID     map[string]int
	arrivals []emulator.Arrival
	// arrivedAt are the arrivals' times from base, sorted.
	arrivedAt []time.Duration
	// steps and stepTokens are vllm:iteration_tokens_total's count and sum so
	// far; stepEnds their values at the end of each step that scheduled work.
	steps, stepTokens float64
	stepEnds          []replayStep
}

// replayStep is an engine step of a replay: its end and the step count and
// tokens then.
type replayStep struct {
	end           time.Duration
	steps, tokens float64
}

// newReplayRun returns the replay of reqs, which must not be empty: each
// request arrives at its sent time less the earliest's.
func newReplayRun(reqs []record) *replayRun {
	base := reqs[0].sent
	for _, r := range reqs {
		base = min(base, r.sent)
	}
	rp := &replayRun{
		base:     base,
		t0:       time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), // any instant: the simulator never reads a clock
		recs:     make([]record, len(reqs)),
		byID:     make(map[string]int, len(reqs)),
		arrivals: make([]emulator.Arrival, len(reqs)),
	}
	for i, r := range reqs {
		id := strconv.Itoa(i)
		rp.byID[id] = i
		rp.recs[i] = record{step: r.step, round: r.round, shape: r.shape, sent: r.sent, first: -1, last: -1, done: -1, prompt: max(1, r.prompt)}
		rp.arrivals[i] = emulator.Arrival{At: r.sent - base, Request: emulator.Request{ID: id, PromptTokens: max(1, r.prompt), MaxTokens: max(1, r.tokens)}}
	}
	rp.arrivedAt = make([]time.Duration, len(rp.arrivals))
	for i, a := range rp.arrivals {
		rp.arrivedAt[i] = a.At
	}
	slices.Sort(rp.arrivedAt)
	return rp
}

// offset returns the simulator's time t as an offset from the run's start.
func (rp *replayRun) offset(t time.Time) time.Duration { return rp.base + t.Sub(rp.t0) }

// observe records one engine step: the step count and tokens, the requests'
// tokens and the requests that finished.
func (rp *replayRun) observe(res *emulator.StepResult) {
	end := rp.offset(res.End)
	if res.Scheduled > 0 {
		rp.steps++
		rp.stepTokens += float64(res.ScheduledTokens)
		rp.stepEnds = append(rp.stepEnds, replayStep{end, rp.steps, rp.stepTokens})
	}
	for _, tok := range res.Tokens {
		i := rp.byID[tok.ID]
		if tok.Index == 0 {
			rp.recs[i].first = end
		}
		rp.recs[i].last = end
		rp.recs[i].tokens = tok.Index + 1
		if rp.recs[i].step == stepProbe {
			rp.recs[i].times = append(rp.recs[i].times, end)
		}
	}
	for _, f := range res.Finished {
		rp.recs[rp.byID[f.ID]].done = end
	}
}

// readingAt runs sim to t (an offset from the run's start) and returns the
// reading a scrape of the engine would give then.
func (rp *replayRun) readingAt(sim *emulator.Simulator, t time.Duration) sample {
	// RunUntil finishes the step in progress at t; the requests that arrived
	// after t, during that step, were not waiting yet at t (a live engine's
	// gauge counts a request from its arrival).
	sim.RunUntil(rp.t0.Add(t - rp.base))
	snap := sim.Engine().Snapshot()
	after := sim.Now().Sub(rp.t0)
	early, _ := slices.BinarySearch(rp.arrivedAt, t-rp.base+1)
	late, _ := slices.BinarySearch(rp.arrivedAt, after+1)
	q := float64(max(0, snap.Waiting-(late-early)))
	run, kv := float64(snap.Running), snap.KVCacheUsage
	// The steps that ended by t (the one in flight is counted at its end,
	// as vLLM observes the histogram).
	st, tok := 0.0, 0.0
	for k := len(rp.stepEnds) - 1; k >= 0; k-- {
		if rp.stepEnds[k].end <= t {
			st, tok = rp.stepEnds[k].steps, rp.stepEnds[k].tokens
			break
		}
	}
	return sample{at: t, queue: &q, running: &run, kv: &kv, steps: &st, stepTokens: &tok}
}
