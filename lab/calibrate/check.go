package calibrate

import (
	"errors"
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
	base := reqs[0].sent
	for _, r := range reqs {
		base = min(base, r.sent)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // any instant: the simulator never reads a clock
	recs := make([]record, len(reqs))
	byID := make(map[string]int, len(reqs))
	arrivals := make([]emulator.Arrival, len(reqs))
	for i, r := range reqs {
		id := strconv.Itoa(i)
		byID[id] = i
		recs[i] = record{step: r.step, shape: r.shape, sent: r.sent, first: -1, last: -1, done: -1, prompt: max(1, r.prompt)}
		arrivals[i] = emulator.Arrival{At: r.sent - base, Request: emulator.Request{ID: id, PromptTokens: max(1, r.prompt), MaxTokens: max(1, r.tokens)}}
	}
	offset := func(t time.Time) time.Duration { return base + t.Sub(t0) }
	var steps, stepTokens float64 // vllm:iteration_tokens_total's count and sum
	type done struct {
		end           time.Duration
		steps, tokens float64
	}
	var stepEnds []done
	sim, err := emulator.NewSimulator(cfg, t0, func(res *emulator.StepResult) {
		if res.Scheduled > 0 {
			steps++
			stepTokens += float64(res.ScheduledTokens)
			stepEnds = append(stepEnds, done{offset(res.End), steps, stepTokens})
		}
		for _, tok := range res.Tokens {
			i := byID[tok.ID]
			if tok.Index == 0 {
				recs[i].first = offset(res.End)
			}
			recs[i].last = offset(res.End)
			recs[i].tokens = tok.Index + 1
		}
		for _, f := range res.Finished {
			recs[byID[f.ID]].done = offset(res.End)
		}
	})
	if err != nil {
		return nil, nil, err
	}
	sim.Schedule(arrivals...)
	sorted := make([]time.Duration, len(arrivals))
	for i, a := range arrivals {
		sorted[i] = a.At
	}
	slices.Sort(sorted)
	var samples []sample
	for _, t := range at {
		// RunUntil finishes the step in progress at t; the requests that arrived
		// after t, during that step, were not waiting yet at t (a live engine's
		// gauge counts a request from its arrival).
		sim.RunUntil(t0.Add(t - base))
		snap := sim.Engine().Snapshot()
		after := sim.Now().Sub(t0)
		early, _ := slices.BinarySearch(sorted, t-base+1)
		late, _ := slices.BinarySearch(sorted, after+1)
		q := float64(max(0, snap.Waiting-(late-early)))
		run, kv := float64(snap.Running), snap.KVCacheUsage
		// The steps that ended by t (the one in flight is counted at its end,
		// as vLLM observes the histogram).
		st, tok := 0.0, 0.0
		for k := len(stepEnds) - 1; k >= 0; k-- {
			if stepEnds[k].end <= t {
				st, tok = stepEnds[k].steps, stepEnds[k].tokens
				break
			}
		}
		samples = append(samples, sample{at: t, queue: &q, running: &run, kv: &kv, steps: &st, stepTokens: &tok})
	}
	sim.Drain(t0.Add(limit - base))
	for i := range recs {
		if recs[i].first < 0 {
			recs[i].err = errNoToken
		}
	}
	return recs, samples, nil
}
