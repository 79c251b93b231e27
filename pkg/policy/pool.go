package policy

import (
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// PodValue is one pod's part in a pool, as PoolBuilder.Add computed it.
type PodValue struct {
	// Known reports whether the pod had a fresh reading with a value under the
	// policy from engines that can serve (not wedged, frozen or sleeping); a
	// pod with some engines that cannot serve is known by its others (and
	// counts at least at the unknown-pod saturation).
	Known bool
	// Present reports whether the pod has a value of its own under the policy:
	// its saturation (KindMean, KindDemand) or the raw signal (KindSignal). A pod
	// without one is left out of a per-pod answer.
	Present bool
	// Value is the pod's own value when Present: saturation in multiples of the
	// set point (its own latency terms included), or the signal in its unit.
	Value float64
	// Time is the time of the reading behind Value.
	Time time.Time
	// State is the pod's engine state (its most severe engine's).
	State EngineState
	// Held reports that the pod, without fresh data, counts at its last good
	// value (HoldLastGood).
	Held bool
	// Why says why the pod is not Known, is Held or counts by its state.
	Why string
}

// Pool is the value of a policy over a pool of pods: what one HPA request is
// answered from.
type Pool struct {
	// Pods is the number of pods added; Fresh of them had a fresh reading, Known
	// fresh, usable data; Held of the others count at their last good value.
	Pods, Fresh, Known, Held int
	// States counts the known pods by engine state, and the pods that cannot
	// serve (wedged, frozen, sleeping).
	States map[EngineState]int
	// Value is the policy's value (see PoolBuilder), nil when no pod is known
	// (or, for KindSignal, when no known pod reports the signal): never 0 for
	// "no data".
	Value *float64
	// Latency holds the pooled latency terms of the policy that had a value.
	Latency []TermValue
	// Gateway is the gateway queue added, nil without a gateway input.
	Gateway *float64
	// Oldest is the time of the oldest reading behind a known pod.
	Oldest time.Time
	// Ahead, when set, says how a peak hold or a scheduled minimum moved Value
	// (Policy.Ahead).
	Ahead *AheadValue
	// Starting is the number of pods a scale-up created that are still
	// starting (see PoolBuilder.AddStarting); while any is, a demand policy's
	// Value is at least Pods + Starting. InFlight says so, for explain and the
	// HPA's Event ("" when none).
	Starting int
	InFlight string
	// Measured is what the pods and the gateway measured, when Value holds
	// more (nil otherwise): Value before the floor of the pods still starting,
	// and with the pods without a fresh value counted at the known pods' mean
	// instead of their placeholder (UnknownSaturation, a held value) when
	// that is less. A peak hold or a trend records it (Policy.Ahead): a
	// placeholder or a floor is one answer's caution, not a demand to hold.
	Measured *float64
}

// PoolBuilder folds the pods of one pool into a Pool under one policy, one pod
// at a time. It is the one pooling path of the adapter: the External provider,
// the per-pod provider, explain and simulate all use it, so they give identical
// numbers by construction. The zero value is not usable; see Policy.NewPool.
//
// The value per kind:
//
//   - KindMean: the mean over the pods of each pod's part, then the maximum with
//     each pooled latency term's ratio; KindDemand: the sum, then the maximum
//     with each pooled latency ratio × pods. A pod's part is the maximum of its
//     non-latency term ratios; latency terms are pooled: the quantile of every
//     known pod's observations over the window together (a window without
//     observations while requests wait counts at the SLO, an idle one drops the
//     term).
//   - A pod without fresh data counts at UnknownSaturation, or, for
//     HoldLastGood after its last good reading, at that reading's saturation
//     when higher: a pod that goes dark while saturated stays saturated, so a
//     partial outage never scales a pool down (the HPA's own rule for missing
//     pod metrics, Kubernetes v1.37 pkg/controller/podautoscaler/replica_calculator.go:
//     missing data may dampen a change, never reverse it). A wedged, frozen or
//     sleeping pod counts at UnknownSaturation; a clipped one at least at it.
//   - KindSignal: counts add up and ratios are averaged over the pods; a pod
//     without fresh data counts at its last good value (within HoldLastGood) or
//     at the mean of the known pods, whichever is higher, so a sum never
//     shrinks because pods stopped reporting. A raw signal has no set point,
//     so the HPA's own rule (a missing pod at the target on scale-down)
//     cannot be applied to it: while any counted pod has no fresh reading
//     and no held value (it never reported, or went dark longer than
//     HoldLastGood ago) the pool has none (the server answers 503 naming the
//     pods and the HPA holds), rather than counting it at the known pods'
//     mean (3 of 4 pods failing from the start at the fourth's 0 drove an HPA
//     4 → 1, issue 20). A pod with a fresh reading whose series of the signal
//     are absent or all rejected counts at the known pods' mean, so that one
//     pod's NaN never poisons the pool (hazard BC-02).
//   - With a gateway input (AddGateway), its queue / the gateway's queue set
//     point adds to the demand, and the mean is that demand over the pods; with
//     no pod, both are the gateway demand (the HPA computes ceil(value /
//     target) at zero replicas), at least MinWakeDemand while any request is
//     held.
//
// No known pod means no value (and an error for the HPA), except for a pool of
// zero pods with a gateway input, and for pods none of which is known while
// their gateway holds requests: then each pod counts as unknown pods do and
// the gateway's demand adds (missing engine data dampens what the gateway
// says, never cancels it).
type PoolBuilder struct {
	policy *Policy
	now    time.Time
	maxAge time.Duration

	t tally
	// obs is the pooled observations of each latency term (index: the
	// policy's terms); unknowns, for KindSignal, the held value of each pod
	// without a fresh signal (-1: none), resolved in Pool against the known
	// mean.
	obs      []*signals.Histogram
	unknowns []float64
	// poolOnly skips what only a per-pod answer needs (each pod's own latency).
	poolOnly bool
	// scratch receives a pod's window histograms.
	scratch []*signals.Histogram
}

// tally is what a pool's value is computed from, but for the latency terms'
// pooled observations and KindSignal's pods without a fresh signal: a
// PoolBuilder adds to it pod by pod, an Aggregate adds and removes.
type tally struct {
	pods, fresh, known, held int
	states                   map[EngineState]int
	// sum is the exact sum of the pods' parts (KindSignal: of the known
	// pods' signals): the same float64 in any order, and after removals;
	// known, of the known pods' parts (KindMean, KindDemand).
	sum, knownSum exactSum
	// KindSignal: the known pods with the signal, and the pods with neither
	// a fresh reading nor a held value (then the pool has no value).
	n, dark int
	// busy: some known pod had requests in flight. usable and broken, per
	// term, when a known pod's window was consistent (usable) or
	// inconsistent (dropped); nil before the first known pod.
	busy           bool
	usable, broken []bool
	oldest         time.Time
	gw             *float64
	starting       int
}

// part is one pod's part in a pool under a policy, evaluated at one time.
type part struct {
	fresh, known, held, busy bool
	state                    EngineState
	// value is what the pod adds to the sum: its contribution (KindMean,
	// KindDemand) or its signal when known (KindSignal).
	value float64
	// at is the time of the reading behind a known pod.
	at time.Time
	// KindSignal: unknown reports a pod without a fresh signal, counted in
	// Pool against the known pods' mean at heldValue (-1: none); dark, one
	// neither fresh nor held.
	unknown   bool
	heldValue float64
	dark      bool
	// usable and broken: bit i for term i, a latency term whose window was
	// consistent, or inconsistent, in a known pod.
	usable, broken uint64
	// until is the last instant the part holds: past it the pod's reading
	// turns stale, or its hold ends (zero: it never changes by time alone).
	until time.Time
}

// PoolOnly says that the caller needs the pool's value only, not each pod's
// own (the External metrics): PodValue.Value then leaves out the pod's own
// latency terms, which the pool computes pooled anyway, and costs nothing for
// them. Returns b.
func (b *PoolBuilder) PoolOnly() *PoolBuilder {
	b.poolOnly = true
	return b
}

// NewPool returns an empty builder for the policy, which must come from a
// Catalog, evaluating readings at now: a reading older than maxAge is stale.
func (p *Policy) NewPool(now time.Time, maxAge time.Duration) PoolBuilder {
	return PoolBuilder{policy: p, now: now, maxAge: maxAge}
}

// Add counts one pod: h is its history (nil when it was never scraped
// successfully) and why says why its newest scrape failed, if it did. It returns
// the pod's own part.
func (b *PoolBuilder) Add(h *history.History, why string) PodValue {
	p := b.policy
	if p.hasLatency() && b.scratch == nil {
		b.scratch = make([]*signals.Histogram, len(p.Terms))
	}
	pt, v := p.evalPart(h, why, b.now, b.maxAge, !b.poolOnly, b.scratch)
	b.t.add(p, &pt, 1)
	if pt.unknown {
		b.unknowns = append(b.unknowns, pt.heldValue)
	}
	if pt.known && b.scratch != nil {
		if b.obs == nil {
			b.obs = make([]*signals.Histogram, len(p.Terms))
		}
		for i, d := range b.scratch {
			switch {
			case d == nil:
			case b.obs[i] == nil:
				b.obs[i] = d.Clone()
			case !b.obs[i].AddInPlace(d):
				b.obs[i] = b.obs[i].Add(d)
			}
		}
	}
	return v
}

// hasLatency reports whether a saturation policy has a latency term.
func (p *Policy) hasLatency() bool {
	if p.Kind == KindSignal {
		return false
	}
	for _, t := range p.Terms {
		if t.Kind.IsLatency() {
			return true
		}
	}
	return false
}

// evalPart evaluates one pod at now: its part in the pool and its PodValue.
// hists, when not nil (one per term), receives a known pod's window
// histogram of each latency term (nil for none or an inconsistent window).
func (p *Policy) evalPart(h *history.History, why string, now time.Time, maxAge time.Duration, ownLatency bool, hists []*signals.Histogram) (part, PodValue) {
	var pt part
	if r := h.Latest(); r != nil {
		switch at := r.At(); {
		case now.Sub(at) <= maxAge:
			pt.until = at.Add(maxAge)
		case p.HoldLastGood > 0 && now.Sub(at) <= p.HoldLastGood:
			pt.until = at.Add(p.HoldLastGood)
		}
	}
	if p.Kind == KindSignal {
		v := p.evalSignal(h, why, now, maxAge, &pt)
		return pt, v
	}
	ev := p.evalSaturation(h, why, now, maxAge, nil, ownLatency)
	pt.fresh, pt.known, pt.held, pt.busy, pt.state, pt.value, pt.at = ev.fresh, ev.known, ev.held, ev.busy, ev.state, ev.part, ev.at
	v := PodValue{Known: ev.known, Present: ev.known, Value: ev.sat, Time: ev.at, State: ev.state, Held: ev.held, Why: ev.why}
	if !ev.known || hists == nil {
		return pt, v
	}
	for i, t := range p.Terms {
		hists[i] = nil
		hk, ok := t.Kind.histo()
		if !ok {
			continue
		}
		w := h.Window(history.WindowKey{Window: t.Window, Model: p.Model})
		if w.Inconsistent[hk] {
			pt.broken |= 1 << i
			continue
		}
		pt.usable |= 1 << i
		hists[i] = w.Histograms[hk]
	}
	return pt, v
}

// evalSignal evaluates one pod under a KindSignal policy into pt.
func (p *Policy) evalSignal(h *history.History, why string, now time.Time, maxAge time.Duration, pt *part) PodValue {
	pt.state = StateOK
	r, ok := fresh(h, now, maxAge)
	if ok {
		pt.fresh = true
		if s, has := p.signalValue(r); has {
			pt.known, pt.value, pt.at = true, s, r.At()
			return PodValue{Known: true, Present: true, Value: s, Time: r.At(), State: StateOK}
		}
		pt.unknown, pt.heldValue = true, -1
		return PodValue{State: StateOK, Why: "does not expose this signal" + firstWarnings(r.Warnings)}
	}
	held := -1.0
	v := PodValue{State: StateOK, Why: why}
	if r != nil && p.HoldLastGood > 0 && now.Sub(r.At()) <= p.HoldLastGood {
		if s, has := p.signalValue(r); has {
			held, v.Held, pt.held = s, true, true
		}
	}
	if v.Why == "" {
		v.Why = "no fresh reading"
	}
	pt.unknown, pt.heldValue, pt.dark = true, held, held < 0
	return v
}

// add adds a pod's part to the tally (sign 1) or removes it (sign -1). The
// oldest time is the caller's (a minimum cannot be taken back).
func (t *tally) add(p *Policy, pt *part, sign int) {
	t.pods += sign
	if pt.fresh {
		t.fresh += sign
	}
	if pt.held {
		t.held += sign
	}
	if p.Kind == KindSignal {
		if pt.known {
			t.known += sign
			t.n += sign
			t.sum.add(pt.value, sign)
			if sign > 0 && (t.oldest.IsZero() || pt.at.Before(t.oldest)) {
				t.oldest = pt.at
			}
		}
		if pt.dark {
			t.dark += sign
		}
		return
	}
	t.sum.add(pt.value, sign)
	if pt.known {
		t.knownSum.add(pt.value, sign)
	}
	if pt.state != StateOK {
		if t.states == nil {
			t.states = map[EngineState]int{}
		}
		if t.states[pt.state] += sign; t.states[pt.state] == 0 {
			delete(t.states, pt.state)
		}
		if len(t.states) == 0 {
			t.states = nil
		}
	}
	if pt.known {
		t.known += sign
		if sign > 0 {
			if t.oldest.IsZero() || pt.at.Before(t.oldest) {
				t.oldest = pt.at
			}
			t.busy = t.busy || pt.busy
			if t.usable == nil && p.hasLatency() {
				t.usable, t.broken = make([]bool, len(p.Terms)), make([]bool, len(p.Terms))
			}
			for i := range t.usable {
				t.usable[i] = t.usable[i] || pt.usable&(1<<i) != 0
				t.broken[i] = t.broken[i] || pt.broken&(1<<i) != 0
			}
		}
	}
}

// MinWakeDemand is the least demand a pool of zero pods is served while its
// gateway holds any request: 0.001, the smallest value the adapter serves
// (milli units; see provider.MilliQuantity), so that a deep-queue set point
// (1 request / 5000) never rounds a waiting request away.
const MinWakeDemand = 0.001

// AddStarting adds n pods of the pool that a scale-up created and that are
// still starting: not Ready yet, younger than the start-up grace (the
// adapter's --startup-grace). A demand policy's value is then at least the
// pods counted plus these, so that an HPA (target type AverageValue 1) never
// deletes a pod that is loading its model before it has served: a gateway
// queue that empties while the first pod loads (requests time out) would
// otherwise read 0, the HPA would scale back to zero, the next request would
// create the pod again, forever (scale-to-zero setups, hazard NC-15). A mean
// policy cannot hold them this way (its Value target is multiplied by the
// Ready pods, hazard NC-08).
func (b *PoolBuilder) AddStarting(n int) {
	if n > 0 {
		b.t.starting += n
	}
}

// AddGateway adds the pool's gateway-held queue (waiting requests) to the
// demand; see PoolBuilder. queue must be finite and >= 0.
func (b *PoolBuilder) AddGateway(queue float64) {
	q := queue
	b.t.gw = &q
}

// Pool returns the aggregate of the pods added so far.
func (b *PoolBuilder) Pool() Pool {
	return b.policy.poolOf(&b.t, b.obs, b.unknowns)
}

// poolOf computes the pool from a tally, the latency terms' pooled
// observations (nil: none) and, for KindSignal, the held values of the pods
// without a fresh signal.
func (p *Policy) poolOf(t *tally, obs []*signals.Histogram, unknowns []float64) Pool {
	out := p.pool(t, obs, unknowns)
	if t.starting == 0 || p.Kind != KindDemand {
		return out
	}
	out.Starting = t.starting
	floor := float64(t.pods + t.starting)
	kind := "scale-up"
	if t.pods == 0 {
		kind = "scale-from-zero"
	}
	switch {
	case out.Value != nil && *out.Value < floor:
		v := floor
		if out.Measured == nil {
			out.Measured = out.Value
		}
		out.Value = &v
		out.InFlight = fmt.Sprintf("%s in flight: %d pods starting, so the demand served is at least %d (the pods counted and starting) until they are Ready or older than the start-up grace",
			kind, t.starting, t.pods+t.starting)
	case out.Value != nil:
		out.InFlight = fmt.Sprintf("%s in flight: %d pods starting; the demand (%.4g) keeps them", kind, t.starting, *out.Value)
	default:
		out.InFlight = fmt.Sprintf("%s in flight: %d pods starting; no value (the HPA holds, deleting none)", kind, t.starting)
	}
	return out
}

func (p *Policy) pool(t *tally, obs []*signals.Histogram, unknowns []float64) Pool {
	out := Pool{Pods: t.pods, Fresh: t.fresh, Known: t.known, Held: t.held, Oldest: t.oldest, Gateway: t.gw}
	if len(t.states) > 0 {
		out.States = maps.Clone(t.states)
	}
	sum := t.sum.Value()
	if p.Kind == KindSignal {
		if t.n == 0 || t.dark > 0 {
			return out // see PoolBuilder: a dark pod leaves a raw signal unknown
		}
		mean := sum / float64(t.n)
		acc := t.sum.Clone()
		for _, u := range unknowns {
			acc.Add(math.Max(u, mean))
		}
		v := acc.Value()
		if p.Signal.FoldsByMean() {
			v /= float64(t.pods)
		}
		out.Value = &v
		return out
	}
	gwDemand := 0.0
	if t.gw != nil && p.Gateway != nil && p.Gateway.QueueSetPoint > 0 {
		gwDemand = *t.gw / p.Gateway.QueueSetPoint
	}
	if t.known == 0 {
		switch {
		case t.pods == 0 && t.gw != nil:
			// Scale from zero: any held request is worth at least MinWakeDemand,
			// so that ceil(value / target) at zero replicas is at least 1.
			if *t.gw > 0 {
				gwDemand = max(gwDemand, MinWakeDemand)
			}
			out.Value = &gwDemand
		case t.pods > 0 && gwDemand > 0:
			// No pod known, but the gateway holds requests: evidence of demand
			// the pods' silence cannot cancel. Each unknown pod counts as it is
			// counted (UnknownSaturation, or its held last good value).
			v, m := sum+gwDemand, gwDemand
			if p.Kind == KindMean {
				v, m = v/float64(t.pods), m/float64(t.pods)
			}
			out.Value = &v
			if m < v {
				out.Measured = &m
			}
		}
		return out
	}
	demand := sum
	latency := 0.0
	for i, term := range p.Terms {
		if !term.Kind.IsLatency() {
			continue
		}
		var o *signals.Histogram
		if t.usable != nil {
			if t.broken[i] && !t.usable[i] {
				continue // every pod's window is inconsistent: the term drops
			}
			if obs != nil {
				o = obs[i]
			}
		}
		lv, note, ok := latencyValue(&p.Terms[i], o, t.busy, true)
		if !ok {
			continue
		}
		ratio, capped := term.ratio(lv)
		out.Latency = append(out.Latency, TermValue{Term: term.Kind, Value: lv, SetPoint: term.SetPoint, Ratio: ratio, Capped: capped, Note: note})
		latency = math.Max(latency, ratio)
	}
	measured := demand
	if t.known < t.pods {
		measured = math.Min(demand, t.knownSum.Value()/float64(t.known)*float64(t.pods))
	}
	demand = math.Max(demand, latency*float64(t.pods)) + gwDemand
	measured = math.Max(measured, latency*float64(t.pods)) + gwDemand
	v := demand
	if p.Kind == KindMean {
		v, measured = demand/float64(t.pods), measured/float64(t.pods)
	}
	out.Value = &v
	if measured < v {
		out.Measured = &measured
	}
	return out
}
