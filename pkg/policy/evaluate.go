package policy

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// EngineState is what an engine can do now, judged over the state window.
type EngineState string

// The engine states, from most to least severe. A pod's state is its most
// severe engine's.
const (
	// StateSleeping: vLLM sleep mode (engine_sleep_state awake = 0). The pod is
	// Ready and reports zeros but cannot serve until woken.
	StateSleeping EngineState = "sleeping"
	// StateFrozen: the gauges do not follow the engine. Either they claim work
	// in progress (requests running) while every counter stays flat and the
	// gauges do not move (a stale snapshot, or the engine stopped), or they
	// read 0 while requests complete (trtllm-serve without iteration stats,
	// hazard NC-17: its 0 is unknown, not idle).
	StateFrozen EngineState = "frozen"
	// StateWedged: requests wait, yet nothing completes and the running
	// requests generate next to no token (LivelockTokensPerSecond) across
	// several scrapes, even while prompts are prefilled over and over (a
	// livelock: vLLM 0.27-era deadlocks re-prefill the same prefixes); the
	// engine's /health may still say OK. A long chunked prefill, every counter
	// flat while the KV cache fills, is progress, not this.
	StateWedged EngineState = "wedged"
	// StateClipped: the queue sits at an admission cap (vLLM
	// --max-num-queued-reqs: waiting + running at the policy's QueueCap, or
	// rejections rising while requests wait), so the queue gauge understates
	// demand (hazard NC-02).
	StateClipped EngineState = "clipped"
	// StateOK: none of the above.
	StateOK EngineState = "ok"
)

// EngineStates lists every state, most severe first.
func EngineStates() []EngineState {
	return []EngineState{StateSleeping, StateFrozen, StateWedged, StateClipped, StateOK}
}

func (s EngineState) severity() int {
	switch s {
	case StateSleeping:
		return 4
	case StateFrozen:
		return 3
	case StateWedged:
		return 2
	case StateClipped:
		return 1
	}
	return 0
}

// cannotServe reports whether the state hides capacity that is not there: the
// pod then counts at the unknown-pod saturation, as an unscraped pod does.
func (s EngineState) cannotServe() bool { return s.severity() >= 2 }

// LivelockTokensPerSecond is the generation rate per running request below
// which an engine with waiting requests and nothing finishing is wedged: one
// token per running request per 10 s. A sequence in decode gets a token every
// engine step (tens of milliseconds, even on a saturated engine: decode is
// memory-bound and batched), so a rate this low is no decode at all; the
// running count is taken as at least one.
const LivelockTokensPerSecond = 0.1

// engineState derives an engine's state from its facts under the policy: a
// state of no progress (frozen, wedged) needs at least MinStateReadings
// readings over at least half the state window, all showing it; with fewer,
// the reason says the state was not judged (and why).
func (p *Policy) engineState(f *history.EngineFacts, window time.Duration) (EngineState, string) {
	if f == nil {
		return StateOK, ""
	}
	long := f.Readings >= history.MinStateReadings && f.Span >= window/2
	span := f.Span.Round(time.Second)
	switch {
	case f.Asleep:
		return StateSleeping, "engine_sleep_state awake is 0"
	case long && f.Working && f.HasCounters && f.CountersFlat && f.GaugesFlat:
		return StateFrozen, fmt.Sprintf("requests running but no counter and no gauge moved for %s (%d scrapes)", span, f.Readings)
	case long && f.GaugesDead:
		return StateFrozen, fmt.Sprintf("queue and running read 0 in %d scrapes over %s while %g requests finished: the gauges are not updated "+
			"(trtllm-serve fills them from iteration stats: enable_iter_perf_stats: true); unknown, not idle", f.Readings, span, f.Finished)
	case long && f.Waiting && f.HasTokens && (!f.HasFinished || f.FinishedFlat) && !(f.PromptsFlat && f.KVClimbing):
		rate := f.TokensIncrease / max(f.RunningMean, 1) / f.Span.Seconds()
		switch {
		case f.TokensFlat && f.PromptsFlat:
			return StateWedged, fmt.Sprintf("requests waiting but no token generated and nothing finished for %s (%d scrapes)", span, f.Readings)
		case rate < LivelockTokensPerSecond:
			return StateWedged, fmt.Sprintf("requests waiting, nothing finished and %.2g tokens/s per running request (%g tokens, %.3g running) for %s (%d scrapes): a livelock%s",
				rate, f.TokensIncrease, f.RunningMean, span, f.Readings, promptsNote(f))
		}
	}
	switch {
	case p.QueueCap > 0 && f.InQueue >= p.QueueCap:
		return StateClipped, fmt.Sprintf("waiting + running = %g, at the admission cap %g", f.InQueue, p.QueueCap)
	case f.RejectionsRose && f.InQueue > 0:
		return StateClipped, "admission rejections rising while requests wait"
	case !long && f.Readings > 0:
		return StateOK, notJudged(f, window)
	}
	return StateOK, ""
}

func promptsNote(f *history.EngineFacts) string {
	if f.PromptsFlat {
		return ""
	}
	return " (prompt tokens still prefilled)"
}

// notJudged says why the states of no progress were not judged: too few
// readings in the state window, or too short a span.
func notJudged(f *history.EngineFacts, window time.Duration) string {
	if f.Readings < history.MinStateReadings {
		return fmt.Sprintf("state not judged: %d %s, need %d", f.Readings, plural(f.Readings, "scrape"), history.MinStateReadings)
	}
	return fmt.Sprintf("state not judged: %d scrapes over %s, need %s", f.Readings, f.Span.Round(time.Second), window/2)
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// TermValue is one term of a pod's (or a pool's) saturation.
type TermValue struct {
	// Term is the term's kind ("queueDepth", "ttft", …).
	Term TermKind `json:"term"`
	// Value is the measured value (requests, ratio, per second, seconds);
	// SetPoint the term's set point (the SLO for latency terms); Ratio =
	// Value / SetPoint, capped at the term's MaxRatio (Capped then says so).
	Value    float64 `json:"value"`
	SetPoint float64 `json:"setPoint"`
	Ratio    float64 `json:"ratio"`
	Capped   bool    `json:"capped,omitempty"`
	// Dropped reports a term without a value, for the reason Note gives (a
	// latency window whose histogram is inconsistent); it counts for nothing.
	Dropped bool `json:"dropped,omitempty"`
	// Note says how the value was obtained when that is not plain ("no new
	// observations while requests wait: at least the SLO", "from the state
	// pool", the quantile and window).
	Note string `json:"note,omitempty"`
}

// EngineReport is one engine's state in a PodReport.
type EngineReport struct {
	ID     string      `json:"id"`
	Model  string      `json:"model,omitempty"`
	State  EngineState `json:"state"`
	Reason string      `json:"reason,omitempty"`
}

// PodReport is a pod's evaluation under one policy in detail, for explain.
type PodReport struct {
	// Fresh reports that the newest reading is within the max age.
	Fresh bool `json:"fresh"`
	// State is the pod's state (its most severe engine's) and Engines each
	// engine's.
	State   EngineState    `json:"state"`
	Engines []EngineReport `json:"engines,omitempty"`
	// Terms are the pod's own terms, latency terms included (over the pod's own
	// observations); Dominant names the term with the highest ratio.
	Terms    []TermValue `json:"terms"`
	Dominant TermKind    `json:"dominant,omitempty"`
	// Saturation is the pod's own saturation (max of its term ratios), nil when
	// it has no term.
	Saturation *float64 `json:"saturation"`
	// Counted is what the pod adds to the pool: its saturation without latency
	// terms (pooled instead), the unknown-pod saturation for a pod that cannot
	// serve or has no fresh data, or its held last good value.
	Counted float64 `json:"counted"`
	// Why says why the pod counts other than by its own terms.
	Why string `json:"why,omitempty"`
}

// podEval is the evaluation of one pod under a saturation policy.
type podEval struct {
	fresh   bool
	known   bool    // fresh, can serve, and has a term
	sat     float64 // own saturation, latency terms included (when known)
	part    float64 // contribution to the pool
	state   EngineState
	held    bool
	busy    bool // requests waiting or running in the newest fresh reading
	why     string
	at      time.Time
	history *history.History
}

// fresh reports whether the newest reading of h is within maxAge of now.
func fresh(h *history.History, now time.Time, maxAge time.Duration) (*signals.Reading, bool) {
	r := h.Latest()
	if r == nil {
		return nil, false
	}
	return r, now.Sub(r.At()) <= maxAge
}

// evalSaturation evaluates one pod under a KindMean or KindDemand policy;
// report, when not nil, receives the details.
func (p *Policy) evalSaturation(h *history.History, why string, now time.Time, maxAge time.Duration, report *PodReport, ownLatency bool) podEval {
	ev := podEval{state: StateOK, part: p.UnknownSaturation, history: h}
	r, ok := fresh(h, now, maxAge)
	if report != nil {
		report.State = StateOK
	}
	if !ok {
		ev.why = unknownWhy(r, why, now, maxAge)
		p.holdLastGood(&ev, h, r, now)
		if report != nil {
			report.Counted, report.Why = ev.part, ev.why
		}
		return ev
	}
	ev.fresh, ev.at = true, r.At()
	q, _ := r.Value(signals.QueueDepth)
	qd, _ := r.Value(signals.QueueDeferred)
	run, _ := r.Value(signals.Running)
	ev.busy = q+qd+run > 0
	// Engine states. Engines that cannot serve are left out of the pod's
	// terms; the others still count (see judge).
	state, stateWhy, unable := p.engineStates(h, r, report)
	ev.state = state
	var terms *[]TermValue
	if report != nil {
		report.Fresh, report.State = true, ev.state
		terms = &report.Terms
	}
	own, part, has := p.podTerms(h, r, unable, terms, ownLatency || report != nil)
	served := has // some engine that can serve has a term
	if !has && len(unable) > 0 {
		// No engine that can serve is left: the terms of them all, for the
		// report; the pod counts as unknown.
		own, part, has = p.podTerms(h, r, nil, terms, ownLatency || report != nil)
	}
	if report != nil && has {
		s := own
		report.Saturation = &s
		best := -1.0
		for _, t := range report.Terms {
			if !t.Dropped && t.Ratio > best {
				best, report.Dominant = t.Ratio, t.Term
			}
		}
	}
	p.judge(&ev, h, r, stateWhy, served, has, own, part)
	if report != nil {
		report.Counted, report.Why = ev.part, ev.why
	}
	return ev
}

// unknownWhy says why a pod without a fresh reading (r: its latest, nil when
// none) has no value; why is the scrape's own error, if any.
func unknownWhy(r *signals.Reading, why string, now time.Time, maxAge time.Duration) string {
	if r == nil {
		if why == "" {
			return "not scraped yet"
		}
		return why
	}
	age := now.Sub(r.At()).Round(time.Millisecond)
	out := fmt.Sprintf("stale: last good scrape %s ago (max age %s)", age, maxAge)
	if !r.SampleTime.IsZero() && r.SampleTime.Before(r.Time) {
		out = fmt.Sprintf("stale: its samples are timestamped %s before now (max age %s)", age, maxAge)
	}
	if why != "" {
		out += "; " + why
	}
	return out
}

// holdLastGood counts an unknown pod at its last good saturation while that is
// higher than the unknown-pod saturation and not older than HoldLastGood.
func (p *Policy) holdLastGood(ev *podEval, h *history.History, r *signals.Reading, now time.Time) {
	if r == nil || p.HoldLastGood <= 0 || now.Sub(r.At()) > p.HoldLastGood {
		return
	}
	if _, last, has := p.podTerms(h, r, nil, nil, false); has && last > ev.part {
		ev.part, ev.held = last, true
		ev.why += fmt.Sprintf("; counted at its last good saturation %.3g until %s old", last, p.HoldLastGood)
	}
}

// engineStates judges the engines of r that serve the policy's model: the
// pod's worst state and why, and the engines that cannot serve. Each engine
// is added to report when it is not nil.
func (p *Policy) engineStates(h *history.History, r *signals.Reading, report *PodReport) (state EngineState, why string, unable []string) {
	state = StateOK
	for i := range r.Engines {
		e := &r.Engines[i]
		if p.Model != "" && !signals.SameModel(e.Model, p.Model) {
			continue
		}
		st, reason := p.engineState(h.FactsOf(e.ID), h.StateWindow())
		if report != nil {
			report.Engines = append(report.Engines, EngineReport{ID: e.ID, Model: e.Model, State: st, Reason: reason})
		}
		if st.cannotServe() {
			unable = append(unable, e.ID)
		}
		if st.severity() > state.severity() {
			state, why = st, fmt.Sprintf("engine %q %s: %s", e.ID, st, reason)
		}
	}
	return state, why, unable
}

// judge sets what a fresh pod counts from its engines' state and terms: own
// and part are its terms' saturation (with and without latency terms), has
// reports a term at all and served one of an engine that can serve.
func (p *Policy) judge(ev *podEval, h *history.History, r *signals.Reading, stateWhy string, served, has bool, own, part float64) {
	switch {
	case ev.state.cannotServe() && !served:
		ev.why = stateWhy + fmt.Sprintf("; counts at the unknown-pod saturation %g", p.UnknownSaturation)
	case ev.state.cannotServe():
		// A pod is not its worst engine: its other engines' load still counts
		// (a data-parallel rank wedged beside one with 40 waiting; model B
		// asleep beside model A's queue), at least at the unknown-pod
		// saturation for the engines that cannot serve.
		ev.known, ev.sat, ev.part = true, max(own, p.UnknownSaturation), max(part, p.UnknownSaturation)
		ev.why = stateWhy + fmt.Sprintf("; counts max(its other engines' saturation %.3g, the unknown-pod saturation %g)", part, p.UnknownSaturation)
	case !has:
		ev.why = "no valid term"
		if p.Model != "" && signals.FoldEngines(r.Engines, signals.EngineFilter(r, p.Model)).EngineCount == 0 {
			ev.why = fmt.Sprintf("no engine serves model %q", p.Model)
		}
		ev.why += firstWarnings(r.Warnings)
	default:
		ev.known, ev.sat, ev.part = true, own, part
		if ev.state == StateClipped {
			// The queue gauge understates demand: at least saturated, and when
			// both rates are known, the demand the engine turned away in replicas
			// ((finished + rejected) / finished).
			clip := p.UnknownSaturation
			if lost, ok := p.lostDemand(h); ok {
				clip = max(clip, lost)
			}
			if clip > ev.part {
				ev.part = clip
			}
			ev.why = stateWhy + fmt.Sprintf("; counts at least %.3g", clip)
		}
	}
}

// lostDemand returns (finished + rejected) / finished over the last
// DefaultTermWindow, for a clipped pod.
func (p *Policy) lostDemand(h *history.History) (float64, bool) {
	w := h.Window(history.WindowKey{Window: DefaultTermWindow, Model: p.Model})
	fin, ok1 := w.Increases.Value(signals.RequestsFinished)
	rej, ok2 := w.Increases.Value(signals.Rejections)
	if !w.OK || !ok1 || !ok2 || fin <= 0 {
		return 0, false
	}
	return (fin + rej) / fin, true
}

// podTerms computes a pod's terms from reading r (the newest of h), leaving out
// the engines whose IDs are in unable (they cannot serve): own is its
// saturation with its own latency terms (when latency is set; else the same as
// part), part without them (the pool adds pooled latency instead); has is false
// when no term has a value (or no engine is left). terms, when not nil,
// receives each term with a note.
func (p *Policy) podTerms(h *history.History, r *signals.Reading, unable []string, terms *[]TermValue, latency bool) (own, part float64, has bool) {
	keep := signals.EngineFilter(r, p.Model)
	if len(unable) > 0 {
		base := keep
		keep = func(e *signals.EngineSignals) bool {
			return (base == nil || base(e)) && !slices.Contains(unable, e.ID)
		}
	}
	f := &r.Fold
	if p.Model != "" || len(unable) > 0 {
		mf := signals.FoldEngines(r.Engines, keep)
		if mf.EngineCount == 0 {
			return 0, 0, false
		}
		f = &mf
	}
	partHas := false
	for i := range p.Terms {
		t := &p.Terms[i]
		if t.Kind.IsLatency() && !latency {
			continue
		}
		v, note, ok := p.termValue(t, h, r, keep, f, terms != nil)
		if !ok {
			if terms != nil && note != "" {
				*terms = append(*terms, TermValue{Term: t.Kind, SetPoint: t.SetPoint, Note: note, Dropped: true})
			}
			continue
		}
		ratio, capped := t.ratio(v)
		if terms != nil {
			*terms = append(*terms, TermValue{Term: t.Kind, Value: v, SetPoint: t.SetPoint, Ratio: ratio, Capped: capped, Note: note})
		}
		if !has || ratio > own {
			own = ratio
		}
		has = true
		if !t.Kind.IsLatency() && (!partHas || ratio > part) {
			part, partHas = ratio, true
		}
	}
	return own, part, has
}

// termValue returns one term's value for a pod and, when withNote is set, a
// note on how it was obtained; ok is false when the pod has no value for it.
func (p *Policy) termValue(t *Term, h *history.History, r *signals.Reading, keep func(*signals.EngineSignals) bool, f *signals.Fold, withNote bool) (v float64, note string, ok bool) {
	switch t.Kind {
	case TermQueueDepth:
		v, ok = f.Value(signals.QueueDepth)
		if d, dok := f.Value(signals.QueueDeferred); withNote && ok && dok && d > 0 {
			note = fmt.Sprintf("%g deferred waits not counted (more replicas would not shorten them)", d)
		}
		return v, note, ok
	case TermKVCacheUsage:
		v, ok = f.Value(signals.KVCacheUsage)
		if ok && v > 0 && idle(f) {
			// An idle engine still reports a few blocks in use: vLLM v1 up to 0.10
			// counts its reserved null block (vllm/v1/core/block_pool.py get_usage,
			// 1 - free/num_gpu_blocks), and engines that keep cached prefixes may count
			// them; a P/D prefill engine keeps finished requests' blocks until the
			// decoder pulls them (hazard NC-03), which more prefill replicas would not
			// free. None of it is demand: with it, ceil(total / target) never reaches 0
			// and an HPA with minReplicas 0 never scales to zero.
			if withNote {
				note = fmt.Sprintf("%.4g reported, but nothing runs or waits: blocks held for no request here (null block, cached prefixes, KV pinned for transfer) are not demand", v)
			}
			return 0, note, true
		}
		return v, "", ok
	case TermBatchSlots:
		return batchSlots(t, r, keep, f, withNote)
	case TermPreemptionRate:
		w := h.Window(history.WindowKey{Window: t.Window, Model: p.Model})
		inc, has := w.Increases.Value(signals.Preemptions)
		if !w.OK || !has || w.Span <= 0 {
			return 0, "", false
		}
		if withNote {
			note = fmt.Sprintf("over %s", w.Span.Round(time.Second))
		}
		return inc / w.Span.Seconds(), note, true
	case TermDemandRate:
		return demandRate(t, h, p.Model, withNote)
	}
	hk, _ := t.Kind.histo()
	w := h.Window(history.WindowKey{Window: t.Window, Model: p.Model})
	if !w.OK {
		return 0, "", false
	}
	if w.Inconsistent[hk] {
		return 0, fmt.Sprintf("dropped: a bucket of the %s histogram fell while its count rose within %s (a broken exposition, not a restart)", hk, t.Window), false
	}
	q, _ := f.Value(signals.QueueDepth)
	qd, _ := f.Value(signals.QueueDeferred)
	run, _ := f.Value(signals.Running)
	return latencyValue(t, w.Histograms[hk], q+qd+run > 0, withNote)
}

// demandRate is a pod's arrivals per second over the term's window: the
// requests its engines finished (every finished_reason, aborts included) and
// rejected, plus the growth of what they hold (waiting, deferred and running)
// between the window's first and newest readings. Without the finished counter
// there is no value; without the gauges at both ends (a window built from
// increases only, as the Prometheus source's is) the rate is the completion
// rate.
func demandRate(t *Term, h *history.History, model string, withNote bool) (float64, string, bool) {
	w := h.Window(history.WindowKey{Window: t.Window, Model: model})
	fin, ok := w.Increases.Value(signals.RequestsFinished)
	if !w.OK || !ok || w.Span <= 0 {
		return 0, "", false
	}
	arrived := fin
	if rej, ok := w.Increases.Value(signals.Rejections); ok {
		arrived += rej
	}
	note := ""
	if w.HeldKnown {
		arrived = max(0, arrived+w.HeldChange)
	} else if withNote {
		note = "completions only (no gauges at the window's start)"
	}
	if withNote && note == "" {
		note = fmt.Sprintf("%g arrived over %s", math.Round(arrived), w.Span.Round(time.Second))
	}
	return arrived / w.Span.Seconds(), note, true
}

// idle reports whether f says the pod has nothing running and nothing waiting
// (deferred waits included). It is false unless every engine of the fold
// reported both running and waiting validly: an unknown gauge (absent, or a
// rejected NaN on one data-parallel rank) is no evidence of idleness, and the
// KV term then stands.
func idle(f *signals.Fold) bool {
	if !f.Complete(signals.Running) || !f.Complete(signals.QueueDepth) {
		return false
	}
	run, _ := f.Value(signals.Running)
	q, _ := f.Value(signals.QueueDepth)
	qd, _ := f.Value(signals.QueueDeferred)
	return run == 0 && q+qd == 0
}

// latencyValue is a latency term's value over a window's observations: their
// quantile; with no observation while requests wait or run, the SLO itself
// (at least the SLO: never NaN, never a stale low value); with no observation
// and nothing in flight, no value (an idle window drops the term).
func latencyValue(t *Term, obs *signals.Histogram, busy, withNote bool) (float64, string, bool) {
	if q, ok := obs.Quantile(t.Quantile); ok {
		note := ""
		if withNote {
			note = fmt.Sprintf("p%g over %s, %g observations", t.Quantile*100, t.Window, obs.Count)
		}
		return q, note, true
	}
	if busy {
		return t.SetPoint, "no new observations while requests wait: at least the SLO", true
	}
	return 0, "", false
}

// batchSlots is running / slots (the engines' own limits, else MaxNumSeqs per
// engine), or the state pool's usage when higher.
func batchSlots(t *Term, r *signals.Reading, keep func(*signals.EngineSignals) bool, f *signals.Fold, withNote bool) (float64, string, bool) {
	running, hasRun := f.Value(signals.Running)
	slots := 0.0
	for i := range r.Engines {
		e := &r.Engines[i]
		if keep != nil && !keep(e) {
			continue
		}
		if m, ok := e.Value(signals.MaxRunning); ok && m > 0 {
			slots += m
		} else if t.MaxNumSeqs > 0 {
			slots += t.MaxNumSeqs
		}
	}
	v, note, ok := 0.0, "", false
	if hasRun && slots > 0 {
		v, ok = running/slots, true
		if withNote {
			note = fmt.Sprintf("%g running of %g slots", running, slots)
		}
	}
	if su, has := f.Value(signals.StateUsage); has && (!ok || su > v) {
		v, note, ok = su, "state pool usage (hybrid model)", true
	}
	return v, note, ok
}

// firstWarnings renders up to two of a reading's warnings for a message.
func firstWarnings(w []string) string {
	switch {
	case len(w) == 0:
		return ""
	case len(w) <= 2:
		return " (" + w[0] + joinRest(w[1:]) + ")"
	}
	return fmt.Sprintf(" (%s; %s; and %d more)", w[0], w[1], len(w)-2)
}

func joinRest(w []string) string {
	out := ""
	for _, s := range w {
		out += "; " + s
	}
	return out
}

// ExplainPod evaluates one pod under the policy in detail, as the pool does
// (PoolBuilder.Add), at now with readings older than maxAge stale. For a
// KindSignal policy the report has no terms and Counted is the signal.
func (p *Policy) ExplainPod(h *history.History, why string, now time.Time, maxAge time.Duration) PodReport {
	var rep PodReport
	if p.Kind == KindSignal {
		r, ok := fresh(h, now, maxAge)
		rep.Fresh, rep.State = ok, StateOK
		if ok {
			if v, has := p.signalValue(r); has {
				rep.Counted = v
				rep.Saturation = &v
			}
		}
		return rep
	}
	p.evalSaturation(h, why, now, maxAge, &rep, true)
	return rep
}

// signalValue returns a KindSignal policy's signal for a reading.
func (p *Policy) signalValue(r *signals.Reading) (float64, bool) {
	f := &r.Fold
	if p.Model != "" {
		mf := signals.FoldEngines(r.Engines, signals.EngineFilter(r, p.Model))
		f = &mf
	}
	v, ok := f.Value(p.Signal)
	if ok && (math.IsNaN(v) || math.IsInf(v, 0)) {
		return 0, false
	}
	return v, ok
}
