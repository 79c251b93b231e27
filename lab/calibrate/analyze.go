package calibrate

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Stat is a gauge over a step: Mean over the step's second half (the steady
// state the step reached), Max over the whole step. Nil when the engine did not
// report the gauge.
type Stat struct {
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
}

// Quantiles are nearest-rank quantiles of the TTFT of a step's requests, in
// seconds; a request that never got a first token counts as infinitely late, and
// a quantile that falls on one is nil ("never").
type Quantiles struct {
	P50 *float64 `json:"p50"`
	P95 *float64 `json:"p95"`
	P99 *float64 `json:"p99"`
}

// StepReport is what one step measured and its verdict.
type StepReport struct {
	// Step is the step's number, from 1.
	Step int `json:"step"`
	// RateRequestsPerSecond is the step's request rate.
	RateRequestsPerSecond float64 `json:"rateRequestsPerSecond"`
	// StartSeconds and DurationSeconds place the step in the run (its start from
	// the run's start, its length), in seconds.
	StartSeconds    float64 `json:"startSeconds"`
	DurationSeconds float64 `json:"durationSeconds"`
	// Truncated: the request cap (Config.MaxRequests) ended the step early; it is
	// not used to find the saturation point.
	Truncated bool `json:"truncated,omitempty"`
	// Sent counts the step's requests, Errors those that failed (FirstError is the
	// first failure's message).
	Sent       int    `json:"sent"`
	Errors     int    `json:"errors"`
	FirstError string `json:"firstError,omitempty"`
	// ThroughputRequestsPerSecond is the requests (of any step) that completed
	// during the step, per second: at overload, the engine's capacity.
	ThroughputRequestsPerSecond float64 `json:"throughputRequestsPerSecond"`
	// PrefillTokensPerSecond is the prompt tokens of the requests whose first token
	// came during the step, per second.
	PrefillTokensPerSecond float64 `json:"prefillTokensPerSecond"`
	// TTFTSeconds are the TTFT quantiles of the step's requests; TTFTQuantileSeconds
	// the one at Config.TTFTQuantile, which the verdict compares with the SLO.
	TTFTSeconds         Quantiles `json:"ttftSeconds"`
	TTFTQuantileSeconds *float64  `json:"ttftQuantileSeconds"`
	// InterTokenLatencySeconds is the mean time between two output tokens of the
	// step's requests (token-weighted); nil when none generated two tokens.
	InterTokenLatencySeconds *float64 `json:"interTokenLatencySeconds"`
	// QueueDepth, Running and KVCacheUsage are the engine's gauges as pkg/signals
	// reads them (waiting requests, running requests, KV-cache usage ratio);
	// Preemptions the preemptions counted during the step. Readings is the number
	// of /metrics readings in the step.
	QueueDepth   *Stat    `json:"queueDepth"`
	Running      *Stat    `json:"running"`
	KVCacheUsage *Stat    `json:"kvCacheUsage"`
	Preemptions  *float64 `json:"preemptions"`
	Readings     int      `json:"readings"`
	// EngineStepSeconds and TokensPerEngineStep are the mean engine step
	// (forward pass) over the step's second half and the tokens it computed,
	// from vllm:iteration_tokens_total; nil when the engine does not export it
	// or was idle at a reading.
	EngineStepSeconds   *float64 `json:"engineStepSeconds,omitempty"`
	TokensPerEngineStep *float64 `json:"tokensPerEngineStep,omitempty"`
	// Pass reports whether the step kept the queue near 0, the TTFT quantile within
	// the SLO and every request successful; Reasons say why not.
	Pass    bool     `json:"pass"`
	Reasons []string `json:"reasons,omitempty"`
}

// nearestRank returns the q-quantile of sorted values by the nearest-rank
// method (rank ceil(q·n)), nil when it is +Inf or there are none.
func nearestRank(sorted []float64, q float64) *float64 {
	if len(sorted) == 0 {
		return nil
	}
	i := min(max(int(math.Ceil(q*float64(len(sorted))-1e-9))-1, 0), len(sorted)-1)
	v := sorted[i]
	if math.IsInf(v, 1) {
		return nil
	}
	v = round(v)
	return &v
}

// gauge summarizes one gauge over the samples of a window: mean over
// [mid, end), max over [start, end); nil when no sample in the second half has it.
func gauge(samples []sample, start, mid, end time.Duration, get func(sample) *float64) *Stat {
	var sum, mx float64
	n, seen := 0, false
	for _, s := range samples {
		v := get(s)
		if v == nil || s.at < start || s.at >= end {
			continue
		}
		if !seen || *v > mx {
			mx = *v
		}
		seen = true
		if s.at >= mid {
			sum += *v
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return &Stat{Mean: round(sum / float64(n)), Max: round(mx)}
}

// judgeStep measures step i over window w and gives its verdict.
func judgeStep(cfg Config, w window, i int, recs []record, samples []sample) StepReport {
	dur := w.end - w.start
	st := StepReport{Step: i + 1, RateRequestsPerSecond: w.rate, StartSeconds: round(w.start.Seconds()), DurationSeconds: round(dur.Seconds()), Truncated: w.truncated}
	measureRequests(&st, cfg, w, i, recs)
	measureGauges(&st, w, samples)
	st.Reasons = failReasons(st, cfg)
	st.Pass = len(st.Reasons) == 0
	return st
}

// measureRequests fills st with what the requests say of step i over window w:
// the step's requests sent and failed, their TTFT quantiles and inter-token
// latency, and the throughput and prefill of the requests of any step that
// completed or got their first token within w.
func measureRequests(st *StepReport, cfg Config, w window, i int, recs []record) {
	var (
		ttfts            []float64
		gapSum           time.Duration
		gaps             int
		completed, first int
		prefill          int
	)
	for _, r := range recs {
		if r.err == nil && r.done >= w.start && r.done < w.end && r.first >= 0 {
			completed++
		}
		if r.first >= w.start && r.first < w.end {
			first++
			prefill += r.prompt
		}
		if r.step != i {
			continue
		}
		st.Sent++
		if r.err != nil {
			st.Errors++
			if st.FirstError == "" {
				st.FirstError = r.err.Error()
			}
		}
		if d, ok := r.ttft(); ok && r.err == nil {
			ttfts = append(ttfts, d.Seconds())
		} else {
			ttfts = append(ttfts, math.Inf(1))
		}
		if r.err == nil && r.tokens >= 2 && r.last > r.first && r.first >= 0 {
			gapSum += r.last - r.first
			gaps += r.tokens - 1
		}
	}
	if dur := w.end - w.start; dur > 0 {
		st.ThroughputRequestsPerSecond = round(float64(completed) / dur.Seconds())
		st.PrefillTokensPerSecond = round(float64(prefill) / dur.Seconds())
	}
	slices.Sort(ttfts)
	st.TTFTSeconds = Quantiles{P50: nearestRank(ttfts, 0.5), P95: nearestRank(ttfts, 0.95), P99: nearestRank(ttfts, 0.99)}
	st.TTFTQuantileSeconds = nearestRank(ttfts, cfg.TTFTQuantile)
	if gaps > 0 {
		v := round((gapSum / time.Duration(gaps)).Seconds())
		st.InterTokenLatencySeconds = &v
	}
}

// measureGauges fills st with what the engine's readings say of window w: the
// gauges (see [gauge]), the readings, the preemptions counted within w and the
// engine steps of its second half.
func measureGauges(st *StepReport, w window, samples []sample) {
	mid := w.start + (w.end-w.start)/2
	st.QueueDepth = gauge(samples, w.start, mid, w.end, func(s sample) *float64 { return s.queue })
	st.Running = gauge(samples, w.start, mid, w.end, func(s sample) *float64 { return s.running })
	st.KVCacheUsage = gauge(samples, w.start, mid, w.end, func(s sample) *float64 { return s.kv })
	var firstP, lastP *float64
	for _, s := range samples {
		if s.at >= w.start && s.at < w.end {
			st.Readings++
			if s.preempted != nil {
				if firstP == nil {
					firstP = s.preempted
				}
				lastP = s.preempted
			}
		}
	}
	if firstP != nil {
		v := max(0, *lastP-*firstP)
		st.Preemptions = &v
	}
	st.EngineStepSeconds, st.TokensPerEngineStep = engineSteps(samples, mid, w.end)
}

// failReasons returns why the measured step st fails: failed requests, a TTFT
// quantile over the SLO (or never reached) and a queue over MaxQueue (or never
// read); none when it passes.
func failReasons(st StepReport, cfg Config) []string {
	var reasons []string
	if st.Errors > 0 {
		reasons = append(reasons, fmt.Sprintf("%d of %d requests failed (first: %s)", st.Errors, st.Sent, st.FirstError))
	}
	switch q := st.TTFTQuantileSeconds; {
	case st.Sent == 0:
		reasons = append(reasons, "no request sent")
	case q == nil:
		reasons = append(reasons, fmt.Sprintf("TTFT p%g: never (requests without a first token)", 100*cfg.TTFTQuantile))
	case *q > cfg.TTFTSLO.Seconds():
		reasons = append(reasons, fmt.Sprintf("TTFT p%g %.3gs > SLO %v", 100*cfg.TTFTQuantile, *q, cfg.TTFTSLO))
	}
	switch {
	case st.QueueDepth == nil:
		reasons = append(reasons, "no queue depth read in the step's second half")
	case st.QueueDepth.Mean > cfg.MaxQueue:
		reasons = append(reasons, fmt.Sprintf("queue %.3g > %g", st.QueueDepth.Mean, cfg.MaxQueue))
	}
	return reasons
}

// engineSteps returns the mean engine step time and tokens per step over the
// samples in [from, to): the time between the first and the last reading over
// the steps counted between them, when every reading there had requests
// running (a busy engine steps back to back).
func engineSteps(samples []sample, from, to time.Duration) (*float64, *float64) {
	var first, last *sample
	for i := range samples {
		s := &samples[i]
		if s.at < from || s.at >= to {
			continue
		}
		if s.steps == nil || s.running == nil || *s.running < 1 {
			return nil, nil
		}
		if first == nil {
			first = s
		}
		last = s
	}
	if first == nil || last == first || *last.steps <= *first.steps {
		return nil, nil
	}
	n := *last.steps - *first.steps
	step := round((last.at - first.at).Seconds() / n)
	tokens := round((*last.stepTokens - *first.stepTokens) / n)
	return &step, &tokens
}

// saturationIndex returns the index of the saturation step (the last passing
// step before the first failing one, truncated steps not counted) and whether a
// failing step was reached; -1 when the first step already fails or none was
// judged.
func saturationIndex(steps []StepReport) (int, bool) {
	sat := -1
	for i, s := range steps {
		if s.Truncated {
			return sat, false
		}
		if !s.Pass {
			return sat, true
		}
		sat = i
	}
	return sat, false
}

// interpolate returns y at x on the piecewise-linear curve through pts (sorted
// by x), extrapolating flat beyond its ends.
func interpolate(pts [][2]float64, x float64) float64 {
	if x <= pts[0][0] {
		return pts[0][1]
	}
	for j := 1; j < len(pts); j++ {
		if x <= pts[j][0] {
			a, b := pts[j-1], pts[j]
			if b[0] == a[0] {
				return b[1]
			}
			return a[1] + (b[1]-a[1])*(x-a[0])/(b[0]-a[0])
		}
	}
	return pts[len(pts)-1][1]
}

// round keeps 4 significant decimals for readable, stable JSON.
func round(v float64) float64 {
	if v == 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return v
	}
	mag := math.Pow(10, 4-math.Ceil(math.Log10(math.Abs(v))))
	return math.Round(v*mag) / mag
}
