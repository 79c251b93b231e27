package history

import (
	"math"
	"slices"
	"time"

	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// Defaults of HistoryOptions.
const (
	// DefaultStateWindow is how long an engine must make no progress before it
	// is judged wedged or frozen: 10 s, five scrapes at the adapter's default 2 s
	// interval. A healthy engine with work generates tokens every step (tens of
	// milliseconds); 10 s also covers a long prompt's chunked prefill on a busy
	// engine, during which no counter may move.
	DefaultStateWindow = 10 * time.Second
	// DefaultMaxReadings bounds the readings kept per pod; older ones are thinned
	// so that the kept ones still span the longest window.
	DefaultMaxReadings = 24
	// MinStateReadings is the number of readings within the state window an
	// engine state needs: "across several scrapes".
	MinStateReadings = 3
	// minRecent is the number of newest readings never thinned.
	minRecent = 6
)

// HistoryOptions say what a History keeps and precomputes.
type HistoryOptions struct {
	// Needs lists the windows the policies read (Catalog.Needs).
	Needs Needs
	// StateWindow is the span over which engine states are judged
	// (DefaultStateWindow when 0).
	StateWindow time.Duration
	// MaxReadings bounds the readings kept (DefaultMaxReadings when 0).
	MaxReadings int
	// plain keeps every reading's histograms (no pack): the reference
	// FuzzCompactHistory holds compact histories to.
	plain bool
}

func (o HistoryOptions) withDefaults() HistoryOptions {
	if o.StateWindow <= 0 {
		o.StateWindow = DefaultStateWindow
	}
	if o.MaxReadings <= 0 {
		o.MaxReadings = DefaultMaxReadings
	}
	o.MaxReadings = max(o.MaxReadings, minRecent+2)
	return o
}

// History is the recent readings of one pod, oldest first, with the window
// aggregates and engine facts its policies read precomputed when a reading is
// appended, so that answering an HPA request costs no pass over the readings.
// It is immutable: Append returns a new History.
type History struct {
	readings []*signals.Reading
	// smooth[i] reports that readings i-1 and i are a smooth pair (see
	// smoothPair); nil when no policy reads a window.
	smooth []bool
	// packs[i], when set, holds the histograms of readings[i] (which has
	// none) relative to readings[i+1]'s (see pack); nil for a plain History.
	packs   []pack
	windows []Window
	facts   []EngineFacts
	opts    HistoryOptions
}

// StateWindow returns the span over which engine states are judged.
func (h *History) StateWindow() time.Duration { return h.opts.StateWindow }

// Latest returns the newest reading, nil for an empty (or nil) history.
func (h *History) Latest() *signals.Reading {
	if h == nil || len(h.readings) == 0 {
		return nil
	}
	return h.readings[len(h.readings)-1]
}

// Readings returns the readings, oldest first. The slice is shared: do not
// modify it. When windows are kept, a reading older than the newest may hold
// no latency histograms (Engines[i].Hist and Hist nil): they are held packed,
// PackedBytes bytes in all, and only the window aggregates read them.
func (h *History) Readings() []*signals.Reading {
	if h == nil {
		return nil
	}
	return h.readings
}

// NewHistory returns a history of the readings (oldest first, each with its
// Time set), as Append would build it one by one.
func NewHistory(o HistoryOptions, readings ...*signals.Reading) *History {
	var h *History
	for _, r := range readings {
		h = h.Append(r, o)
	}
	return h
}

// Append returns a history with r as its newest reading. A reading that is not
// newer than the latest (samples with unchanged explicit timestamps) replaces
// it. Readings older than the longest window (plus one at or before its start)
// are dropped, and past MaxReadings the older ones are thinned. h may be nil.
func (h *History) Append(r *signals.Reading, o HistoryOptions) *History {
	o = o.withDefaults()
	windows := len(o.Needs.Windows) > 0
	c := h.chain(windows && !o.plain, o.MaxReadings)
	c.push(r)
	c.prune(max(o.Needs.MaxWindow(), o.StateWindow), o.MaxReadings)
	out := &History{readings: c.rs, packs: c.pk, opts: o}
	if windows {
		out.smooth = c.sm
		if !c.packed {
			out.smooth = smoothFlags(h, c.rs)
		}
		for _, k := range o.Needs.Windows {
			out.windows = append(out.windows, computeWindow(c.rs, c.pk, out.smooth, k))
		}
	}
	out.facts = engineFacts(c.rs, o.StateWindow)
	return out
}

// chain returns a copy of h's readings (h may be nil) to append to: with
// their packs and smooth flags when packed, else every reading with its
// histograms and no flags (Append computes them by smoothFlags).
func (h *History) chain(packed bool, maxN int) chain {
	c := chain{packed: packed}
	var old []*signals.Reading
	if h != nil {
		old = h.readings
	}
	c.rs = make([]*signals.Reading, 0, min(len(old)+1, maxN+1))
	c.rs = append(c.rs, old...)
	if h != nil && h.packs != nil {
		c.pk = make([]pack, len(old), cap(c.rs))
		copy(c.pk, h.packs)
	}
	if !packed {
		if c.pk != nil {
			c.unpackAll()
			c.pk = nil
		}
		return c
	}
	if c.pk == nil {
		c.pk = make([]pack, len(old), cap(c.rs))
	}
	c.sm = make([]bool, len(old), cap(c.rs))
	if h != nil && len(h.smooth) == len(old) {
		copy(c.sm, h.smooth)
	} else {
		for k := 1; k < len(old); k++ {
			c.sm[k] = smoothPair(c.full(k-1), c.full(k))
		}
	}
	return c
}

// Window is what happened in one pod over one window: the counter increases and
// latency observations of the engines the key's model selects. A History
// computes its windows from its readings; a time-series database gives them
// ready-made (NewSnapshot, WindowOf).
type Window struct {
	// Key is the window (and model restriction) the aggregate answers.
	Key WindowKey
	// OK reports that the window has data: at least two readings fall in it
	// (NewSnapshot: a Span above 0).
	OK bool
	// Span is the time between the first and the last reading used.
	Span time.Duration
	// Increases holds the counter increases (only counter signals are set:
	// Preemptions, GenerationTokens, PromptTokens, RequestsFinished, Rejections).
	Increases signals.Values
	// Histograms holds the observations per latency histogram, nil when none.
	Histograms [signals.NumHistos]*signals.Histogram
	// Resets counts counter resets seen; Approx reports interpolated layouts.
	Resets int
	Approx bool
	// HeldChange is the change, from the window's first reading to its newest,
	// of the requests the selected engines hold (waiting, deferred and running),
	// over the engines in both; HeldKnown reports that it was computed (a
	// window built from increases alone has no gauges).
	HeldChange float64
	HeldKnown  bool
	// Inconsistent reports, per latency histogram, a pair of readings where a
	// bucket fell while the count did not: not a restart (everything would
	// fall) but a broken exposition; the window's observations of that
	// histogram are then unknown (Histograms nil), not counted whole.
	Inconsistent [signals.NumHistos]bool
}

// computeWindow aggregates the readings within the key's window before the
// newest: counters by their increases across consecutive readings (a decrease is
// a reset: the new value counts whole, as PromQL's rate does; an engine's first
// reading counts nothing), histograms by their new observations (Histogram.Since).
// When every pair of readings in the window is smooth (smooth may be nil: none
// is), the histograms' observations are the newest reading's counts less the
// first's, which is exactly the sum of the pairs' differences (whole numbers add
// and subtract without rounding): 2 count arrays read per engine and histogram
// instead of two per pair.
//
// pk holds the readings' packs (nil: none is packed). A smooth window whose
// readings before the newest are all packed sums its packs' differences
// (packedWindow); another window with packed readings rebuilds them first.
func computeWindow(rs []*signals.Reading, pk []pack, smooth []bool, k WindowKey) Window {
	a := Window{Key: k}
	last := rs[len(rs)-1]
	start := last.At().Add(-k.Window)
	i0 := len(rs) - 1
	for i := len(rs) - 2; i >= 0 && !rs[i].At().Before(start); i-- {
		i0 = i
	}
	if i0 == len(rs)-1 {
		return a
	}
	a.OK, a.Span = true, last.At().Sub(rs[i0].At())
	fast := len(smooth) == len(rs) && !slices.Contains(smooth[i0+1:], false) && oneLayout(last)
	if pk != nil && slices.ContainsFunc(pk[i0:len(rs)-1], isPack) {
		if fast && !slices.ContainsFunc(pk[i0:len(rs)-1], func(p pack) bool { return p == nil }) {
			packedWindow(&a, rs, pk, i0, signals.EngineFilter(last, k.Model))
			a.HeldChange, a.HeldKnown = heldChange(rs[i0], last, k.Model)
			return a
		}
		rs = materialize(rs, pk, i0)
	}
	var sums [signals.NumHistos]float64 // the fast path's pairwise sums of Sum
	var summed [signals.NumHistos]bool
	// A smooth window's readings have the same engines, in the same order,
	// with the same models and backend flags: one filter, engines by index.
	keep := signals.EngineFilter(last, k.Model)
	for j := i0 + 1; j < len(rs); j++ {
		cur, prev := rs[j], rs[j-1]
		if !fast {
			keep = signals.EngineFilter(cur, k.Model)
		}
		for ei := range cur.Engines {
			e := &cur.Engines[ei]
			if keep != nil && !keep(e) {
				continue
			}
			var pe *signals.EngineSignals
			if fast {
				pe = &prev.Engines[ei]
			} else if pe = signals.FindEngine(prev, e.ID); pe == nil {
				continue // first reading of this engine: nothing to compare
			}
			a.addIncreases(e, pe)
			for hk := range signals.NumHistos {
				if e.Hist[hk] == nil || pe.Hist[hk] == nil {
					continue
				}
				if fast {
					// Since's Sum difference, added in the same order.
					d := e.Hist[hk].Sum - pe.Hist[hk].Sum
					if d < 0 {
						d = 0
					}
					if summed[hk] {
						sums[hk] += d
					} else {
						sums[hk], summed[hk] = d, true
					}
					continue
				}
				if inconsistent(e.Hist[hk], pe.Hist[hk]) {
					a.Inconsistent[hk] = true
					continue
				}
				reset, approx := addSince(&a.Histograms[hk], e.Hist[hk], pe.Hist[hk])
				if reset {
					a.Resets++
				}
				a.Approx = a.Approx || approx
			}
		}
	}
	if fast {
		telescope(&a, rs[i0], rs[i0+1], last, keep, &sums)
	}
	for hk := range signals.NumHistos {
		if a.Inconsistent[hk] {
			a.Histograms[hk] = nil
		}
	}
	a.HeldChange, a.HeldKnown = heldChange(rs[i0], last, k.Model)
	return a
}

// heldChange is the change of waiting + deferred + running from first to
// last over the engines (of model) in both readings; false when no engine
// reports the gauges in both.
func heldChange(first, last *signals.Reading, model string) (float64, bool) {
	keep := signals.EngineFilter(last, model)
	held := func(e *signals.EngineSignals) (float64, bool) {
		q, okq := e.Value(signals.QueueDepth)
		r, okr := e.Value(signals.Running)
		d, _ := e.Value(signals.QueueDeferred)
		return q + r + d, okq && okr
	}
	change, known := 0.0, false
	for i := range last.Engines {
		e := &last.Engines[i]
		if keep != nil && !keep(e) {
			continue
		}
		pe := signals.FindEngine(first, e.ID)
		if pe == nil {
			continue
		}
		now, ok1 := held(e)
		then, ok2 := held(pe)
		if ok1 && ok2 {
			change += now - then
			known = true
		}
	}
	return change, known
}

// inconsistent reports whether h, of older's layout, has a bucket below
// older's while its count is not: Histogram.Since would take it for a
// restart and count h whole.
func inconsistent(h, older *signals.Histogram) bool {
	return h.Count >= older.Count && signals.SameLayout(h, older) && decreased(h, older)
}

// addIncreases adds each counter's increase from pe to e (a decrease is a
// reset: e's value counts whole).
func (a *Window) addIncreases(e, pe *signals.EngineSignals) {
	for s := range signals.NumSignals {
		if !s.IsCounter() {
			continue
		}
		v, ok := e.Value(s)
		pv, pok := pe.Value(s)
		if !ok || !pok {
			continue
		}
		d := v - pv
		if d < 0 {
			d = v
			a.Resets++
		}
		a.Increases.Add(s, d)
	}
}

// telescope sets the histograms of a smooth window from its first and newest
// readings: per histogram, the newest counts less the first's, over the
// engines keep selects, with the Sums computed pair by pair and the layout of
// the window's second reading (the first pair's newer one), as addSince
// would have built them.
func telescope(a *Window, first, second, last *signals.Reading, keep func(*signals.EngineSignals) bool, sums *[signals.NumHistos]float64) {
	for ei := range last.Engines {
		e, fe := &last.Engines[ei], &first.Engines[ei]
		if keep != nil && !keep(e) {
			continue
		}
		for hk := range signals.NumHistos {
			h, f := e.Hist[hk], fe.Hist[hk]
			if h == nil || f == nil {
				continue
			}
			acc := a.Histograms[hk]
			if acc == nil {
				acc = &signals.Histogram{Bounds: second.Engines[ei].Hist[hk].Bounds, Counts: make([]float64, len(h.Counts)), Sum: sums[hk]}
				a.Histograms[hk] = acc
			}
			for i := range h.Counts {
				acc.Counts[i] += h.Counts[i] - f.Counts[i]
			}
			acc.Count += h.Count - f.Count
		}
	}
}

// maxWhole and maxSmoothEngines bound a smooth pair: sums of counts below
// maxWhole over up to maxSmoothEngines engines stay below 2^53, where float64
// counts by one, in any order (--scrape-max-engines allows more engines than
// DefaultMaxEngines; such readings take the pairwise path).
const (
	maxWhole         = 1 << 44
	maxSmoothEngines = 1 << (53 - 44)
)

// smoothPair reports whether two consecutive readings have the same engines
// (at most maxSmoothEngines, each ID once, the same IDs, models and backend
// flags in the same order) and every latency histogram
// either absent from both or, in both, of one layout (shared with the
// engine's other histograms of its kind), with whole, non-negative counts
// below maxWhole that did not go down: a pair whose differences Since builds
// without reset or interpolation.
func smoothPair(prev, cur *signals.Reading) bool {
	if len(prev.Engines) != len(cur.Engines) || len(cur.Engines) > maxSmoothEngines {
		return false
	}
	for i := range cur.Engines {
		e, pe := &cur.Engines[i], &prev.Engines[i]
		if e.ID != pe.ID || e.Model != pe.Model || e.Backend != pe.Backend || (i > 0 && e.ID == cur.Engines[i-1].ID) {
			return false
		}
		for hk := range signals.NumHistos {
			h, o := e.Hist[hk], pe.Hist[hk]
			if (h == nil) != (o == nil) {
				return false
			}
			if h == nil {
				continue
			}
			if !signals.SameLayout(h, o) || h.Count < o.Count || !whole(h) || !whole(o) || decreased(h, o) {
				return false
			}
		}
	}
	return true
}

// whole reports whether a histogram's counts are whole numbers in [0,
// maxWhole) (and not -0).
func whole(h *signals.Histogram) bool {
	ok := func(v float64) bool { return v >= 0 && v < maxWhole && v == math.Trunc(v) && !math.Signbit(v) }
	if !ok(h.Count) {
		return false
	}
	for _, c := range h.Counts {
		if !ok(c) {
			return false
		}
	}
	return true
}

// oneLayout reports whether, in r, each kind of latency histogram has one
// layout across the engines (the window's histograms add engine by engine
// without interpolation).
func oneLayout(r *signals.Reading) bool {
	for hk := range signals.NumHistos {
		var first *signals.Histogram
		for i := range r.Engines {
			h := r.Engines[i].Hist[hk]
			if h == nil {
				continue
			}
			if first == nil {
				first = h
			} else if !signals.SameLayout(first, h) {
				return false
			}
		}
	}
	return true
}

// smoothFlags returns the smooth flag of each pair of rs, reusing h's for the
// pairs that were consecutive there.
func smoothFlags(h *History, rs []*signals.Reading) []bool {
	out := make([]bool, len(rs))
	var old []*signals.Reading
	var flags []bool
	if h != nil && len(h.smooth) == len(h.readings) {
		old, flags = h.readings, h.smooth
	}
	j := 0
	for k := 1; k < len(rs); k++ {
		for j < len(old) && old[j] != rs[k] {
			j++
		}
		if j < len(old) && j > 0 && old[j-1] == rs[k-1] {
			out[k] = flags[j]
			continue
		}
		out[k] = smoothPair(rs[k-1], rs[k])
	}
	return out
}

// addSince adds h.Since(older) to the window's histogram *acc (a copy of it
// when *acc is nil) and returns Since's reset and approx. When h, older and
// *acc share a layout and no count went down (every scrape of a steady engine)
// it adds the differences in place, with the same arithmetic as Since then
// addInPlace, without building the difference (which took 252 of the 590
// allocations of a scrape under every term kind: BenchmarkScrapeReading).
func addSince(acc **signals.Histogram, h, older *signals.Histogram) (reset, approx bool) {
	if h.Count >= older.Count && signals.SameLayout(h, older) && !decreased(h, older) && (*acc == nil || signals.SameLayout(*acc, h)) {
		count, sum := h.Count-older.Count, h.Sum-older.Sum
		if sum < 0 {
			sum = 0
		}
		if *acc == nil {
			a := &signals.Histogram{Bounds: h.Bounds, Counts: make([]float64, len(h.Counts)), Count: count, Sum: sum}
			for i := range h.Counts {
				a.Counts[i] = h.Counts[i] - older.Counts[i]
			}
			*acc = a
			return false, false
		}
		a := *acc
		for i := range h.Counts {
			a.Counts[i] += h.Counts[i] - older.Counts[i]
		}
		a.Count += count
		a.Sum += sum
		return false, false
	}
	d, reset, approx := h.Since(older)
	switch {
	case *acc == nil:
		*acc = d.Clone() // d may be the engine's own cumulative histogram
	case !(*acc).AddInPlace(d):
		*acc = (*acc).Add(d)
	}
	return reset, approx
}

// decreased reports whether a bucket of h (same layout as older) has fewer
// observations than in older: a reset, for Since.
func decreased(h, older *signals.Histogram) bool {
	for i := range h.Counts {
		if h.Counts[i]-older.Counts[i] < 0 {
			return true
		}
	}
	return false
}

// Window returns the aggregate for a key: the precomputed one, or (after a
// configuration change added a window, until the next scrape) one computed now.
func (h *History) Window(k WindowKey) Window {
	for i := range h.windows {
		if h.windows[i].Key == k {
			return h.windows[i]
		}
	}
	return computeWindow(h.readings, h.packs, h.smooth, k)
}

// EngineFacts is what the readings within the state window say about one
// engine of the newest reading; EngineState derives its state from them.
type EngineFacts struct {
	// ID is the engine's ID.
	ID string
	// Readings is the number of readings of the engine within the state window,
	// and Span the time from the oldest of them to the newest.
	Readings int
	Span     time.Duration
	// Asleep reports that the newest reading says the engine sleeps (vLLM sleep
	// mode: awake = 0).
	Asleep bool
	// Waiting: requests waited (queue depth or deferred > 0) in every reading.
	// Working: requests ran (running > 0) in every reading.
	Waiting, Working bool
	// HasTokens: every reading has the generation-token counter; TokensFlat: it
	// did not move.
	HasTokens, TokensFlat bool
	// HasFinished and FinishedFlat: the same for finished requests;
	// PromptsFlat: no prompt token was prefilled (true when the counter is absent).
	HasFinished, FinishedFlat bool
	PromptsFlat               bool
	// HasCounters: every reading has at least one counter; CountersFlat: none
	// of the counters present moved.
	HasCounters, CountersFlat bool
	// GaugesFlat: queue depth, running and KV-cache usage were identical in
	// every reading.
	GaugesFlat bool
	// RejectionsRose: the admission-rejection counter grew since the reading
	// before the newest.
	RejectionsRose bool
	// InQueue is waiting + deferred + running in the newest reading.
	InQueue float64
	// TokensIncrease is how many tokens the engine generated from the oldest
	// reading in the window to the newest (0 when the counter is absent; a
	// counter that went down, a restart, counts as +Inf: it moved), and
	// RunningMean its mean running requests over those readings: their ratio
	// per second tells a livelock (prompts re-prefilled, no token made) from
	// progress.
	TokensIncrease float64
	RunningMean    float64
	// KVClimbing: KV-cache usage is present in every reading of the window,
	// never fell from one to the next and rose overall. vLLM V1 adds a
	// prompt's tokens to its counter only when its prefill completes, so a
	// long chunked prefill shows every counter flat while its chunks fill the
	// KV cache: that climb is progress.
	KVClimbing bool
	// GaugesDead: the engine's queue and running gauges read 0 in every
	// reading of the window while its finished-requests counter rose: they
	// are not updated (trtllm-serve without enable_iter_perf_stats, hazard
	// NC-17), so its 0 is unknown, not idle. Judged only for the engines whose
	// gauges can be dead that way (deadGaugeDialects); Finished is the rise.
	GaugesDead bool
	Finished   float64
}

// deadGaugeDialects are the engines whose queue and running gauges can stay 0
// while requests complete: trtllm-serve fills them from iteration stats,
// which are off by default (TRT-LLM PR #19418). Other engines' gauges are
// set by the scheduler itself; a short request between two scrapes there is
// no evidence of dead gauges.
var deadGaugeDialects = []string{"trtllm"}

// engineFacts gathers the facts of each engine of the newest reading over the
// readings within the state window.
func engineFacts(rs []*signals.Reading, window time.Duration) []EngineFacts {
	last := rs[len(rs)-1]
	start := last.At().Add(-window)
	out := make([]EngineFacts, len(last.Engines))
	for ei := range last.Engines {
		e := &last.Engines[ei]
		f := EngineFacts{ID: e.ID, Waiting: true, Working: true, HasTokens: true, TokensFlat: true,
			HasFinished: true, FinishedFlat: true, PromptsFlat: true, HasCounters: true, CountersFlat: true, GaugesFlat: true}
		if aw, ok := e.Value(signals.Awake); ok && aw < 0.5 {
			f.Asleep = true
		}
		q, _ := e.Value(signals.QueueDepth)
		qd, _ := e.Value(signals.QueueDeferred)
		run, _ := e.Value(signals.Running)
		f.InQueue = q + qd + run
		kvNewer, kvOK := e.Value(signals.KVCacheUsage)
		kvFirst, kvLast := kvNewer, kvNewer
		runSum := 0.0
		zeros := slices.Contains(deadGaugeDialects, last.Dialect)
		var oldest *signals.EngineSignals
		for i := len(rs) - 1; i >= 0 && !rs[i].At().Before(start); i-- {
			x := signals.FindEngine(rs[i], e.ID)
			if x == nil {
				break
			}
			oldest = x
			f.Readings++
			f.Span = last.At().Sub(rs[i].At())
			wq, _ := x.Value(signals.QueueDepth)
			wd, _ := x.Value(signals.QueueDeferred)
			wr, _ := x.Value(signals.Running)
			runSum += wr
			_, hq := x.Value(signals.QueueDepth)
			_, hr := x.Value(signals.Running)
			zeros = zeros && hq && hr && wq == 0 && wr == 0
			f.Waiting = f.Waiting && wq+wd > 0
			f.Working = f.Working && wr > 0
			// Walking back in time: the KV usage of each older reading must not
			// be above the newer one's.
			if kv, ok := x.Value(signals.KVCacheUsage); !ok || !kvOK || kv > kvNewer {
				kvOK = false
			} else {
				kvNewer, kvFirst = kv, kv
			}
			f.compare(x, e)
		}
		if f.Readings > 0 {
			f.RunningMean = runSum / float64(f.Readings)
			f.KVClimbing = kvOK && f.Readings > 1 && kvLast > kvFirst
			lv, lok := e.Value(signals.GenerationTokens)
			if v, ok := oldest.Value(signals.GenerationTokens); ok && lok {
				f.TokensIncrease = lv - v
				if lv < v {
					f.TokensIncrease = math.Inf(1)
				}
			}
			lf, lfok := e.Value(signals.RequestsFinished)
			if v, ok := oldest.Value(signals.RequestsFinished); ok && lfok && lf > v {
				f.Finished = lf - v
				f.GaugesDead = zeros && f.Readings > 1
			}
		}
		f.RejectionsRose = rejectionsRose(rs, e)
		out[ei] = f
	}
	return out
}

// compare records what an older reading x of an engine says against its
// newest e: which counters moved, which the engine lacks, and whether the
// queue, running and KV-cache gauges stayed the same.
func (f *EngineFacts) compare(x, e *signals.EngineSignals) {
	counters := 0
	for s := range signals.NumSignals {
		if !s.IsCounter() {
			continue
		}
		v, ok := x.Value(s)
		if ok {
			counters++
		}
		lv, lok := e.Value(s)
		if ok && lok && v != lv {
			f.CountersFlat = false
			switch s {
			case signals.GenerationTokens:
				f.TokensFlat = false
			case signals.RequestsFinished:
				f.FinishedFlat = false
			case signals.PromptTokens:
				f.PromptsFlat = false
			}
		}
		if !ok {
			switch s {
			case signals.GenerationTokens:
				f.HasTokens = false
			case signals.RequestsFinished:
				f.HasFinished = false
			}
		}
	}
	f.HasCounters = f.HasCounters && counters > 0
	for _, s := range []signals.Signal{signals.QueueDepth, signals.Running, signals.KVCacheUsage} {
		v, ok := x.Value(s)
		lv, lok := e.Value(s)
		if ok != lok || v != lv {
			f.GaugesFlat = false
		}
	}
}

// rejectionsRose reports whether engine e's admission rejections rose since
// the reading before the newest of rs, however old: a cap is hit now,
// whatever the state window.
func rejectionsRose(rs []*signals.Reading, e *signals.EngineSignals) bool {
	if len(rs) < 2 {
		return false
	}
	x := signals.FindEngine(rs[len(rs)-2], e.ID)
	if x == nil {
		return false
	}
	v, ok := x.Value(signals.Rejections)
	lv, lok := e.Value(signals.Rejections)
	return ok && lok && lv > v
}

// FactsOf returns the facts of an engine of the newest reading by ID, nil when
// the newest reading has no such engine.
func (h *History) FactsOf(id string) *EngineFacts {
	for i := range h.facts {
		if h.facts[i].ID == id {
			return &h.facts[i]
		}
	}
	return nil
}

// NewSnapshot builds a History from aggregates computed elsewhere: the newest
// reading (its gauges, counters and Time), the window aggregates its policies
// read, and the engines' facts for the engine states (nil when the source
// cannot tell: every engine is then in StateOK unless asleep). Pooling a
// snapshot is pooling the same numbers a scraped History would give, so a
// Prometheus-backed source and direct scrapes share every rule. A window has
// data when its Span is above 0; negative, NaN or infinite increases, and any
// of another signal than a counter, are dropped (a counter never decreases).
func NewSnapshot(latest *signals.Reading, windows []Window, facts []EngineFacts, o HistoryOptions) *History {
	o = o.withDefaults()
	h := &History{readings: []*signals.Reading{latest}, opts: o, facts: facts}
	if facts == nil {
		for i := range latest.Engines {
			f := EngineFacts{ID: latest.Engines[i].ID}
			if aw, ok := latest.Engines[i].Value(signals.Awake); ok && aw < 0.5 {
				f.Asleep = true
			}
			h.facts = append(h.facts, f)
		}
	}
	for _, w := range windows {
		a := Window{Key: w.Key, OK: w.Span > 0, Span: w.Span, Histograms: w.Histograms}
		for s := range signals.NumSignals {
			if v, ok := w.Increases.Value(s); ok && s.IsCounter() && v >= 0 && !math.IsInf(v, 1) {
				a.Increases.Set(s, v)
			}
		}
		h.windows = append(h.windows, a)
	}
	return h
}

// Needs says what the policies of a catalog need kept per pod.
type Needs struct {
	// Histograms reports whether any policy reads latency histograms.
	Histograms bool
	// Windows lists the distinct (window, model) pairs of rate and latency terms.
	Windows []WindowKey
	// GatewayMetrics lists the gateway queue metrics of the policies' gateway
	// inputs.
	GatewayMetrics []string
}

// WindowKey is one window aggregate a policy reads.
type WindowKey struct {
	Window time.Duration
	Model  string
}

// Add adds a window the policies read, once.
func (n *Needs) Add(k WindowKey) {
	if !slices.Contains(n.Windows, k) {
		n.Windows = append(n.Windows, k)
	}
}

// MaxWindow returns the longest window needed (0 for none).
func (n Needs) MaxWindow() time.Duration {
	var m time.Duration
	for _, k := range n.Windows {
		m = max(m, k.Window)
	}
	return m
}

// Facts returns what the readings within the state window say about each
// engine of the newest reading (for NewSnapshot). The slice is shared: do not
// modify it.
func (h *History) Facts() []EngineFacts {
	if h == nil {
		return nil
	}
	return h.facts
}

// WindowOf returns the Window a Reading of increases stands for: a reading whose counters are each an increase over the window and whose
// histograms count the observations in it (what PromQL's increase() of the
// counters and of the _bucket series gives, read by ExtractSamples), folded
// over the engines the key's model selects as a scraped History's window is.
// Span is 0 (no data for the window) when no engine is selected.
func WindowOf(key WindowKey, span time.Duration, increases *signals.Reading) Window {
	w := Window{Key: key}
	f := signals.FoldEngines(increases.Engines, signals.EngineFilter(increases, key.Model))
	if f.EngineCount == 0 {
		return w
	}
	w.Span, w.OK = span, span > 0
	for s := range signals.NumSignals {
		if v, ok := f.Value(s); ok && s.IsCounter() {
			w.Increases.Set(s, v)
		}
	}
	w.Histograms = f.Hist
	return w
}
