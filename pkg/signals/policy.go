package signals

import (
	"fmt"
	"math"
	"strings"
)

// Kind says how a Policy turns the pods of a pool into one value.
type Kind string

// The kinds of policy.
const (
	// KindMean is the mean per-pod saturation over the pool's pods: the value for
	// an HPA target of type Value (e.g. value: "1"), which the HPA multiplies by
	// the Ready pods of its scale target.
	KindMean Kind = "mean"
	// KindDemand is the sum of per-pod saturations: the replicas needed to bring
	// every pod to its set point, for an HPA target of type AverageValue
	// (averageValue: "1"), which the HPA divides by its target per pod.
	KindDemand Kind = "demand"
	// KindSignal is one raw signal pooled by its own rule: counts (queue depth,
	// running) add up, ratios (KV-cache usage) are averaged.
	KindSignal Kind = "signal"
)

// The names of the built-in policies, as served to HPAs. Names are lower-case
// because the HPA's client lower-cases the metric name in the request path.
const (
	// MetricSaturation is the mean per-pod saturation (1.0 = at the set point).
	MetricSaturation = "llm_saturation"
	// MetricDemandReplicas is the sum of per-pod saturations: replicas needed.
	MetricDemandReplicas = "llm_demand_replicas"
	// MetricQueueDepth is the pool's total queue depth (waiting requests).
	MetricQueueDepth = "llm_num_requests_waiting"
	// MetricRunning is the pool's total of running requests.
	MetricRunning = "llm_num_requests_running"
	// MetricKVCacheUsage is the pool's mean KV-cache usage ratio (0..1).
	MetricKVCacheUsage = "llm_kv_cache_usage"
)

// Policy is one entry of the metric catalog: a name an HPA asks for and how its
// value is computed from the pods of a pool.
type Policy struct {
	// Name is the metric name served (lower-case).
	Name string
	// Kind is how pods pool into one value.
	Kind Kind
	// Signal is the raw signal of a KindSignal policy.
	Signal Signal
	// SetPoints score each pod of a KindMean or KindDemand policy.
	SetPoints SetPoints
	// UnknownSaturation is the saturation counted for a pod without a fresh
	// saturation (KindMean and KindDemand); finite and >= 0.
	UnknownSaturation float64
}

// PerPod reports whether the policy has a value per pod (served on
// custom.metrics.k8s.io for HPA metrics of type Pods): every kind but
// KindDemand, which only exists for a pool.
func (p *Policy) PerPod() bool { return p.Kind != KindDemand }

// Validate returns an error naming the first invalid field of the policy.
func (p *Policy) Validate() error {
	if p.Name == "" || p.Name != strings.ToLower(p.Name) {
		return fmt.Errorf("policy name %q must be non-empty and lower-case (the HPA lower-cases metric names)", p.Name)
	}
	switch p.Kind {
	case KindMean, KindDemand:
		if err := p.SetPoints.Validate(); err != nil {
			return fmt.Errorf("policy %s: %w", p.Name, err)
		}
		if !(p.UnknownSaturation >= 0) || math.IsInf(p.UnknownSaturation, 0) {
			return fmt.Errorf("policy %s: unknown-pod saturation must be a finite number >= 0, got %g", p.Name, p.UnknownSaturation)
		}
	case KindSignal:
		if p.Signal < 0 || p.Signal >= numSignals || p.Signal == Preemptions {
			return fmt.Errorf("policy %s: signal %s cannot be served as a pool value", p.Name, p.Signal)
		}
	default:
		return fmt.Errorf("policy %s: unknown kind %q", p.Name, p.Kind)
	}
	return nil
}

// Catalog is the set of policies served, in documentation order. It is
// immutable once built.
type Catalog struct {
	policies []Policy
}

// NewCatalog returns a catalog of the policies, or an error naming the first
// invalid or duplicate one.
func NewCatalog(policies ...Policy) (*Catalog, error) {
	c := &Catalog{policies: make([]Policy, 0, len(policies))}
	for _, p := range policies {
		if err := p.Validate(); err != nil {
			return nil, err
		}
		if c.Lookup(p.Name) != nil {
			return nil, fmt.Errorf("policy %s is defined twice", p.Name)
		}
		c.policies = append(c.policies, p)
	}
	return c, nil
}

// BuiltinCatalog returns the built-in policies: llm_saturation (KindMean),
// llm_demand_replicas (KindDemand) with the given set points and unknown-pod
// saturation, and the raw signals llm_num_requests_waiting,
// llm_num_requests_running and llm_kv_cache_usage. Errors as for NewCatalog.
func BuiltinCatalog(sp SetPoints, unknownSaturation float64) (*Catalog, error) {
	return NewCatalog(
		Policy{Name: MetricSaturation, Kind: KindMean, SetPoints: sp, UnknownSaturation: unknownSaturation},
		Policy{Name: MetricDemandReplicas, Kind: KindDemand, SetPoints: sp, UnknownSaturation: unknownSaturation},
		Policy{Name: MetricQueueDepth, Kind: KindSignal, Signal: QueueDepth},
		Policy{Name: MetricRunning, Kind: KindSignal, Signal: Running},
		Policy{Name: MetricKVCacheUsage, Kind: KindSignal, Signal: KVCacheUsage},
	)
}

// Lookup returns the policy named name (case-insensitively, as the HPA
// lower-cases names), or nil.
func (c *Catalog) Lookup(name string) *Policy {
	for i := range c.policies {
		if strings.EqualFold(c.policies[i].Name, name) {
			return &c.policies[i]
		}
	}
	return nil
}

// Names returns the names of the policies, in catalog order.
func (c *Catalog) Names() []string {
	out := make([]string, len(c.policies))
	for i := range c.policies {
		out[i] = c.policies[i].Name
	}
	return out
}

// PerPodNames returns the names of the policies with a per-pod value.
func (c *Catalog) PerPodNames() []string {
	var out []string
	for i := range c.policies {
		if c.policies[i].PerPod() {
			out = append(out, c.policies[i].Name)
		}
	}
	return out
}
