package signals

import (
	"fmt"
	"math"
)

// SetPoints are the per-pod values of the fused signals at which a pod counts as
// exactly saturated (saturation 1.0).
type SetPoints struct {
	// QueueDepth is the number of waiting requests per pod at saturation 1.0;
	// at least MinSetPoint. Unit: requests.
	QueueDepth float64
	// KVCacheUsage is the KV-cache usage ratio at saturation 1.0; in
	// [MinSetPoint, 1]. Unit: ratio.
	KVCacheUsage float64
}

// DefaultSetPoints returns 5 waiting requests and 0.8 KV-cache usage: the per-pod
// thresholds of the Gateway API inference extension's saturation detector
// (release-1.5, pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization/detector.go:
// a pod is saturated at max(queue/5, kv/0.8) >= 1) and of llm-d's
// workload-variant-autoscaler (saturated at KV >= 0.80 or queue >= 5). They are
// starting points: measure each model's and GPU's saturation point with a
// stepped load test. Every default of the adapter and of explain comes from here.
func DefaultSetPoints() SetPoints {
	return SetPoints{QueueDepth: 5, KVCacheUsage: 0.8}
}

// DefaultUnknownSaturation is the saturation counted for a pod without fresh
// data: 1.0, as the Gateway API inference extension's saturation detector
// (release-1.5, same file as DefaultSetPoints) counts a pod with stale or
// missing metrics as saturated, so a pool whose engines stop reporting never
// looks idle.
const DefaultUnknownSaturation = 1.0

// MinSetPoint is the smallest set point accepted: it keeps every ratio, and a
// pool's sum of them, finite (MaxRequests / MinSetPoint = 1e12).
const MinSetPoint = 0.001

// Validate returns an error naming the first set point that is not a finite
// number of at least MinSetPoint, or a KV-cache set point above 1.
func (sp SetPoints) Validate() error {
	if !(sp.QueueDepth >= MinSetPoint) || math.IsInf(sp.QueueDepth, 0) {
		return fmt.Errorf("queue depth set point must be a finite number >= %g, got %g", MinSetPoint, sp.QueueDepth)
	}
	if !(sp.KVCacheUsage >= MinSetPoint) || sp.KVCacheUsage > 1 {
		return fmt.Errorf("KV-cache usage set point must be in [%g, 1], got %g", MinSetPoint, sp.KVCacheUsage)
	}
	return nil
}

// Term is one signal's contribution to a pod's saturation.
type Term struct {
	// Signal is "queueDepth" or "kvCacheUsage".
	Signal string `json:"signal"`
	// Value is the pod's signal value, SetPoint its set point, Ratio = Value / SetPoint.
	Value    float64 `json:"value"`
	SetPoint float64 `json:"setPoint"`
	Ratio    float64 `json:"ratio"`
}

// PodScore is the saturation of one pod and the terms it was fused from.
type PodScore struct {
	// Saturation is max over Terms of Ratio; nil when no term is present (the pod
	// is unknown). Unit: multiples of the set point.
	Saturation *float64
	// Terms lists the present terms in signal order.
	Terms []Term
}

// Score computes a pod's saturation as max(queueDepth / sp.QueueDepth,
// kvCacheUsage / sp.KVCacheUsage) over the terms the Reading has, the rule of
// the Gateway API inference extension's saturation detector (see
// DefaultSetPoints). Queue depth answers short-request bursts first, KV-cache
// usage long contexts first; the maximum lets whichever moves first drive
// scaling. sp must be valid (see SetPoints.Validate). Pools use the same
// arithmetic without building Terms (see PoolBuilder).
func Score(r *Reading, sp SetPoints) PodScore {
	var s PodScore
	add := func(sig Signal, v *float64, setPoint float64) {
		if v == nil {
			return
		}
		s.Terms = append(s.Terms, Term{Signal: sig.String(), Value: *v, SetPoint: setPoint, Ratio: *v / setPoint})
	}
	add(QueueDepth, r.QueueDepth, sp.QueueDepth)
	add(KVCacheUsage, r.KVCacheUsage, sp.KVCacheUsage)
	if sat, ok := saturation(r, sp); ok {
		s.Saturation = &sat
	}
	return s
}

// hasTerm reports whether the reading has a term of the saturation score; a
// reading without one is unknown, never idle.
func (r *Reading) hasTerm() bool { return r.QueueDepth != nil || r.KVCacheUsage != nil }

// saturation is Score's number alone, without allocating: the per-request path
// of a thousand-pod pool calls it once per pod.
func saturation(r *Reading, sp SetPoints) (float64, bool) {
	sat, ok := 0.0, false
	if r.QueueDepth != nil {
		sat, ok = *r.QueueDepth/sp.QueueDepth, true
	}
	if r.KVCacheUsage != nil {
		if kv := *r.KVCacheUsage / sp.KVCacheUsage; !ok || kv > sat {
			sat, ok = kv, true
		}
	}
	return sat, ok
}
