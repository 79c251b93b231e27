package provider

import (
	"container/list"
	"crypto/sha256"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

// Bounds of the peak-hold states (peakStates).
const (
	// maxPeakStatesPerNamespace bounds, per namespace and per class (pools an
	// HPA asks about, pools only other requests ask about), the pools whose
	// peak hold is remembered: an HPA scales one Deployment (or one role of
	// it), so a namespace holds a few to a few hundred of them at most; 256
	// pools with a peak-hold policy in one namespace is more than a namespace
	// of real autoscalers asks about, and 256 states take about 100 KB (about
	// 400 bytes each, whatever the selector's length, plus 32 bytes per
	// demand sample held in the window). Past it the namespace's least
	// recently used state of that class is dropped
	// (saturation_adapter_peak_states_evicted_total).
	maxPeakStatesPerNamespace = 256
	// peakStateIdle is the least time a state nobody asks about is kept: it is
	// dropped once unused for longer than this and twice its peak window.
	peakStateIdle = time.Hour
	// peakSweep is how often, at most, the states are walked to drop the idle
	// ones: a request does not walk them.
	peakSweep = time.Minute
	// peakEvictLogEvery is how often, at most, a namespace's evictions are
	// logged.
	peakEvictLogEvery = time.Hour
)

// Classes of peak-hold states, by who asks about the pool; peakClasses
// names them in saturation_adapter_peak_states_evicted_total's asked_by.
const (
	// peakByHPA: an HPA's External metric asks about the pool.
	peakByHPA = iota
	// peakByRequest: only requests no HPA explains (a person's kubectl, a
	// script) ask about it.
	peakByRequest
	numPeakClasses
)

// peakClasses names the classes, in documentation order.
var peakClasses = [numPeakClasses]string{peakByHPA: "hpa", peakByRequest: "request"}

// peakStates keeps the policy.PoolState of each pool a peak-hold or trend
// policy serves (the demand it served, for its held peak and its trend), by
// namespace, selector
// and policy, so that memory is bounded by configuration, not by what
// requests send:
//
//   - A state is keyed by a SHA-256 of the selector's canonical form, not the
//     selector itself: a 100 KB selector costs 32 bytes of key.
//   - Each namespace keeps at most maxPeakStatesPerNamespace states of each
//     class, dropping its own least recently used one past it, so a flood of
//     distinct selectors in one namespace never evicts another namespace's
//     state (which would change the value served there), and a flood of
//     requests no HPA makes never evicts a state an HPA reads.
//   - A state unused for longer than twice its policy's memory (the longer of
//     its peak and trend windows, policy.Policy.Memory) and peakStateIdle is dropped by a sweep, at most once per peakSweep.
//
// A dropped state's pool starts its peak hold and trend afresh on its next
// request: the value served is then its current demand (and scheduled
// minimums) until a new peak is held or a new rise fitted. It is safe for concurrent use.
type peakStates struct {
	mu    sync.Mutex
	byNS  map[string]*nsPeakStates
	sweep time.Time
	// evicted counts the states dropped for room, by class.
	evicted func(class string)
}

// peakKey identifies a pool's state within its namespace.
type peakKey struct {
	// digest is the SHA-256 of the policy's definition digest
	// (policy.Policy.Definition: an edited policy starts afresh, never
	// reading a peak or a trend in the old definition's units) followed by
	// the selector's canonical form (labels.Selector.String sorts its
	// requirements).
	digest [sha256.Size]byte
	// policy is the catalog name of the policy (the operator's).
	policy string
}

// nsPeakStates are one namespace's states.
type nsPeakStates struct {
	states map[peakKey]*peakEntry
	// lru lists each class's states, most recently used first.
	lru [numPeakClasses]*list.List
	// logged is when an eviction was last logged.
	logged time.Time
}

type peakEntry struct {
	key   peakKey
	state *policy.PoolState
	// used is when a request last read the state; window is its policy's
	// memory then (each state expires by its own policy's windows).
	used   time.Time
	window time.Duration
	// class indexes peakClasses; elem is the entry in lru[class].
	class int
	elem  *list.Element
}

func newPeakStates(evicted func(class string)) *peakStates {
	return &peakStates{byNS: map[string]*nsPeakStates{}, evicted: evicted}
}

// peakKeyOf returns the key of pol's state for selector's pool.
func peakKeyOf(selector labels.Selector, pol *policy.Policy) peakKey {
	h := sha256.New()
	def := pol.Definition()
	h.Write(def[:])
	h.Write([]byte(selector.String()))
	var k peakKey
	h.Sum(k.digest[:0])
	k.policy = pol.Name
	return k
}

// get returns the state pol keeps for the pool of namespace and selector,
// creating it, and marks it used at now by an HPA (byHPA) or by another
// request. A state moves between the classes as the HPAs asking about its
// pool come and go.
func (ps *peakStates) get(pol *policy.Policy, namespace string, selector labels.Selector, byHPA bool, now time.Time) *policy.PoolState {
	k := peakKeyOf(selector, pol)
	class := peakByRequest
	if byHPA {
		class = peakByHPA
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if now.Sub(ps.sweep) >= peakSweep || now.Before(ps.sweep) {
		ps.sweepLocked(now)
	}
	ns := ps.byNS[namespace]
	if ns == nil {
		ns = &nsPeakStates{states: map[peakKey]*peakEntry{}}
		for i := range ns.lru {
			ns.lru[i] = list.New()
		}
		ps.byNS[namespace] = ns
	}
	e := ns.states[k]
	switch {
	case e == nil:
		e = &peakEntry{key: k, state: &policy.PoolState{}, class: class}
		e.elem = ns.lru[class].PushFront(e)
		ns.states[k] = e
	case e.class != class:
		ns.lru[e.class].Remove(e.elem)
		e.class = class
		e.elem = ns.lru[class].PushFront(e)
	default:
		ns.lru[class].MoveToFront(e.elem)
	}
	e.used, e.window = now, pol.Memory()
	if l := ns.lru[class]; l.Len() > maxPeakStatesPerNamespace {
		old := l.Back().Value.(*peakEntry)
		l.Remove(old.elem)
		delete(ns.states, old.key)
		ps.evicted(peakClasses[class])
		if now.Sub(ns.logged) >= peakEvictLogEvery || now.Before(ns.logged) {
			ns.logged = now
			klog.InfoS("Warning: more pools with a peak-hold policy are asked about in this namespace than the adapter keeps; the least recently asked starts its peak hold afresh (saturation_adapter_peak_states_evicted_total counts them; logged at most hourly)",
				"namespace", namespace, "askedBy", peakClasses[class], "max", maxPeakStatesPerNamespace)
		}
	}
	return e.state
}

// sweepLocked drops the states unused for longer than twice their peak
// window and peakStateIdle, and the namespaces left without any.
func (ps *peakStates) sweepLocked(now time.Time) {
	ps.sweep = now
	for name, ns := range ps.byNS {
		for k, e := range ns.states {
			if idle := now.Sub(e.used); idle > 2*e.window && idle > peakStateIdle {
				ns.lru[e.class].Remove(e.elem)
				delete(ns.states, k)
			}
		}
		if len(ns.states) == 0 {
			delete(ps.byNS, name)
		}
	}
}
