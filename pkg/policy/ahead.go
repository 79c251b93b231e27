package policy

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	// The time zone database, read when the system has none, for the
	// scheduled minimums' TimeZone: the released images carry no zoneinfo
	// (hack/release's BaseLayer). About 450 KB of the binary.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
)

// The controls that see ahead: floors under a mean or demand policy's value,
// served inside the same External metric, so that a plain HPA follows them.
// All are in the pool's demand unit, replicas (the sum of the pods' parts, the
// value a KindDemand policy serves): a KindMean policy serves the floored
// demand divided by the pool's pods, which an HPA with target Value 1 turns
// back into ceil(demand) replicas.

// PeakHold keeps capacity for the last burst warm: the pool's demand is held
// at no less than its own peak over Window, decayed by HalfLife, times
// (1 + Headroom).
type PeakHold struct {
	// Window is how long a peak counts, in (0, MaxPeakWindow]. The hold keeps
	// at most one sample per Window/64, so a peak may end up to Window/64
	// early (see PoolState.observe).
	Window time.Duration
	// Headroom is the fraction added to the held peak, in [0, MaxHeadroom]
	// (0.2: 20 % above it). The newest demand is a peak too, so the served
	// demand is at least demand × (1 + Headroom).
	Headroom float64
	// HalfLife, when > 0, halves a peak's weight every HalfLife of its age, so
	// that a held burst releases capacity gradually; 0 holds it whole until it
	// leaves the window.
	HalfLife time.Duration
}

// Trend serves demand that is rising as it will be a lookahead from now: the
// pool's demand plus the slope of its own recent demand (a least-squares line
// over Window, never below 0) × Lookahead. A rise is followed before the queue
// builds behind a cold start; a flat or falling demand adds nothing.
type Trend struct {
	// Window is the span the slope is fitted over, in [1s, MaxTrendWindow];
	// the fit needs three samples spanning at least half of it.
	Window time.Duration
	// Lookahead is how far the rise is extrapolated, > 0, at most
	// MaxLookahead: the pods' cold start plus the HPA's scale-up
	// stabilization window is what a new replica takes to serve.
	Lookahead time.Duration
}

// ScheduledMinimum is a time window of known demand (a daily peak): while it is
// open the pool's demand is at least Demand replicas.
type ScheduledMinimum struct {
	// Schedule is a standard 5-field cron expression (minute hour day-of-month
	// month day-of-week, or one of the descriptors @yearly, @annually,
	// @monthly, @weekly, @daily, @midnight, @hourly) for the window's opening
	// times. It must open at least once in the five years after validation;
	// robfig/cron's @every and its TZ=/CRON_TZ= prefix are refused (the time
	// zone is TimeZone).
	Schedule string
	// Duration is how long the window stays open after each opening, > 0.
	Duration time.Duration
	// TimeZone is the IANA time zone the schedule is read in ("" for UTC);
	// "Local" is refused: the machine's zone would decide the answer.
	TimeZone string
	// Demand is the least demand, in replicas, while the window is open; in
	// (0, MaxScheduledDemand].
	Demand float64

	sched cron.Schedule
	loc   *time.Location
}

// Bounds of the controls that see ahead: what a served value can reach stays
// finite and servable (the server serves at most about 9.2e15 replicas in milli
// units, pkg/provider MilliQuantity).
const (
	// MaxHeadroom is the largest peak-hold headroom accepted: 10, a held peak
	// served at 11 times itself.
	MaxHeadroom = 10.0
	// MaxScheduledDemand is the largest scheduled minimum accepted, in
	// replicas: math.MaxInt32, the largest maxReplicas an autoscaling/v2 HPA
	// takes (its field is an int32).
	MaxScheduledDemand = float64(math.MaxInt32)
	// MaxLookahead is the longest trend lookahead accepted: an hour.
	MaxLookahead = time.Hour
	// MaxTrendWindow is the longest trend window accepted: a day.
	MaxTrendWindow = 24 * time.Hour
	// MaxPeakWindow is the longest peak-hold window accepted: a day.
	MaxPeakWindow = 24 * time.Hour
	// MaxRememberedDemand is the largest demand a peak hold or a trend
	// records, in replicas: math.MaxInt32, the largest maxReplicas an
	// autoscaling/v2 HPA takes. A larger one (a counter's jump read as
	// arrivals) is no measurement of a pool; it is served as it is, once, and
	// not remembered.
	MaxRememberedDemand = float64(math.MaxInt32)
	// trendSamples is how many samples a peak hold or a trend keeps per
	// window at most, but for the newest: samples are at least
	// Window/trendSamples apart.
	trendSamples = 64
)

// cronParser reads standard cron expressions and descriptors (robfig/cron's
// ParseStandard; compile refuses the extensions it also accepts).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// compile parses the schedule and loads the time zone, at now (a schedule
// must open within robfig/cron's five-year search from now).
func (m *ScheduledMinimum) compile(now time.Time) *FieldError {
	spec := strings.TrimSpace(m.Schedule)
	switch {
	case strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ="):
		return fieldErr("schedule", m.Schedule, "a time zone inside the schedule is not read: set timeZone")
	case strings.HasPrefix(spec, "@every"):
		return fieldErr("schedule", m.Schedule, "@every is not a cron schedule: give the openings as a 5-field cron expression (e.g. \"0 * * * *\" for every hour)")
	}
	sched, err := cronParser.Parse(spec)
	if err != nil {
		return fieldErr("schedule", m.Schedule, "not a 5-field cron expression (minute hour day-of-month month day-of-week): %v", err)
	}
	if m.TimeZone == "Local" {
		return fieldErr("timeZone", m.TimeZone, "the machine's own time zone would decide when the window opens: name an IANA zone (\"\" for UTC)")
	}
	loc, err := time.LoadLocation(m.TimeZone)
	if err != nil {
		return fieldErr("timeZone", m.TimeZone, "not an IANA time zone: %v", err)
	}
	if sched.Next(now.In(loc)).IsZero() {
		return fieldErr("schedule", m.Schedule, "never opens (no date matches in the next five years)")
	}
	m.sched, m.loc = sched, loc
	return nil
}

// Open reports whether the window is open at now: an opening falls in
// (now − Duration, now]. A schedule with no opening within robfig/cron's
// five-year search is closed.
//
// An opening whose wall time a daylight-saving change skips (02:30 on the
// night Europe/Berlin goes from 02:00 to 03:00) opens at the change, as cron
// daemons run a job of a skipped hour right after it (cronie, Debian's cron);
// robfig/cron's Next skips the opening, which would leave that day's
// window closed. An opening in a repeated hour opens at both of its times
// (that day's window ends an hour later).
func (m *ScheduledMinimum) Open(now time.Time) bool {
	if m.sched == nil {
		return false
	}
	from := now.Add(-m.Duration)
	if next := m.sched.Next(from.In(m.loc)); !next.IsZero() && !next.After(now) {
		return true
	}
	return m.skippedOpening(from, now)
}

// maxZoneChanges bounds the zone changes skippedOpening looks back over: real
// zones change at most a few times a year, so 64 reach back years, past any
// window between two openings of a schedule that opens (one that never does
// is refused).
const maxZoneChanges = 64

// skippedOpening reports whether a change of m.loc's offset forward within
// (from, now] skipped the wall time of an opening.
func (m *ScheduledMinimum) skippedOpening(from, now time.Time) bool {
	t := now.In(m.loc)
	for range maxZoneChanges {
		start, _ := t.ZoneBounds()
		if start.IsZero() || !start.After(from) {
			return false // no change in (from, now]
		}
		before := start.Add(-time.Nanosecond).In(m.loc)
		_, offBefore := before.Zone()
		_, offAfter := start.In(m.loc).Zone()
		if gap := time.Duration(offAfter-offBefore) * time.Second; gap > 0 {
			// In a fixed zone at the old offset the skipped wall times are
			// [start, start+gap): an opening there was skipped.
			fz := time.FixedZone("", offBefore)
			if next := m.sched.Next(start.In(fz).Add(-time.Second)); !next.IsZero() && next.Before(start.Add(gap)) {
				return true
			}
		}
		t = before
	}
	return false
}

// validateAhead checks the policy's peak hold, trend and scheduled minimums
// and compiles the schedules.
func (p *Policy) validateAhead() *FieldError {
	if (p.Peak != nil || p.Trend != nil || len(p.Minimums) > 0) && p.Kind != KindMean && p.Kind != KindDemand {
		return fieldErr("kind", p.Kind, "only mean and demand policies take a peak hold, a trend or scheduled minimums")
	}
	if t := p.Trend; t != nil {
		switch {
		case t.Window < time.Second || t.Window > MaxTrendWindow:
			return fieldErr("trend.window", t.Window, "must be in [1s, %s]", MaxTrendWindow)
		case t.Lookahead <= 0 || t.Lookahead > MaxLookahead:
			return fieldErr("trend.lookahead", t.Lookahead, "must be in (0, %s]", MaxLookahead)
		}
	}
	if h := p.Peak; h != nil {
		switch {
		case h.Window <= 0 || h.Window > MaxPeakWindow:
			return fieldErr("peak.window", h.Window, "must be in (0, %s]", MaxPeakWindow)
		case !(h.Headroom >= 0) || h.Headroom > MaxHeadroom:
			return fieldErr("peak.headroom", h.Headroom, "must be a number in [0, %g] (0.2: 20 %% above the peak)", MaxHeadroom)
		case h.HalfLife < 0:
			return fieldErr("peak.halfLife", h.HalfLife, "must be >= 0 (0: no decay within the window)")
		}
	}
	for i := range p.Minimums {
		m := &p.Minimums[i]
		if err := m.compile(time.Now()); err != nil {
			err.Field = fmt.Sprintf("minimums[%d].%s", i, err.Field)
			return err
		}
		if m.Duration <= 0 {
			return fieldErr(fmt.Sprintf("minimums[%d].duration", i), m.Duration, "must be > 0")
		}
		if !(m.Demand > 0) || m.Demand > MaxScheduledDemand {
			return fieldErr(fmt.Sprintf("minimums[%d].demand", i), m.Demand, "must be a number of replicas in (0, %d]", math.MaxInt32)
		}
	}
	return nil
}

// Remembers reports whether the policy keeps state between requests for a
// pool (a peak hold or a trend): the caller then keeps a PoolState per pool
// and passes it to Ahead.
func (p *Policy) Remembers() bool { return p.Peak != nil || p.Trend != nil }

// Memory returns how long the policy's pool state remembers demand: the longer
// of its peak hold's and its trend's windows (0 when it remembers nothing).
func (p *Policy) Memory() time.Duration {
	var d time.Duration
	if p.Peak != nil {
		d = p.Peak.Window
	}
	if p.Trend != nil {
		d = max(d, p.Trend.Window)
	}
	return d
}

// HasAhead reports whether the policy has a peak hold, a trend or scheduled
// minimums.
func (p *Policy) HasAhead() bool { return p.Remembers() || len(p.Minimums) > 0 }

// PoolState is what a policy remembers of one pool between requests: the
// demand it served, for its peak hold and its trend. One per (policy, pool); safe for
// concurrent use. The zero value is ready.
type PoolState struct {
	mu sync.Mutex
	// peaks is a monotone queue of demand samples: older ones are strictly
	// larger (a sample no larger than a newer one can never be the peak again,
	// since it is older and decays and expires first).
	peaks []demandSample
	// trend holds the demand samples of the trend's window, oldest first, at
	// least Window/trendSamples apart.
	trend []demandSample
	last  time.Time
}

type demandSample struct {
	at     time.Time
	demand float64
}

// LastUsed returns the time of the last observation (to drop states of pools
// nobody asks about).
func (s *PoolState) LastUsed() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// since returns the samples (oldest first) after start.
func since(samples []demandSample, start time.Time) []demandSample {
	k := 0
	for k < len(samples) && !samples[k].at.After(start) {
		k++
	}
	return samples[k:]
}

// observe records demand at now and returns the held peak: the largest
// recorded demand within window, weighted 2^(-age/halfLife) (never more than
// its demand), at least demand itself.
//
// Two samples keep their order under the decay (both halve every half-life),
// so a sample whose weight now is at most the new demand's is never the peak
// again: it is dropped (exact). A new demand within Window/trendSamples of a
// sample that outweighs it is not kept (that sample stays the larger until
// it leaves the window, at most Window/trendSamples before the new one
// would): so at most trendSamples+1 are kept, and a peak may end up to
// Window/trendSamples early but never outlives its window. A request older
// than the last one observed (out of order) is recorded and answered at that
// one's time.
func (s *PoolState) observe(now time.Time, demand float64, h *PeakHold) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := now
	if at.Before(s.last) {
		at = s.last
	}
	s.last = at
	s.peaks = since(s.peaks, at.Add(-h.Window))
	for n := len(s.peaks); n > 0 && s.peaks[n-1].weighed(at, h) <= demand; n-- {
		s.peaks = s.peaks[:n-1]
	}
	if n := len(s.peaks); n == 0 || at.Sub(s.peaks[n-1].at) >= h.Window/trendSamples {
		s.peaks = append(s.peaks, demandSample{at: at, demand: demand})
	}
	best := demand
	for _, p := range s.peaks {
		best = max(best, p.weighed(at, h))
	}
	return best
}

// weighed returns the sample's demand weighted at now by the hold's
// half-life: 2^(-age/halfLife), 1 for no half-life or a sample not older than
// now.
func (d demandSample) weighed(now time.Time, h *PeakHold) float64 {
	if age := now.Sub(d.at); h.HalfLife > 0 && age > 0 {
		return d.demand * math.Exp2(-float64(age)/float64(h.HalfLife))
	}
	return d.demand
}

// observeTrend records demand at now and returns the trend's addition: the
// least-squares slope of the demand over the window (per second), if it is
// rising, × the lookahead in seconds, at most MaxHeadroom × the window's
// largest demand (so that a jump between two close samples never serves
// thousands of times the pool); 0 from fewer than three samples or samples
// spanning less than half the window.
func (s *PoolState) observeTrend(now time.Time, demand float64, t *Trend) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.After(s.last) {
		s.last = now
	}
	s.trend = since(s.trend, now.Add(-t.Window))
	// Every sample but the newest is at least Window/trendSamples after the
	// one before it; the newest moves forward until it is that far from the
	// one before, then stays, and the next request appends.
	gap := t.Window / trendSamples
	switch n := len(s.trend); {
	case n > 0 && !now.After(s.trend[n-1].at):
		s.trend[n-1].demand = demand
	case n > 1 && s.trend[n-1].at.Sub(s.trend[n-2].at) < gap:
		s.trend[n-1] = demandSample{at: now, demand: demand}
	default:
		s.trend = append(s.trend, demandSample{at: now, demand: demand})
	}
	n := len(s.trend)
	if n < 3 || 2*now.Sub(s.trend[0].at) < t.Window {
		return 0
	}
	// x is each sample's time in seconds relative to now (<= 0).
	var mx, my float64
	for _, p := range s.trend {
		mx += p.at.Sub(now).Seconds()
		my += p.demand
	}
	mx, my = mx/float64(n), my/float64(n)
	var sxy, sxx float64
	for _, p := range s.trend {
		dx := p.at.Sub(now).Seconds() - mx
		sxy += dx * (p.demand - my)
		sxx += dx * dx
	}
	if sxx <= 0 {
		return 0
	}
	slope := sxy / sxx
	if !(slope > 0) {
		return 0
	}
	top := 0.0
	for _, p := range s.trend {
		top = max(top, p.demand)
	}
	return min(slope*t.Lookahead.Seconds(), MaxHeadroom*top)
}

// TrendSamples returns how many demand samples the trend holds and the time
// they span: its fit needs 3 spanning at least half its window (a trend that
// adds nothing with fewer fitted none).
func (s *PoolState) TrendSamples() (n int, span time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n = len(s.trend); n > 1 {
		span = s.trend[n-1].at.Sub(s.trend[0].at)
	}
	return n, span
}

// AheadValue says how the controls that see ahead moved a pool's value, in
// replicas.
type AheadValue struct {
	// Demand is the pool's own demand (what it served before the floors).
	Demand float64 `json:"demand"`
	// Peak is the held peak × (1 + headroom), when the policy holds one.
	Peak *float64 `json:"peak,omitempty"`
	// Trend is the demand plus its rising trend over the lookahead, when the
	// policy has a trend.
	Trend *float64 `json:"trend,omitempty"`
	// Scheduled is the largest open scheduled minimum, when one is open;
	// Window names it.
	Scheduled *float64 `json:"scheduled,omitempty"`
	Window    string   `json:"window,omitempty"`
	// Served is the demand served: the largest of the demand, the held peak,
	// the trend and the scheduled minimum.
	Served float64 `json:"served"`
	// Unremembered says that the measured demand was above
	// MaxRememberedDemand: served once, neither held nor fitted.
	Unremembered bool `json:"unremembered,omitempty"`
}

// Ahead applies the policy's peak hold, trend and scheduled minimums to pool
// (built by the policy's PoolBuilder) at now, recording the pool's demand in
// st (which may be nil for a policy that does not remember). A pool without a
// value keeps none (no data is never a floor), except a pool of zero pods
// under an open scheduled minimum, which is served that minimum (the HPA
// computes ceil(value / target) at zero replicas). The pool's Ahead field
// says what moved it.
func (p *Policy) Ahead(now time.Time, st *PoolState, pool Pool) Pool {
	if !p.HasAhead() {
		return pool
	}
	scale := 1.0 // value = demand / scale
	if p.Kind == KindMean && pool.Pods > 0 {
		scale = float64(pool.Pods)
	}
	var av AheadValue
	if pool.Value != nil {
		av.Demand = *pool.Value * scale
	} else if pool.Pods > 0 {
		return pool
	}
	av.Served = av.Demand
	// What the peak hold and the trend record is the demand measured: not
	// the floor of the pods still starting (PoolBuilder.AddStarting), which
	// is the HPA's own last answer and would hold or extrapolate the
	// replicas it served into more replicas, answer after answer; nor a
	// demand no HPA can scale to (MaxRememberedDemand).
	measured := av.Demand
	if pool.Measured != nil {
		measured = *pool.Measured * scale
	}
	remember := st != nil && pool.Value != nil && measured <= MaxRememberedDemand
	av.Unremembered = p.Remembers() && pool.Value != nil && measured > MaxRememberedDemand
	if h := p.Peak; h != nil && remember {
		peak := st.observe(now, measured, h) * (1 + h.Headroom)
		av.Peak = &peak
		av.Served = max(av.Served, peak)
	}
	if t := p.Trend; t != nil && remember {
		ahead := measured + st.observeTrend(now, measured, t)
		av.Trend = &ahead
		av.Served = max(av.Served, ahead)
	}
	for i := range p.Minimums {
		m := &p.Minimums[i]
		if m.Open(now) && (av.Scheduled == nil || m.Demand > *av.Scheduled) {
			d := m.Demand
			av.Scheduled, av.Window = &d, fmt.Sprintf("%q for %s (%s)", m.Schedule, m.Duration, zoneName(m.TimeZone))
		}
	}
	if av.Scheduled != nil {
		av.Served = max(av.Served, *av.Scheduled)
	}
	if pool.Value == nil && av.Scheduled == nil {
		return pool
	}
	v := av.Served / scale
	pool.Value = &v
	pool.Ahead = &av
	return pool
}

func zoneName(tz string) string {
	if tz == "" {
		return "UTC"
	}
	return tz
}
