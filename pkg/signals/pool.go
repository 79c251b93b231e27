package signals

// Member is one counted pod of a pool: a pod that serves traffic (the caller
// decides which, e.g. Running and Ready) and its latest fresh reading.
type Member struct {
	// Reading is the pod's latest fresh reading; nil when there is none (scrape
	// failing, stale, or nothing parseable).
	Reading *Reading
	// Fusion is Fuse(Reading, targets); ignored when Reading is nil.
	Fusion Fusion
}

// known reports whether the member contributes a saturation of its own.
func (m *Member) known() bool { return m.Reading != nil && m.Fusion.Saturation != nil }

// Pool is the aggregate of a pool of pods, what one HPA request is answered from.
// Pointers are nil when no known pod has the term.
type Pool struct {
	// Pods is the number of counted pods; Known of them had a fresh saturation.
	Pods, Known int
	// Saturation is the mean per-pod saturation over all counted pods, unknown pods
	// at the unknown saturation; the value for an HPA target of type Value.
	Saturation float64
	// DemandReplicas is the sum of per-pod saturations: the replicas needed to bring
	// every pod to its set point; the value for an HPA target of type AverageValue.
	DemandReplicas float64
	// QueueDepth and Running are sums over the known pods that report them (requests).
	QueueDepth, Running *float64
	// KVCacheUsage is the mean KV-cache usage ratio over the known pods that report it.
	KVCacheUsage *float64
}

// Aggregate folds the members into a Pool. A member without a saturation counts as
// unknownSaturation in Saturation and DemandReplicas (the Gateway API inference
// extension counts a pod with stale or missing metrics as saturated, 1.0; see
// DOMAIN.md §5), so a pool whose engines stop reporting does not look idle.
// Callers must treat Known == 0 as "no data", never as a value.
func Aggregate(members []Member, unknownSaturation float64) Pool {
	p := Pool{Pods: len(members)}
	var queue, running, kv float64
	var nQueue, nRunning, nKV int
	for i := range members {
		m := &members[i]
		if !m.known() {
			p.DemandReplicas += unknownSaturation
			continue
		}
		p.Known++
		p.DemandReplicas += *m.Fusion.Saturation
		r := m.Reading
		if r.QueueDepth != nil {
			queue += *r.QueueDepth
			nQueue++
		}
		if r.Running != nil {
			running += *r.Running
			nRunning++
		}
		if r.KVCacheUsage != nil {
			kv += *r.KVCacheUsage
			nKV++
		}
	}
	if p.Pods > 0 {
		p.Saturation = p.DemandReplicas / float64(p.Pods)
	}
	if nQueue > 0 {
		p.QueueDepth = &queue
	}
	if nRunning > 0 {
		p.Running = &running
	}
	if nKV > 0 {
		kv /= float64(nKV)
		p.KVCacheUsage = &kv
	}
	return p
}
