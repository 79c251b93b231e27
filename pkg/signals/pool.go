package signals

// PodValue is one pod's part in a pool, as PoolBuilder.Add computed it.
type PodValue struct {
	// Known reports whether the pod had a fresh reading with a saturation (at
	// least one fused term); an unknown pod counts at the policy's
	// UnknownSaturation in KindMean and KindDemand pools.
	Known bool
	// Present reports whether the pod has a value of its own under the policy:
	// its saturation (KindMean, KindDemand) or the raw signal (KindSignal). A pod
	// without one is left out of a per-pod answer.
	Present bool
	// Value is the pod's own value when Present: saturation in multiples of the
	// set point, or the signal in its unit (requests, ratio).
	Value float64
}

// Pool is the value of a policy over a pool of pods: what one HPA request is
// answered from.
type Pool struct {
	// Pods is the number of pods added; Known of them had a saturation.
	Pods, Known int
	// Value is the policy's value: the mean (KindMean) or sum (KindDemand) of
	// per-pod saturations with unknown pods at UnknownSaturation, or the sum
	// (counts) or mean (ratios) of a raw signal over the known pods that report
	// it (KindSignal). Nil when no pod is known, or, for KindSignal, when no
	// known pod reports the signal: never 0 for "no data".
	Value *float64
}

// PoolBuilder folds the pods of one pool into a Pool under one policy, one pod
// at a time, so that a caller walking a thousand pods needs no slice. It is the
// one pooling path of the adapter: the External provider, the per-pod provider
// and explain all use it, so they give identical numbers by construction. The
// zero value is not usable; see Policy.NewPool.
type PoolBuilder struct {
	policy     *Policy
	pods, know int
	sum        float64
	n          int
}

// NewPool returns an empty builder for the policy, which must be valid.
func (p *Policy) NewPool() PoolBuilder { return PoolBuilder{policy: p} }

// Add counts one pod: r is its fresh reading, nil when it has none (scrape
// failing, stale, nothing parseable). It returns the pod's own part.
func (b *PoolBuilder) Add(r *Reading) PodValue {
	b.pods++
	p := b.policy
	v := PodValue{Known: r != nil && r.hasTerm()}
	if v.Known {
		b.know++
	}
	switch p.Kind {
	case KindMean, KindDemand:
		if v.Known {
			v.Present = true
			v.Value, _ = saturation(r, p.SetPoints)
			b.sum += v.Value
		} else {
			b.sum += p.UnknownSaturation
		}
	case KindSignal:
		if !v.Known {
			break
		}
		if s := *r.slot(p.Signal); s != nil {
			v.Present, v.Value = true, *s
			b.sum += *s
			b.n++
		}
	}
	return v
}

// Pool returns the aggregate of the pods added so far.
func (b *PoolBuilder) Pool() Pool {
	out := Pool{Pods: b.pods, Known: b.know}
	if b.know == 0 {
		return out
	}
	v := b.sum
	switch b.policy.Kind {
	case KindMean:
		v /= float64(b.pods)
	case KindSignal:
		if b.n == 0 {
			return out
		}
		if b.policy.Signal.isRatio() {
			v /= float64(b.n)
		}
	}
	out.Value = &v
	return out
}
