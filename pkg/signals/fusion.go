package signals

import (
	"fmt"
	"math"
)

// Targets are the per-pod set points of the fused terms: the value of each signal
// at which a pod counts as exactly saturated (saturation 1.0).
type Targets struct {
	// QueueDepth is the number of waiting requests per pod at the set point; >= MinTarget.
	QueueDepth float64
	// KVCacheUsage is the KV-cache usage ratio at the set point; in [MinTarget, 1].
	KVCacheUsage float64
}

// DefaultTargets returns 5 waiting requests and 0.8 KV-cache usage: the per-pod
// thresholds of the Gateway API inference extension's saturation detector
// (max(queue/5, kv/0.8)) and of llm-d's workload-variant-autoscaler (saturated at
// KV ≥ 0.80 or queue ≥ 5). They are starting points: measure the
// saturation point of each model and GPU with a stepped load test.
func DefaultTargets() Targets {
	return Targets{QueueDepth: 5, KVCacheUsage: 0.8}
}

// MinTarget is the smallest set point accepted: it keeps every ratio, and a
// pool's sum of them, finite (MaxRequests / MinTarget = 1e12).
const MinTarget = 0.001

// Validate returns an error naming the first target that is not a finite number
// of at least MinTarget, or a KV-cache target above 1.
func (t Targets) Validate() error {
	if !(t.QueueDepth >= MinTarget) || math.IsInf(t.QueueDepth, 0) {
		return fmt.Errorf("queue depth target must be a finite number >= %g, got %g", MinTarget, t.QueueDepth)
	}
	if !(t.KVCacheUsage >= MinTarget) || t.KVCacheUsage > 1 {
		return fmt.Errorf("KV-cache usage target must be in [%g, 1], got %g", MinTarget, t.KVCacheUsage)
	}
	return nil
}

// Term is one signal's contribution to a pod's saturation.
type Term struct {
	// Signal is "queueDepth" or "kvCacheUsage".
	Signal string `json:"signal"`
	// Value is the pod's signal value; Target the set point; Ratio = Value / Target.
	Value  float64 `json:"value"`
	Target float64 `json:"target"`
	Ratio  float64 `json:"ratio"`
}

// Fusion is the saturation of one pod and the terms it was fused from.
type Fusion struct {
	// Saturation is max over Terms of Ratio; nil when no term is present (the pod
	// is unknown). Unit: multiples of the set point.
	Saturation *float64
	// Terms lists the present terms in signal order.
	Terms []Term
}

// Fuse computes a pod's saturation as max(queueDepth / t.QueueDepth,
// kvCacheUsage / t.KVCacheUsage) over the terms the Reading has, the rule of the
// Gateway API inference extension's saturation detector. Queue depth answers
// short-request bursts first, KV-cache usage long contexts first; the maximum lets
// whichever moves first drive scaling. t must be valid (see Targets.Validate).
func Fuse(r *Reading, t Targets) Fusion {
	var f Fusion
	add := func(s Signal, v *float64, target float64) {
		if v == nil {
			return
		}
		term := Term{Signal: s.String(), Value: *v, Target: target, Ratio: *v / target}
		f.Terms = append(f.Terms, term)
		if f.Saturation == nil || term.Ratio > *f.Saturation {
			ratio := term.Ratio
			f.Saturation = &ratio
		}
	}
	add(QueueDepth, r.QueueDepth, t.QueueDepth)
	add(KVCacheUsage, r.KVCacheUsage, t.KVCacheUsage)
	return f
}
