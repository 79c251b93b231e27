package calibrate

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// The step index of a record that is not part of a step.
const (
	stepWarmup = -1 // sent alone before the steps
	stepProbe  = -2 // sent with its context probe group
)

// The context probe (Config.ContextProbe) runs ProbeRounds rounds of two groups
// of requests sent at once: short prompts (probePromptShort tokens), then long
// ones (up to probePromptLong, within maxModelLen and the KV cache when the
// engine publishes its size), each generating probeOutput tokens. While every
// request of a group is decoding, the engine runs one decode step per token
// with the same batch, so the step time differs between the groups only by
// PerContextToken × the context they hold: on the default engine, with 8
// requests, 8 × 7,900 more tokens add 2.5 ms to a step of 6.3 ms, where the
// warm-up's lone requests see 0.3 ms over 8,000 tokens (see fitStepTime). A
// long group whose requests did not decode together (the KV cache ran out and
// preempted one) halves the next round's long prompt.
const (
	ProbeRounds          = 2
	probePromptShort     = 128
	probePromptLong      = 8000
	probeOutput          = 128
	probeMinPromptLong   = 8 * probePromptShort // a shorter long prompt tells too little
	probeMinDecodeTokens = 16                   // decode tokens of each request in a group's window
	// MaxContextProbe bounds Config.ContextProbe: requests at once in a group.
	MaxContextProbe = 256
)

// ContextProbe is what the context probe measured (Fit.ContextProbe).
type ContextProbe struct {
	// Batch is the requests sent at once in each group, OutputTokens every
	// request's output.
	Batch        int `json:"batch"`
	OutputTokens int `json:"outputTokens"`
	// Groups are the groups whose requests all decoded together, in order.
	Groups []ProbeGroup `json:"groups"`
	// PerContextTokenSeconds is the median over the rounds with both groups of
	// (long step − short step) / (long context − short context); nil when no
	// round had both.
	PerContextTokenSeconds *float64 `json:"perContextTokenSeconds,omitempty"`
}

// ProbeGroup is one group of the context probe while all its requests decoded.
type ProbeGroup struct {
	Round        int  `json:"round"`
	Long         bool `json:"long"`
	PromptTokens int  `json:"promptTokens"`
	// ContextTokens is the context the group's requests held together (prompt
	// and output so far, on average over the window), StepSeconds the median
	// over its requests of their time per output token in the window.
	ContextTokens float64 `json:"contextTokens"`
	StepSeconds   float64 `json:"stepSeconds"`
}

// probePrompts returns the short and the long prompt of a probe of batch
// requests: the long one at most probePromptLong, within maxModelLen (0:
// unknown) and, when the engine publishes its cache size (cache, nil when
// not), with the batch's tokens within 90 % of the KV cache. ok is false, with
// the reason, when the long prompt would be too short to tell the context cost.
func probePrompts(batch, maxModelLen int, cache *cacheConfig) (short, long int, ok bool, why string) {
	long = probePromptLong
	if maxModelLen > 0 {
		long = min(long, maxModelLen-probeOutput)
	}
	if cache != nil && cache.numGPUBlocks > 0 && cache.blockSize > 0 && batch > 0 {
		perRequest := int(0.9*float64(cache.numGPUBlocks)*float64(cache.blockSize)) / batch
		long = min(long, perRequest-probeOutput)
	}
	if long < probeMinPromptLong {
		return 0, 0, false, fmt.Sprintf("the context probe was skipped: a long prompt of %d tokens (within max_model_len and the KV cache) is shorter than %d", max(long, 0), probeMinPromptLong)
	}
	return probePromptShort, long, true, ""
}

// contextProbe runs the probe (see ProbeRounds) after the warm-up. A group
// whose requests fail leaves a note, not an error; errors: ctx's.
func (r *runner) contextProbe(ctx context.Context) error {
	if r.cfg.ContextProbe == 0 {
		return nil
	}
	r.mu.Lock()
	cache := r.cache
	r.mu.Unlock()
	short, long, ok, why := probePrompts(r.cfg.ContextProbe, r.maxModelLen, cache)
	if !ok {
		r.noteProbe(why)
		return nil
	}
	r.progress("context probe: %d rounds of %d requests at once with %d-token prompts, then %d-token ones", ProbeRounds, r.cfg.ContextProbe, short, long)
	for round := range ProbeRounds {
		if long < probeMinPromptLong {
			r.noteProbe(fmt.Sprintf("the context probe stopped after round %d: its long requests did not decode together even with %d-token prompts (preempted: the KV cache is small for %d of them; a smaller --context-probe may do)", round, 2*long, r.cfg.ContextProbe))
			return nil
		}
		for _, p := range []int{short, long} {
			var wg sync.WaitGroup
			recs := make([]*record, r.cfg.ContextProbe)
			for i := range recs {
				rec, id := r.newProbeRecord(Shape{PromptTokens: p, OutputTokens: probeOutput}, round)
				recs[i] = rec
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer r.finished()
					r.complete(ctx, rec, id)
				}()
			}
			wg.Wait()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if p == long { // every request has ended and published its record (wg.Wait)
				if _, ok := probeWindow(recs); !ok {
					long /= 2
				}
			}
		}
	}
	return nil
}

func (r *runner) noteProbe(n string) {
	r.mu.Lock()
	r.notes = append(r.notes, n)
	r.mu.Unlock()
}

// newProbeRecord registers a request of the probe's round with shape s.
func (r *runner) newProbeRecord(s Shape, round int) (*record, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := &record{step: stepProbe, round: round, shape: s, sent: r.since(), first: -1, last: -1, done: -1}
	r.records = append(r.records, rec)
	r.inflight++
	return rec, len(r.records)
}

// probeWindow measures one group: the window from the last first token of
// its requests to the first last token, when every request has at least
// probeMinDecodeTokens decode tokens in it. For each request, the time per
// output token over its chunks in the window (a chunk may carry several
// tokens: its share is the request's tokens per chunk) and its mean context
// there. ok is false when a request failed, the window is too short, or the
// requests did not decode together (one decoded fewer tokens in the window:
// preempted, or not admitted).
func probeWindow(recs []*record) (g ProbeGroup, ok bool) {
	if len(recs) == 0 {
		return g, false
	}
	from, to := time.Duration(math.MinInt64), time.Duration(math.MaxInt64)
	for _, rec := range recs {
		if rec.err != nil || len(rec.times) < 2 || rec.tokens < 2 {
			return g, false
		}
		from, to = max(from, rec.times[0]), min(to, rec.times[len(rec.times)-1])
	}
	var steps []float64
	lo, hi := math.Inf(1), 0.0
	for _, rec := range recs {
		a, _ := slices.BinarySearch(rec.times, from)
		b, found := slices.BinarySearch(rec.times, to)
		if !found {
			b--
		}
		perChunk := float64(rec.tokens) / float64(len(rec.times))
		decoded := float64(b-a) * perChunk
		if decoded < probeMinDecodeTokens {
			return g, false
		}
		lo, hi = math.Min(lo, decoded), math.Max(hi, decoded)
		steps = append(steps, (rec.times[b]-rec.times[a]).Seconds()/decoded)
		// The step producing output token j holds the prompt and j tokens.
		g.ContextTokens += float64(rec.prompt) + perChunk*float64(a+1+b)/2
	}
	// Requests of one batch decode a token each per step: one that decoded
	// fewer was preempted (the KV cache ran out) or not admitted, and the
	// batch was not the group.
	if hi-lo > math.Max(2, 0.02*hi) {
		return g, false
	}
	g.StepSeconds = median(steps)
	return g, true
}

// fitProbe reads the probe's groups into fit.ContextProbe and returns the
// context cost per token they measure (at least 0); ok is false, with a note,
// when no round measured both groups.
func (r *runner) fitProbe(fit *Fit) (perCtx float64, ok bool, notes []string) {
	if r.cfg.ContextProbe == 0 {
		return 0, false, nil
	}
	groups := map[[2]int][]*record{} // by round and long
	for _, rec := range r.records {
		if rec.step != stepProbe {
			continue
		}
		long := 0
		if rec.shape.PromptTokens > probePromptShort {
			long = 1
		}
		groups[[2]int{rec.round, long}] = append(groups[[2]int{rec.round, long}], rec)
	}
	if len(groups) == 0 {
		return 0, false, nil // skipped, with its note
	}
	cp := &ContextProbe{Batch: r.cfg.ContextProbe, OutputTokens: probeOutput}
	fit.ContextProbe = cp
	var slopes []float64
	for round := range ProbeRounds {
		var measured [2]*ProbeGroup
		for long := range 2 {
			recs := groups[[2]int{round, long}]
			g, gok := probeWindow(recs)
			if !gok {
				continue
			}
			g.Round, g.Long, g.PromptTokens = round, long == 1, recs[0].shape.PromptTokens
			cp.Groups = append(cp.Groups, g)
			measured[long] = &g
		}
		if s, l := measured[0], measured[1]; s != nil && l != nil && l.ContextTokens > s.ContextTokens {
			slopes = append(slopes, (l.StepSeconds-s.StepSeconds)/(l.ContextTokens-s.ContextTokens))
		}
	}
	if len(slopes) == 0 {
		notes = append(notes, fmt.Sprintf("the context probe measured no round: in no round did all %d requests of both groups decode %d tokens together (a request failed or was preempted, or the engine runs fewer at once; a smaller --context-probe may do)", cp.Batch, probeMinDecodeTokens))
		return 0, false, notes
	}
	perCtx = median(slopes)
	v := perCtx
	cp.PerContextTokenSeconds = &v
	if perCtx < -1e-12 { // below a picosecond per token: rounding, not a measurement
		notes = append(notes, fmt.Sprintf("the context probe's long prompts decoded faster than its short ones (%.3gs per token): perContextToken set to 0", perCtx))
	}
	return max(perCtx, 0), true, notes
}
