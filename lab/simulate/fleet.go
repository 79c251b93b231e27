package simulate

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
)

// GPUResource is the extended resource each simulated pod requests once, and the
// Resource metric name under which the simulation serves GPU utilization.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// never is a time after every event.
const never = time.Duration(math.MaxInt64)

type podPhase int

const (
	// phaseStarting: created, loading the model; Running but not Ready; its
	// /metrics does not answer yet (vLLM serves HTTP once the engine is up).
	phaseStarting podPhase = iota
	// phaseReady: Ready, receives requests.
	phaseReady
	// phaseDraining: deleted (terminating, not Ready), receives no new request and
	// finishes the ones it holds, then is gone.
	phaseDraining
)

// pod is one replica: a pod running one engine.
type pod struct {
	num                           int    // the pod's ID for MetricSources
	name                          string // its Kubernetes name
	phase                         podPhase
	created, readyAt, deletedAt   time.Duration
	engine                        *emulator.Engine
	inStep                        bool
	stepStart, stepEnd            time.Duration
	busy                          time.Duration // time in completed steps
	outstanding                   int           // requests routed here and not finished
	pendingFirsts, pendingFinishd []int         // request indices of the step in flight
	expo                          *exposition
}

// exposition renders one pod's /metrics with the emulator's collector.
type exposition struct {
	metrics *emulator.Metrics
	reg     *prometheus.Registry
	buf     bytes.Buffer
}

// recorder receives what happens to requests.
type recorder interface {
	firstToken(req int, at time.Duration)
	finished(req int, at time.Duration)
	rejected(req int)
	// abandoned: the client gave up before its first token.
	abandoned(req int)
}

// scaleChange is one change of the count of non-terminating pods an autoscaler made.
type scaleChange struct {
	at       time.Duration
	from, to int
}

// fleet is the pods of one Deployment behind one gateway, on a virtual clock.
// Events (engine steps, arrivals, pods becoming Ready) are processed in time
// order; at one instant: step ends, then readiness, then arrivals, then new steps.
type fleet struct {
	engineCfg emulator.Config
	coldStart ColdStart
	observe   bool // feed the exposition's histograms at every step
	// abandonAfter is the clients' patience for a first token (0: endless);
	// nextAbandon the first arrived request whose deadline has not been
	// checked.
	abandonAfter time.Duration
	nextAbandon  int
	started      int // pods created, for the cold-start draws
	t0           time.Time
	now          time.Duration
	reqs         []Request
	next         int // next arrival
	stop         int // arrivals from this index on are not admitted
	pods         []*pod
	held         []int // requests held at the gateway while no pod is Ready
	rr           int   // tie-break cursor of the least-outstanding routing
	nextNum      int
	rec          recorder
	done         int           // requests finished or rejected
	costStart    time.Duration // GPU time is counted over [costStart, costEnd]
	costEnd      time.Duration
	podTime      time.Duration // pod time of removed pods within [costStart, costEnd]
	changes      []scaleChange
	onRemove     []func(p *pod)
}

func newFleet(cfg emulator.Config, coldStart ColdStart, t0 time.Time, reqs []Request, rec recorder, costEnd time.Duration) *fleet {
	return &fleet{engineCfg: cfg, coldStart: coldStart, t0: t0, reqs: reqs, stop: len(reqs), rec: rec, costEnd: costEnd}
}

// startPod creates a pod at now that becomes Ready after its cold start: the
// k-th pod the fleet starts draws the k-th cold start of the seed, so every
// autoscaler's k-th new pod takes as long.
func (f *fleet) startPod() (*pod, error) {
	k := f.started
	f.started++
	return f.newPod(f.now + f.coldStart.draw(k, f.nonTerminating()))
}

// newPod creates a pod at now that becomes Ready at readyAt.
func (f *fleet) newPod(readyAt time.Duration) (*pod, error) {
	e, err := emulator.NewEngine(f.engineCfg)
	if err != nil {
		return nil, err
	}
	n := f.nextNum
	f.nextNum++
	p := &pod{num: n, name: "pod-" + strconv.Itoa(n), created: f.now, readyAt: readyAt, engine: e}
	if readyAt <= f.now {
		p.phase = phaseReady
	}
	f.pods = append(f.pods, p)
	return p, nil
}

// nonTerminating counts starting and Ready pods: a Deployment's status.replicas.
func (f *fleet) nonTerminating() int {
	n := 0
	for _, p := range f.pods {
		if p.phase != phaseDraining {
			n++
		}
	}
	return n
}

func (f *fleet) count(ph podPhase) int {
	n := 0
	for _, p := range f.pods {
		if p.phase == ph {
			n++
		}
	}
	return n
}

// nextEvent returns the time of the fleet's next event.
func (f *fleet) nextEvent() time.Duration {
	t := never
	for _, p := range f.pods {
		if p.inStep && p.stepEnd < t {
			t = p.stepEnd
		}
		if p.phase == phaseStarting && p.readyAt < t {
			t = p.readyAt
		}
	}
	if f.next < f.stop && f.reqs[f.next].At < t {
		t = f.reqs[f.next].At
	}
	if f.abandonAfter > 0 && f.nextAbandon < f.next {
		t = min(t, f.reqs[f.nextAbandon].At+f.abandonAfter)
	}
	return t
}

// advance processes every event up to and including t, then sets the clock to t.
func (f *fleet) advance(t time.Duration) {
	for {
		tn := f.nextEvent()
		if tn > t {
			break
		}
		f.process(tn)
	}
	if t > f.now {
		f.now = t
	}
}

// process handles the events at now.
func (f *fleet) process(now time.Duration) {
	f.now = now
	for _, p := range f.pods {
		if p.inStep && p.stepEnd <= now {
			f.endStep(p)
		}
	}
	if f.abandonAfter > 0 {
		for f.nextAbandon < f.next && f.reqs[f.nextAbandon].At+f.abandonAfter <= now {
			f.abandon(f.nextAbandon)
			f.nextAbandon++
		}
	}
	ready := false
	for _, p := range f.pods {
		if p.phase == phaseStarting && p.readyAt <= now {
			p.phase = phaseReady
			ready = true
		}
	}
	if ready {
		f.dispatchHeld()
	}
	for f.next < f.stop && f.reqs[f.next].At <= now {
		f.route(f.next)
		f.next++
	}
	f.kick()
}

func (f *fleet) dispatchHeld() {
	if len(f.held) == 0 || f.count(phaseReady) == 0 {
		return
	}
	held := f.held
	f.held = nil
	for _, i := range held {
		f.route(i)
	}
}

// kick starts a step on every idle engine with work and removes drained pods.
func (f *fleet) kick() {
	for j := 0; j < len(f.pods); {
		p := f.pods[j]
		if !p.inStep && !p.engine.Idle() {
			f.startStep(p)
		}
		if p.phase == phaseDraining && !p.inStep && p.engine.Idle() {
			f.remove(j)
			continue
		}
		j++
	}
}

func (f *fleet) startStep(p *pod) {
	res := p.engine.Step(f.t0.Add(f.now))
	p.pendingFirsts, p.pendingFinishd = p.pendingFirsts[:0], p.pendingFinishd[:0]
	for _, tok := range res.Tokens {
		if tok.Index == 0 {
			p.pendingFirsts = append(p.pendingFirsts, reqIndex(tok.ID))
		}
	}
	for _, fin := range res.Finished {
		p.pendingFinishd = append(p.pendingFinishd, reqIndex(fin.ID))
	}
	if f.observe && p.expo != nil {
		p.expo.metrics.Observe(0, res)
	}
	p.inStep, p.stepStart, p.stepEnd = true, f.now, res.End.Sub(f.t0)
	if p.stepEnd <= f.now {
		// A non-idle engine of a valid configuration always schedules work and takes
		// time (emulator.Config.Validate); keep the clock moving regardless.
		p.stepEnd = f.now + time.Millisecond
	}
}

func (f *fleet) endStep(p *pod) {
	p.inStep = false
	p.busy += p.stepEnd - p.stepStart
	for _, i := range p.pendingFirsts {
		f.rec.firstToken(i, p.stepEnd)
	}
	for _, i := range p.pendingFinishd {
		f.rec.finished(i, p.stepEnd)
		p.outstanding--
		f.done++
	}
}

// abandon ends request i if it still has no first token: its client gave up.
// It leaves the gateway's hold, or its engine (which frees its KV blocks and
// counts it as aborted, vLLM's finished_reason "abort").
func (f *fleet) abandon(i int) {
	for j, h := range f.held {
		if h == i {
			f.held = append(f.held[:j], f.held[j+1:]...)
			f.rec.abandoned(i)
			f.done++
			return
		}
	}
	id := strconv.Itoa(i)
	for _, p := range f.pods {
		if _, ok := p.engine.AbortUnstarted(id, f.t0.Add(f.now)); ok {
			p.outstanding--
			f.rec.abandoned(i)
			f.done++
			return
		}
	}
}

// reqIndex parses a request ID the fleet gave (the request's index).
func reqIndex(id string) int {
	i, _ := strconv.Atoi(id)
	return i
}

// route sends request i to the Ready pod with the fewest outstanding requests
// (ties go round-robin), or holds it at the gateway while no pod is Ready.
func (f *fleet) route(i int) {
	var best *pod
	bi, n := -1, len(f.pods)
	for k := range n {
		j := (f.rr + k) % n
		p := f.pods[j]
		if p.phase == phaseReady && (best == nil || p.outstanding < best.outstanding) {
			best, bi = p, j
		}
	}
	if best == nil {
		f.held = append(f.held, i)
		return
	}
	f.rr = bi + 1
	r := f.reqs[i]
	if err := best.engine.Add(emulator.Request{ID: strconv.Itoa(i), PromptTokens: r.PromptTokens, MaxTokens: r.OutputTokens}, f.t0.Add(f.now)); err != nil {
		f.rec.rejected(i)
		f.done++
		return
	}
	best.outstanding++
}

func (f *fleet) clamp(t time.Duration) time.Duration { return min(max(t, f.costStart), f.costEnd) }

// remove deletes pod j from the fleet (it is gone) and books its pod time.
func (f *fleet) remove(j int) {
	p := f.pods[j]
	f.podTime += f.clamp(f.now) - f.clamp(p.created)
	copy(f.pods[j:], f.pods[j+1:])
	f.pods[len(f.pods)-1] = nil
	f.pods = f.pods[:len(f.pods)-1]
	for _, fn := range f.onRemove {
		fn(p)
	}
}

// gpuTime returns the pod time within [costStart, costEnd] of every pod so far: starting,
// Ready and draining pods all hold a GPU.
func (f *fleet) gpuTime() time.Duration {
	t := f.podTime
	for _, p := range f.pods {
		t += f.clamp(f.now) - f.clamp(p.created)
	}
	return t
}

// addReady creates n pods that are Ready at once (initial fleet, oracle search).
func (f *fleet) addReady(n int) error {
	for range n {
		if _, err := f.newPod(f.now); err != nil {
			return err
		}
	}
	f.dispatchHeld()
	f.kick()
	return nil
}

// setReplicas sets the Deployment's replicas to n as its ReplicaSet does: new pods
// start (Ready after the cold start); on a scale-down, starting pods go first,
// newest first, then the most recently Ready pods
// (k8s.io/kubernetes pkg/controller/controller_utils.go: ActivePodsWithRanks,
// without the LogarithmicScaleDown bucketing and its random tie-break).
func (f *fleet) setReplicas(n int) error {
	cur := f.nonTerminating()
	if n != cur {
		f.changes = append(f.changes, scaleChange{at: f.now, from: cur, to: n})
	}
	for ; cur < n; cur++ {
		if _, err := f.startPod(); err != nil {
			return err
		}
	}
	for ; cur > n; cur-- {
		var victim *pod
		for _, p := range f.pods {
			if p.phase != phaseDraining && (victim == nil || deleteFirst(p, victim)) {
				victim = p
			}
		}
		f.deletePod(victim)
	}
	f.kick()
	return nil
}

// deleteFirst reports whether a ReplicaSet deletes a before b: starting before
// Ready, then the newest.
func deleteFirst(a, b *pod) bool {
	if a.phase != b.phase {
		return a.phase == phaseStarting
	}
	ta, tb := a.readyAt, b.readyAt
	if a.phase == phaseStarting {
		ta, tb = a.created, b.created
	}
	if ta != tb {
		return ta > tb
	}
	return a.num > b.num
}

// drainReady deletes n Ready pods, those with the fewest outstanding requests
// first (the oracle's choice).
func (f *fleet) drainReady(n int) {
	for range n {
		var victim *pod
		for _, p := range f.pods {
			if p.phase == phaseReady && (victim == nil || p.outstanding <= victim.outstanding) {
				victim = p
			}
		}
		if victim == nil {
			break
		}
		f.deletePod(victim)
	}
	f.kick()
}

// deletePod deletes p: a starting pod is gone at once, a Ready one drains.
func (f *fleet) deletePod(p *pod) {
	if p.phase == phaseStarting {
		for j, q := range f.pods {
			if q == p {
				f.remove(j)
				return
			}
		}
	}
	p.phase, p.deletedAt = phaseDraining, f.now
}

// busyAt returns the time p's engine spent in steps up to t: what NVML's
// utilization.gpu integrates (a kernel runs during every step).
func (p *pod) busyAt(t time.Duration) time.Duration {
	b := p.busy
	if p.inStep && t > p.stepStart {
		b += min(t, p.stepEnd) - p.stepStart
	}
	return b
}

// waiting returns the requests queued in the engines and held at the gateway,
// and the requests running.
func (f *fleet) load() (queued, held, running int) {
	for _, p := range f.pods {
		s := p.engine.Snapshot()
		queued += s.Waiting
		running += s.Running
	}
	return queued, len(f.held), running
}

// render returns p's /metrics body as the emulator's collector exposes it (vLLM
// V1 names), in the text format. The body is valid until the next render of p.
func (f *fleet) render(p *pod) ([]byte, error) {
	if p.expo == nil {
		m, err := emulator.NewMetrics(emulator.MetricsOptions{ModelName: "simulated", MaxModelLen: f.engineCfg.MaxModelLen, CreatedAt: f.t0},
			func(int) emulator.Snapshot { return p.engine.Snapshot() })
		if err != nil {
			return nil, err
		}
		reg := prometheus.NewRegistry()
		if err := reg.Register(m); err != nil {
			return nil, err
		}
		p.expo = &exposition{metrics: m, reg: reg}
	}
	e := p.expo
	e.buf.Reset()
	mfs, err := e.reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("gathering %s's metrics: %w", p.name, err)
	}
	enc := expfmt.NewEncoder(&e.buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return nil, fmt.Errorf("encoding %s's metrics: %w", p.name, err)
		}
	}
	return e.buf.Bytes(), nil
}

// podObjects returns the fleet's pods as the HPA controller's pod lister sees
// them: Running; Ready when Ready; terminating ones with a deletion timestamp and
// not Ready; each requesting one GPU.
func (f *fleet) podObjects() []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(f.pods))
	for _, p := range f.pods {
		start := metav1.NewTime(f.t0.Add(p.created))
		cond := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: start}
		o := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{GPUResource: *resource.NewQuantity(1, resource.DecimalSI)},
			}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &start},
		}
		switch p.phase {
		case phaseReady:
			cond.Status, cond.LastTransitionTime = corev1.ConditionTrue, metav1.NewTime(f.t0.Add(p.readyAt))
		case phaseDraining:
			d := metav1.NewTime(f.t0.Add(p.deletedAt))
			o.DeletionTimestamp = &d
			cond.LastTransitionTime = d
		}
		o.Status.Conditions = []corev1.PodCondition{cond}
		out = append(out, o)
	}
	return out
}

// clone returns an independent copy of the fleet reporting to rec; renders,
// removal hooks and the scale history are not copied.
func (f *fleet) clone(rec recorder) *fleet {
	c := *f
	c.rec = rec
	c.onRemove = nil
	c.changes = nil
	c.held = append([]int(nil), f.held...)
	c.pods = make([]*pod, len(f.pods))
	for i, p := range f.pods {
		q := *p
		q.engine = p.engine.Clone()
		q.pendingFirsts = append([]int(nil), p.pendingFirsts...)
		q.pendingFinishd = append([]int(nil), p.pendingFinishd...)
		q.expo = nil
		c.pods[i] = &q
	}
	return &c
}
