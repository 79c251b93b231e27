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

// Aggregate folds the members into a Pool; see PoolBuilder.
func Aggregate(members []Member, unknownSaturation float64) Pool {
	b := NewPoolBuilder(unknownSaturation)
	for i := range members {
		b.Add(members[i].Reading, members[i].Fusion)
	}
	return b.Pool()
}

// PoolBuilder folds pods into a Pool one at a time, so that a caller walking a
// thousand pods needs no slice of members. A pod without a saturation counts as
// unknownSaturation in Saturation and DemandReplicas (the Gateway API inference
// extension counts a pod with stale or missing metrics as saturated, 1.0; see
// the inference extension's saturation detector), so a pool whose engines stop reporting does not look idle.
// Callers must treat Known == 0 as "no data", never as a value.
type PoolBuilder struct {
	unknownSaturation float64
	pool              Pool
	queue, running    float64
	kv                float64
	nQueue, nRunning  int
	nKV               int
}

// NewPoolBuilder returns an empty builder.
func NewPoolBuilder(unknownSaturation float64) PoolBuilder {
	return PoolBuilder{unknownSaturation: unknownSaturation}
}

// Add counts one pod: its fresh reading and fusion, or a nil reading for a pod
// without fresh data.
func (b *PoolBuilder) Add(r *Reading, f Fusion) {
	b.pool.Pods++
	if r == nil || f.Saturation == nil {
		b.pool.DemandReplicas += b.unknownSaturation
		return
	}
	b.pool.Known++
	b.pool.DemandReplicas += *f.Saturation
	if r.QueueDepth != nil {
		b.queue += *r.QueueDepth
		b.nQueue++
	}
	if r.Running != nil {
		b.running += *r.Running
		b.nRunning++
	}
	if r.KVCacheUsage != nil {
		b.kv += *r.KVCacheUsage
		b.nKV++
	}
}

// Pool returns the aggregate of the pods added so far.
func (b *PoolBuilder) Pool() Pool {
	p := b.pool
	if p.Pods > 0 {
		p.Saturation = p.DemandReplicas / float64(p.Pods)
	}
	if b.nQueue > 0 {
		q := b.queue
		p.QueueDepth = &q
	}
	if b.nRunning > 0 {
		r := b.running
		p.Running = &r
	}
	if b.nKV > 0 {
		kv := b.kv / float64(b.nKV)
		p.KVCacheUsage = &kv
	}
	return p
}
