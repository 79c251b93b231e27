package soak

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Summary is one adapter's process over the run.
type Summary struct {
	Adapter string
	// RSSWarm is the median resident set between 5 % and 15 % of the run, RSSEnd the
	// median of its last 5 % (quiet: no fault), RSSMax the largest sample; RSSSlope the
	// least-squares slope from 20 % of the run to its end, in bytes per hour.
	RSSWarm, RSSEnd, RSSMax int64
	RSSSlope                float64
	// Goroutines likewise (no slope).
	GoroutinesWarm, GoroutinesEnd, GoroutinesMax int
	Samples                                      int
}

// Summaries returns each adapter's summary.
func (r *Report) Summaries() []Summary {
	var names []string
	for _, s := range r.Samples {
		if !slices.Contains(names, s.Adapter) {
			names = append(names, s.Adapter)
		}
	}
	var out []Summary
	for _, n := range names {
		var ss []Sample
		for _, s := range r.Samples {
			if s.Adapter == n {
				ss = append(ss, s)
			}
		}
		sum := Summary{Adapter: n, Samples: len(ss)}
		in := func(from, to float64) []Sample {
			var w []Sample
			for _, s := range ss {
				f := float64(s.At) / float64(r.Duration)
				if f >= from && f <= to {
					w = append(w, s)
				}
			}
			if len(w) == 0 && len(ss) > 0 {
				w = ss[len(ss)-1:]
			}
			return w
		}
		sum.RSSWarm, sum.GoroutinesWarm = medians(in(0.05, 0.15))
		sum.RSSEnd, sum.GoroutinesEnd = medians(in(0.95, 2))
		for _, s := range ss {
			sum.RSSMax, sum.GoroutinesMax = max(sum.RSSMax, s.RSS), max(sum.GoroutinesMax, s.Goroutines)
		}
		sum.RSSSlope = slope(in(0.2, 2))
		out = append(out, sum)
	}
	return out
}

func medians(ss []Sample) (int64, int) {
	if len(ss) == 0 {
		return 0, 0
	}
	rss := make([]int64, len(ss))
	gs := make([]int, len(ss))
	for i, s := range ss {
		rss[i], gs[i] = s.RSS, s.Goroutines
	}
	slices.Sort(rss)
	slices.Sort(gs)
	return rss[len(rss)/2], gs[len(gs)/2]
}

// slope is the least-squares slope of RSS over time, in bytes per hour.
func slope(ss []Sample) float64 {
	if len(ss) < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for _, s := range ss {
		x, y := s.At.Hours(), float64(s.RSS)
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	n := float64(len(ss))
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// Problems returns what makes the run a failure: a wrong value, a run error, an adapter
// never checked, memory that grew or was not bounded, goroutines that grew.
func (r *Report) Problems() []string {
	var out []string
	for name, n := range r.Wrong {
		if n > 0 {
			out = append(out, fmt.Sprintf("%s: %d wrong values served", name, n))
		}
	}
	for _, e := range r.Errors {
		out = append(out, "run: "+e)
	}
	for _, s := range r.Summaries() {
		if r.PoolChecks[s.Adapter] == 0 {
			out = append(out, s.Adapter+": no answer was checked")
		}
		if s.RSSEnd > s.RSSWarm+s.RSSWarm/4+32<<20 {
			out = append(out, fmt.Sprintf("%s: resident memory grew from %s (warm) to %s (at rest at the end)", s.Adapter, mib(s.RSSWarm), mib(s.RSSEnd)))
		}
		if s.RSSMax > 2*s.RSSWarm+128<<20 {
			out = append(out, fmt.Sprintf("%s: resident memory peaked at %s, more than twice its %s warm", s.Adapter, mib(s.RSSMax), mib(s.RSSWarm)))
		}
		if s.GoroutinesEnd > s.GoroutinesWarm+50 && s.GoroutinesEnd > s.GoroutinesWarm*6/5 {
			out = append(out, fmt.Sprintf("%s: goroutines grew from %d (warm) to %d (at rest at the end)", s.Adapter, s.GoroutinesWarm, s.GoroutinesEnd))
		}
	}
	slices.Sort(out)
	return out
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// String renders the report: the checks, the faults, each adapter's memory and
// goroutines over time, and the problems.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak: %d engines, %d HPAs, %s\n", r.Engines, r.HPAs, r.Duration)
	for _, name := range []string{"direct", "prometheus"} {
		fmt.Fprintf(&b, "  %-10s pool values checked %d, pod values checked %d, 503 (HPA holds) %d, wrong %d\n",
			name, r.PoolChecks[name], r.PodChecks[name], r.Unavailable[name], r.Wrong[name])
	}
	var faults []string
	for k, v := range r.Faults {
		faults = append(faults, fmt.Sprintf("%s %d", k, v))
	}
	slices.Sort(faults)
	fmt.Fprintf(&b, "  faults: %s\n", strings.Join(faults, ", "))
	for _, s := range r.Summaries() {
		fmt.Fprintf(&b, "  %-10s RSS warm %s, max %s, end %s, slope %+.1f MiB/h; goroutines warm %d, max %d, end %d (%d samples)\n",
			s.Adapter, mib(s.RSSWarm), mib(s.RSSMax), mib(s.RSSEnd), s.RSSSlope/(1<<20), s.GoroutinesWarm, s.GoroutinesMax, s.GoroutinesEnd, s.Samples)
	}
	// RSS over time, ten points per adapter.
	for _, s := range r.Summaries() {
		var pts []string
		var ss []Sample
		for _, x := range r.Samples {
			if x.Adapter == s.Adapter {
				ss = append(ss, x)
			}
		}
		for i := 0; i < len(ss); i += max(1, len(ss)/10) {
			pts = append(pts, fmt.Sprintf("%s %s/%d", ss[i].At.Round(time.Second), mib(ss[i].RSS), ss[i].Goroutines))
		}
		fmt.Fprintf(&b, "  %-10s over time (RSS/goroutines): %s\n", s.Adapter, strings.Join(pts, ", "))
	}
	for _, w := range r.WrongExamples {
		fmt.Fprintf(&b, "  wrong: %s\n", w)
	}
	if p := r.Problems(); len(p) > 0 {
		fmt.Fprintf(&b, "  PROBLEMS:\n    %s\n", strings.Join(p, "\n    "))
	} else {
		b.WriteString("  no problem: no wrong value, memory bounded and flat, no goroutine growth\n")
	}
	return b.String()
}
