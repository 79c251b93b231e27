package simulate

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// ColdStart is the time from a pod's creation to Ready, as a distribution: an
// engine start (image pull, weight load, CUDA graph capture) that varies from
// pod to pod, then the readiness probe, which notices the engine at its next
// period, and, for a pod that needs a node no warm one has room for, the
// node's provisioning first.
//
// The draws are a function of the seed and of the pod's rank among the pods a
// fleet started (the k-th new pod of every autoscaler, and of the oracle, takes
// the same time), so autoscalers compared on one seed meet the same luck.
type ColdStart struct {
	// Mean is the mean time from creation to Ready without node provisioning,
	// probe included.
	Mean time.Duration
	// Spread is the relative spread of the engine's start: uniform in
	// [1 − Spread, 1 + Spread] × (Mean − ProbePeriod/2), in [0, 1). The mean
	// is Mean when Mean >= ProbePeriod/2.
	Spread float64
	// ProbePeriod is the readiness probe's periodSeconds: the pod is Ready at
	// the first probe after its engine is up, probes at a phase drawn per pod.
	ProbePeriod time.Duration
	// NodeProvisioning, when > 0, is added before the start of a pod created
	// while WarmNodes or more pods exist (one GPU node per pod): the time a
	// cluster autoscaler takes to bring a node.
	NodeProvisioning time.Duration
	// WarmNodes is the number of GPU nodes that exist before any scaling.
	WarmNodes int
	// Seed selects the draws.
	Seed uint64
}

// Validate reports every invalid field at once.
func (c ColdStart) Validate() error {
	var errs []error
	if c.Mean < 0 {
		errs = append(errs, fmt.Errorf("cold start must be >= 0, got %v", c.Mean))
	}
	if !(c.Spread >= 0 && c.Spread < 1) {
		errs = append(errs, fmt.Errorf("cold-start spread must be in [0, 1), got %g", c.Spread))
	}
	if c.ProbePeriod < 0 {
		errs = append(errs, fmt.Errorf("readiness probe period must be >= 0, got %v", c.ProbePeriod))
	}
	if c.NodeProvisioning < 0 || c.WarmNodes < 0 {
		errs = append(errs, errors.New("node provisioning and warm nodes must be >= 0"))
	}
	return errors.Join(errs...)
}

// Max returns the longest cold start a pod can draw without node
// provisioning.
func (c ColdStart) Max() time.Duration {
	return time.Duration(float64(c.start())*(1+c.Spread)) + c.ProbePeriod
}

// start is the mean engine start: the mean cold start less half a probe
// period (the probe's mean wait), at least 0.
func (c ColdStart) start() time.Duration { return max(0, c.Mean-c.ProbePeriod/2) }

// draw returns the cold start of the k-th pod a fleet starts while existing
// pods (not terminating) are there.
func (c ColdStart) draw(k, existing int) time.Duration {
	d := c.Mean
	if c.Spread > 0 || c.ProbePeriod > 0 {
		rng := rand.New(rand.NewPCG(c.Seed, 0xc01d5747<<20|uint64(k)))
		up := time.Duration(float64(c.start()) * (1 + c.Spread*(2*rng.Float64()-1)))
		d = up
		if c.ProbePeriod > 0 {
			phase := time.Duration(rng.Int64N(int64(c.ProbePeriod)))
			d = phase
			if up > phase {
				d = phase + (up-phase+c.ProbePeriod-1)/c.ProbePeriod*c.ProbePeriod
			}
		}
	}
	if c.NodeProvisioning > 0 && existing >= c.WarmNodes {
		d += c.NodeProvisioning
	}
	return d
}
