package policy

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
)

// demandBody is a one-engine vLLM body with queue q, running n and finished
// requests done (vllm:request_success_total, counted per finished_reason).
func demandBody(q, n, done float64) string {
	return vllm(q, n, 0.1) + "vllm:request_success_total{engine=\"0\",finished_reason=\"length\"} " + ftoa(done) + "\n"
}

func demandCatalog(t *testing.T, p Policy) *Catalog {
	t.Helper()
	c, err := NewCatalog(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDemandRateTerm: arrivals per second = finished + growth of what the
// engine holds, over the window, divided by the per-replica set point: the
// term's unit is replicas. 30 s apart, 300 more finished and 30 more held
// (queue 10 → 25, running 20 → 35): 330 arrivals / 30 s = 11 requests/s, at a
// set point of 5.5 requests/s per replica that is 2 replicas.
func TestDemandRateTerm(t *testing.T) {
	c := demandCatalog(t, Policy{Name: "ahead", Kind: KindDemand, UnknownSaturation: 1,
		Terms: []Term{{Kind: TermDemandRate, SetPoint: 5.5, Window: 30 * time.Second}}})
	p := c.Lookup("ahead")
	h := history.NewHistory(history.HistoryOptions{Needs: c.Needs()},
		read(t, demandBody(10, 20, 1000), t0), read(t, demandBody(25, 35, 1300), t0.Add(30*time.Second)))
	rep := p.ExplainPod(h, "", t0.Add(30*time.Second), maxAge)
	if len(rep.Terms) != 1 || !approx(rep.Terms[0].Value, 11) || !approx(rep.Terms[0].Ratio, 2) {
		t.Fatalf("terms %+v, want demandRate 11 requests/s, ratio 2", rep.Terms)
	}
	if !strings.Contains(rep.Terms[0].Note, "330 arrived over 30s") {
		t.Errorf("note %q, want the arrivals and the span", rep.Terms[0].Note)
	}
	// Two such pods: the pool's demand is the sum, 4 replicas.
	b := p.NewPool(t0.Add(30*time.Second), maxAge)
	b.Add(h, "")
	b.Add(h, "")
	if pool := b.Pool(); pool.Value == nil || !approx(*pool.Value, 4) {
		t.Errorf("pool value %v, want 4 replicas", deref(pool.Value))
	}
	// One reading: no window, no value for the term.
	one := history.NewHistory(history.HistoryOptions{Needs: c.Needs()}, read(t, demandBody(0, 0, 5), t0))
	if rep := p.ExplainPod(one, "", t0, maxAge); len(rep.Terms) != 0 {
		t.Errorf("one reading gave terms %+v, want none", rep.Terms)
	}
	// Validation names the field and the unit.
	if _, err := NewCatalog(Policy{Name: "bad", Kind: KindMean, Terms: []Term{{Kind: TermDemandRate}}}); err == nil ||
		!strings.Contains(err.Error(), "requests per second per replica") {
		t.Errorf("a demand rate without a set point: %v", err)
	}
}

// TestPeakHold: the served demand is the largest of the demand and the held
// peak × (1 + headroom); a peak leaves after the window, and with a half-life
// it decays before.
func TestPeakHold(t *testing.T) {
	h := &PeakHold{Window: 10 * time.Minute, Headroom: 0.25}
	var st PoolState
	at := func(m float64) time.Time { return t0.Add(time.Duration(m * float64(time.Minute))) }
	steps := []struct {
		min, demand, want float64
	}{
		{0, 4, 5},       // the newest is a peak: 4 × 1.25
		{1, 8, 10},      // a burst
		{2, 2, 10},      // held
		{10.5, 3, 10},   // 9.5 min old: still held
		{11.5, 3, 3.75}, // gone; 3 is the largest left
	}
	for _, s := range steps {
		if got := st.observe(at(s.min), s.demand, h) * (1 + h.Headroom); !approx(got, s.want) {
			t.Errorf("at %g min, demand %g: held %g, want %g", s.min, s.demand, got, s.want)
		}
	}
	decay := &PeakHold{Window: 10 * time.Minute, HalfLife: 2 * time.Minute}
	var ds PoolState
	ds.observe(at(0), 8, decay)
	if got := ds.observe(at(4), 1, decay); !approx(got, 2) {
		t.Errorf("a peak of 8 after two half-lives holds %g, want 2", got)
	}
	if n := len(ds.peaks); n != 2 {
		t.Errorf("%d samples kept, want 2 (8 then 1)", n)
	}
}

// TestAheadOnMeanAndDemand: a KindMean policy serves the floored demand over
// the pods (an HPA with Value 1 gets ceil(demand) back), a KindDemand policy
// the demand; a scheduled minimum in its time zone, half-open at its end; a
// pool of zero pods under an open window is served the minimum.
func TestAheadOnMeanAndDemand(t *testing.T) {
	minimums := func() []ScheduledMinimum {
		// 09:00–17:00 on weekdays in Berlin (UTC+1 in November): 08:00–16:00 UTC.
		return []ScheduledMinimum{{Schedule: "0 9 * * 1-5", Duration: 8 * time.Hour, TimeZone: "Europe/Berlin", Demand: 6}}
	}
	mean := demandCatalog(t, Policy{Name: "m", Kind: KindMean, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(),
		Peak: &PeakHold{Window: 5 * time.Minute, Headroom: 0.5}, Minimums: minimums()}).Lookup("m")
	v := 0.5 // mean saturation of 2 pods: demand 1
	pool := Pool{Pods: 2, Known: 2, Value: &v}
	// t0 is Sunday 2026-11-29 12:00 UTC: no window open; demand 1 × 1.5.
	var st PoolState
	got := mean.Ahead(t0, &st, pool)
	if got.Value == nil || !approx(*got.Value, 0.75) || got.Ahead == nil || got.Ahead.Scheduled != nil || !approx(got.Ahead.Served, 1.5) {
		t.Fatalf("Sunday: %+v (ahead %+v), want value 1.5 / 2 pods = 0.75 and no window", got, got.Ahead)
	}
	monday := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC) // 09:00 in Berlin
	if got := mean.Ahead(monday, &st, pool); got.Value == nil || !approx(*got.Value, 3) || got.Ahead.Scheduled == nil {
		t.Errorf("Monday 09:00 Berlin: %v (ahead %+v), want 6 / 2 pods = 3", deref(got.Value), got.Ahead)
	}
	if got := mean.Ahead(monday.Add(8*time.Hour), &st, pool); got.Ahead.Scheduled != nil {
		t.Errorf("at 17:00 Berlin the window is closed (half-open), got %+v", got.Ahead)
	}
	if got := mean.Ahead(monday.Add(-time.Minute), &st, pool); got.Ahead.Scheduled != nil {
		t.Errorf("at 08:59 Berlin the window is not open yet, got %+v", got.Ahead)
	}
	// Zero pods, no value: the open minimum wakes the pool.
	if got := mean.Ahead(monday.Add(time.Hour), nil, Pool{}); got.Value == nil || !approx(*got.Value, 6) {
		t.Errorf("zero pods in the window: %v, want 6", deref(got.Value))
	}
	// Pods without data stay without a value (an error for the HPA).
	if got := mean.Ahead(monday.Add(time.Hour), nil, Pool{Pods: 3}); got.Value != nil {
		t.Errorf("pods without data got %v, want no value", *got.Value)
	}
	demand := demandCatalog(t, Policy{Name: "d", Kind: KindDemand, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(),
		Minimums: minimums()}).Lookup("d")
	d := 2.0
	if got := demand.Ahead(monday, nil, Pool{Pods: 2, Known: 2, Value: &d}); !approx(*got.Value, 6) {
		t.Errorf("demand policy in the window: %v, want 6", *got.Value)
	}
}

func TestAheadValidation(t *testing.T) {
	base := func() Policy {
		return Policy{Name: "p", Kind: KindMean, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms()}
	}
	tests := []struct {
		name   string
		mutate func(*Policy)
		field  string
	}{
		{"signal policy", func(p *Policy) { p.Kind, p.Terms, p.Peak = KindSignal, nil, &PeakHold{Window: time.Minute} }, "kind"},
		{"no window", func(p *Policy) { p.Peak = &PeakHold{} }, "peak.window"},
		{"negative headroom", func(p *Policy) { p.Peak = &PeakHold{Window: time.Minute, Headroom: -1} }, "peak.headroom"},
		// The longest duration: the idle sweep's 2 × window overflowed to a
		// negative, dropping the state after 2 h unused.
		{"window past a day", func(p *Policy) { p.Peak = &PeakHold{Window: MaxPeakWindow + time.Nanosecond} }, "peak.window"},
		{"longest window", func(p *Policy) { p.Peak = &PeakHold{Window: time.Duration(math.MaxInt64)} }, "peak.window"},
		{"bad cron", func(p *Policy) {
			p.Minimums = []ScheduledMinimum{{Schedule: "every morning", Duration: time.Hour, Demand: 1}}
		}, "minimums[0].schedule"},
		{"six fields", func(p *Policy) {
			p.Minimums = []ScheduledMinimum{{Schedule: "0 0 9 * * 1-5", Duration: time.Hour, Demand: 1}}
		}, "minimums[0].schedule"},
		{"bad zone", func(p *Policy) {
			p.Minimums = []ScheduledMinimum{{Schedule: "@daily", Duration: time.Hour, TimeZone: "Mars/Olympus", Demand: 1}}
		}, "minimums[0].timeZone"},
		{"no duration", func(p *Policy) { p.Minimums = []ScheduledMinimum{{Schedule: "@daily", Demand: 1}} }, "minimums[0].duration"},
		{"no demand", func(p *Policy) { p.Minimums = []ScheduledMinimum{{Schedule: "@daily", Duration: time.Hour}} }, "minimums[0].demand"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base()
			tt.mutate(&p)
			err := p.Validate()
			if err == nil || err.Field != tt.field {
				t.Errorf("Validate() = %v, want an error on %s", err, tt.field)
			}
		})
	}
}

// TestAheadValidationRefusesWhatCannotBeServed: schedules that never open, or
// whose meaning depends on the machine (Local) or hides a second time zone,
// robfig's @every, and floors too large to serve are config errors, never a
// window that is always open or a value the server cannot serve.
func TestAheadValidationRefusesWhatCannotBeServed(t *testing.T) {
	base := func() Policy {
		return Policy{Name: "p", Kind: KindDemand, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms()}
	}
	minimum := func(sched, zone string, demand float64) func(*Policy) {
		return func(p *Policy) {
			p.Minimums = []ScheduledMinimum{{Schedule: sched, Duration: time.Hour, TimeZone: zone, Demand: demand}}
		}
	}
	tests := []struct {
		name   string
		mutate func(*Policy)
		field  string
		msg    string
	}{
		{"February 30", minimum("0 0 30 2 *", "", 7), "minimums[0].schedule", "never opens"},
		{"November 31", minimum("0 0 31 11 *", "", 7), "minimums[0].schedule", "never opens"},
		{"@every", minimum("@every 1h", "", 7), "minimums[0].schedule", "@every"},
		{"@every 0s", minimum("@every 0s", "", 7), "minimums[0].schedule", "@every"},
		{"CRON_TZ prefix", minimum("CRON_TZ=Asia/Tokyo 0 12 * * *", "UTC", 7), "minimums[0].schedule", "set timeZone"},
		{"TZ prefix", minimum("TZ=Local 0 12 * * *", "", 7), "minimums[0].schedule", "set timeZone"},
		{"Local", minimum("0 9 * * *", "Local", 7), "minimums[0].timeZone", "machine"},
		{"huge demand", minimum("@daily", "", 1e308), "minimums[0].demand", "2147483647"},
		{"infinite demand", minimum("@daily", "", math.Inf(1)), "minimums[0].demand", "2147483647"},
		{"huge headroom", func(p *Policy) { p.Peak = &PeakHold{Window: time.Minute, Headroom: 1e308} }, "peak.headroom", "[0, 10]"},
		{"NaN headroom", func(p *Policy) { p.Peak = &PeakHold{Window: time.Minute, Headroom: math.NaN()} }, "peak.headroom", "[0, 10]"},
		{"huge unknown saturation", func(p *Policy) { p.UnknownSaturation = 1e308 }, "unknownPodSaturation", "[0, 1000]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base()
			tt.mutate(&p)
			err := p.Validate()
			if err == nil || err.Field != tt.field || !strings.Contains(err.Msg, tt.msg) {
				t.Errorf("Validate() = %v, want an error on %s saying %q", err, tt.field, tt.msg)
			}
		})
	}
	// The bounds themselves, a leap day (opens within five years) and the
	// standard descriptors stay valid.
	for _, mutate := range []func(*Policy){
		minimum("0 0 29 2 *", "Europe/Berlin", MaxScheduledDemand),
		minimum("@hourly", "", 1),
		minimum("@weekly", "America/New_York", 3),
		func(p *Policy) {
			p.Peak = &PeakHold{Window: time.Minute, Headroom: MaxHeadroom}
			p.UnknownSaturation = MaxUnknownSaturation
		},
	} {
		p := base()
		mutate(&p)
		if err := p.Validate(); err != nil {
			t.Errorf("Validate() = %v, want nil", err)
		}
	}
}

// TestOpenNeverForAScheduleWithoutOpening: Open is false where robfig/cron
// finds no opening (its Next returns the zero time), not always true.
func TestOpenNeverForAScheduleWithoutOpening(t *testing.T) {
	sched, err := cronParser.Parse("0 0 30 2 *")
	if err != nil {
		t.Fatal(err)
	}
	m := ScheduledMinimum{Schedule: "0 0 30 2 *", Duration: time.Hour, Demand: 7, sched: sched, loc: time.UTC}
	for _, at := range []time.Time{time.Date(2026, 2, 28, 0, 30, 0, 0, time.UTC), time.Date(2026, 12, 3, 4, 0, 0, 0, time.UTC)} {
		if m.Open(at) {
			t.Errorf("Open(%s) = true for a schedule that never opens", at)
		}
	}
}

// TestOpenAcrossDaylightSavingChanges: an opening whose wall time the clock
// skips opens at the change (robfig/cron's Next skips it, which once left the
// whole window closed on that day); one in a repeated hour opens at both of
// its times, so that day's window ends an hour later; other days are as ever.
func TestOpenAcrossDaylightSavingChanges(t *testing.T) {
	for _, tt := range []struct {
		zone, schedule string
		duration       time.Duration
		// change is the instant the clocks go forward (UTC); the schedule's
		// opening that day, at hour:minute, is a wall time the change skips.
		change       time.Time
		hour, minute int
	}{
		// 02:00 → 03:00 CET → CEST; the opening 02:30 does not exist.
		{"Europe/Berlin", "30 2 * * *", 4 * time.Hour, time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), 2, 30},
		// 02:00 → 03:00 EST → EDT; the opening 02:00 does not exist.
		{"America/New_York", "0 2 * * *", 3 * time.Hour, time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC), 2, 0},
		// Chile goes forward at midnight (00:00 → 01:00): @daily's 00:00 does not exist.
		{"America/Santiago", "@daily", 2 * time.Hour, time.Date(2026, 9, 6, 4, 0, 0, 0, time.UTC), 0, 0},
	} {
		t.Run(tt.zone, func(t *testing.T) {
			loc, err := time.LoadLocation(tt.zone)
			if err != nil {
				t.Skip(err) // no tzdata on this machine
			}
			c := demandCatalog(t, Policy{Name: "p", Kind: KindDemand, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(),
				Minimums: []ScheduledMinimum{{Schedule: tt.schedule, Duration: tt.duration, TimeZone: tt.zone, Demand: 6}}})
			m := c.Lookup("p").Minimums[0]
			y, mo, d := tt.change.In(loc).Date()
			before := time.Date(y, mo, d-1, tt.hour, tt.minute, 0, 0, loc)
			after := time.Date(y, mo, d+1, tt.hour, tt.minute, 0, 0, loc)
			for _, at := range []struct {
				at   time.Time
				open bool
			}{
				{tt.change.Add(-time.Second), false},
				{tt.change, true},
				{tt.change.Add(tt.duration - time.Second), true},
				{tt.change.Add(tt.duration), false},
				// The days before and after, at the opening's wall time.
				{before.Add(-time.Second), false},
				{before, true},
				{before.Add(tt.duration), false},
				{after.Add(-time.Second), false},
				{after, true},
			} {
				if got := m.Open(at.at); got != at.open {
					t.Errorf("Open(%s) = %v, want %v", at.at.In(loc).Format(time.RFC3339), got, at.open)
				}
			}
		})
	}
	// Back: 03:00 CEST → 02:00 CET on 2026-10-25 in Berlin; 02:30 comes twice
	// (00:30 and 01:30 UTC), so a 4 h window from it stays open until 05:30 UTC.
	c := demandCatalog(t, Policy{Name: "p", Kind: KindDemand, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(),
		Minimums: []ScheduledMinimum{{Schedule: "30 2 * * *", Duration: 4 * time.Hour, TimeZone: "Europe/Berlin", Demand: 6}}})
	m := c.Lookup("p").Minimums[0]
	for _, at := range []struct {
		at   time.Time
		open bool
	}{
		{time.Date(2026, 10, 25, 0, 29, 0, 0, time.UTC), false},
		{time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), true},
		{time.Date(2026, 10, 25, 5, 29, 0, 0, time.UTC), true},
		{time.Date(2026, 10, 25, 5, 30, 0, 0, time.UTC), false},
	} {
		if got := m.Open(at.at); got != at.open {
			t.Errorf("Open(%s) = %v, want %v", at.at.Format(time.RFC3339), got, at.open)
		}
	}
}

// TestTrend: a demand rising 1 replica a minute, fitted over 2 minutes and
// extrapolated 2 minutes ahead, is served 2 replicas above itself; a flat or
// falling demand adds nothing; samples spanning less than half the window
// give no trend; requests closer than Window/64 replace the newest sample.
func TestTrend(t *testing.T) {
	tr := &Trend{Window: 2 * time.Minute, Lookahead: 2 * time.Minute}
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var st PoolState
	if got := st.observeTrend(at(0), 4, tr); got != 0 {
		t.Errorf("one sample: trend %g, want 0", got)
	}
	if got := st.observeTrend(at(15), 4.25, tr); got != 0 {
		t.Errorf("two samples: trend %g, want 0", got)
	}
	if got := st.observeTrend(at(30), 4.5, tr); got != 0 {
		t.Errorf("30 s of a 2 min window: trend %g, want 0 (half the window needed)", got)
	}
	var got float64
	for s := 45.0; s <= 180; s += 15 {
		got = st.observeTrend(at(s), 4+s/60, tr)
	}
	if !approx(got, 2) {
		t.Errorf("rising 1/min: trend %g, want 1/60 per s × 120 s = 2", got)
	}
	if n := len(st.trend); n != 8 {
		t.Errorf("%d samples kept, want the 8 of (60 s, 180 s]", n)
	}
	var flat, falling PoolState
	for s := 0.0; s <= 180; s += 15 {
		if g := flat.observeTrend(at(s), 5, tr); g != 0 {
			t.Fatalf("flat demand at %g s: trend %g, want 0", s, g)
		}
		if g := falling.observeTrend(at(s), 10-s/60, tr); g != 0 {
			t.Fatalf("falling demand at %g s: trend %g, want 0", s, g)
		}
	}
	// A flood of requests 10 ms apart keeps one sample per 1.875 s.
	var flood PoolState
	for i := range 12000 {
		flood.observeTrend(t0.Add(time.Duration(i)*10*time.Millisecond), 3, tr)
	}
	if n := len(flood.trend); n > trendSamples+2 {
		t.Errorf("a flood of requests kept %d samples, want at most %d", n, trendSamples+2)
	}
	// Served through Ahead: the demand plus the trend, said in AheadValue.
	pol := demandCatalog(t, Policy{Name: "d", Kind: KindDemand, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(), Trend: tr}).Lookup("d")
	var ps PoolState
	var pool Pool
	for s := 0.0; s <= 120; s += 15 {
		d := 4 + s/60
		pool = pol.Ahead(at(s), &ps, Pool{Pods: 4, Known: 4, Value: &d})
	}
	if pool.Ahead == nil || pool.Ahead.Trend == nil || !approx(*pool.Ahead.Trend, 8) || !approx(*pool.Value, 8) {
		t.Errorf("served %v (ahead %+v), want demand 6 + trend 2 = 8", deref(pool.Value), pool.Ahead)
	}
}

// TestTrendBounds: a jump between close samples adds at most MaxHeadroom ×
// the window's largest demand; windows under 1 s or over a day and
// lookaheads over an hour are refused, naming the field.
func TestTrendBounds(t *testing.T) {
	tr := &Trend{Window: time.Second, Lookahead: MaxLookahead}
	var st PoolState
	st.observeTrend(t0, 0, tr)
	st.observeTrend(t0.Add(300*time.Millisecond), 0, tr)
	if got := st.observeTrend(t0.Add(600*time.Millisecond), 1e6, tr); !approx(got, MaxHeadroom*1e6) {
		t.Errorf("a jump of 1e6 in 0.3 s, an hour ahead: trend %g, want the cap %g", got, MaxHeadroom*1e6)
	}
	for _, tt := range []struct {
		trend Trend
		field string
	}{
		{Trend{Window: time.Second - 1, Lookahead: time.Minute}, "trend.window"},
		{Trend{Window: MaxTrendWindow + 1, Lookahead: time.Minute}, "trend.window"},
		{Trend{Window: time.Minute}, "trend.lookahead"},
		{Trend{Window: time.Minute, Lookahead: MaxLookahead + 1}, "trend.lookahead"},
	} {
		_, err := NewCatalog(Policy{Name: "p", Kind: KindMean, UnknownSaturation: 1, Terms: DefaultSetPoints().Terms(), Trend: &tt.trend})
		if err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("trend %+v: error %v, want one naming %s", tt.trend, err, tt.field)
		}
	}
}
