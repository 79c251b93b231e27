// Package scoreboard compares autoscaler families fairly, the way a skeptical
// SRE would: every family is a frontier (its target swept), every
// point is run on many seeds and reported as the median and the spread (min
// and max) of its share of requests within the TTFT SLO and of its GPU-hours
// against the oracle's; set points are tuned on one slice of a trace and
// scored on another; baselines run at their own defaults and get the same
// sweep; the points another point beats on both axes are named, with who beats
// them. It is the core of `lab scoreboard`; lab/simulate runs each point.
//
// A seed moves everything a replay draws: the clocks' phases, the pods' cold
// starts and the copies of --rate-scale. The oracle of each (slice, seed) is
// the reference of the points replayed on it.
package scoreboard

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/saturation-adapter/saturation-adapter/lab/simulate"
	"github.com/saturation-adapter/saturation-adapter/lab/trace"
)

// Point is one member of a family: one target of its sweep.
type Point struct {
	// Label names the target within the family ("80%", "q=5").
	Label string
	// Default marks the family's own default target.
	Default bool
	// Autoscaler is what runs (its Name is set by the scoreboard).
	Autoscaler simulate.Autoscaler
}

// Family is one kind of autoscaler whose target is swept.
type Family struct {
	// Name identifies the family; Description says what it is and how its
	// metric reaches the HPA.
	Name, Description string
	// Baseline marks a family the product is compared against (false for the
	// adapter's own families).
	Baseline bool
	// Named marks a family compared only when asked for by name (lab
	// scoreboard --families): one added after the documented tables, which
	// the default set still reproduces.
	Named bool
	// Points are its targets, in sweep order.
	Points []Point
}

// Slice is a window of the trace, in trace time.
type Slice struct {
	Start, Length time.Duration
}

func (s Slice) String() string {
	return fmt.Sprintf("%s–%s", fmtMin(s.Start), fmtMin(s.Start+s.Length))
}

func fmtMin(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%dm", int(d/time.Minute))
	}
	return d.String()
}

// Config is one scoreboard.
type Config struct {
	// Sim is the simulation's configuration (its Seed is replaced by each
	// seed).
	Sim simulate.Config
	// Trace is the trace; Window gives its time and rate scales (its Start,
	// Length and Seed are replaced by the slices' and the seeds').
	Trace  trace.Trace
	Window simulate.WorkloadOptions
	// Tune and Score are the slices set points are chosen on and reported
	// on.
	Tune, Score Slice
	// Seeds are the seeds of every slice.
	Seeds []uint64
	// Families are compared.
	Families []Family
	// SLOGoal is the share of requests within the TTFT SLO a tuned point must
	// keep (median over the seeds of the tune slice), in (0, 1]; CostGoal the
	// GPU-hours against the oracle's the verdict compares with.
	SLOGoal, CostGoal float64
	// Workers bounds the replays run at once (GOMAXPROCS when 0).
	Workers int
	// Progress, if set, hears one line per replay done.
	Progress func(string)
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if len(c.Seeds) == 0 {
		errs = append(errs, errors.New("no seed"))
	}
	if c.Tune.Length <= 0 || c.Score.Length <= 0 || c.Tune.Start < 0 || c.Score.Start < 0 {
		errs = append(errs, fmt.Errorf("the tune and score slices need a start >= 0 and a length > 0, got %v and %v", c.Tune, c.Score))
	}
	if !(c.SLOGoal > 0 && c.SLOGoal <= 1) {
		errs = append(errs, fmt.Errorf("SLO goal must be in (0, 1], got %g", c.SLOGoal))
	}
	if !(c.CostGoal > 0) {
		errs = append(errs, fmt.Errorf("cost goal must be > 0, got %g", c.CostGoal))
	}
	names := map[string]bool{}
	for _, f := range c.Families {
		if len(f.Points) == 0 {
			errs = append(errs, fmt.Errorf("family %s has no point", f.Name))
		}
		for _, p := range f.Points {
			n := f.Name + "/" + p.Label
			if names[n] {
				errs = append(errs, fmt.Errorf("point %s given twice (points are told apart by their labels, which keep 3 decimals)", n))
			}
			names[n] = true
		}
	}
	if len(names) == 0 {
		errs = append(errs, errors.New("no family to compare"))
	}
	return errors.Join(errs...)
}

// Summary is a measure over the seeds: the median and the range.
type Summary struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func summarize(vs []float64) Summary {
	s := slices.Clone(vs)
	sort.Float64s(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Summary{Median: round(med), Min: round(s[0]), Max: round(s[n-1])}
}

func round(v float64) float64 { return math.Round(v*1e4) / 1e4 }

// Stats are one point's results on one slice over the seeds.
type Stats struct {
	// TTFTWithinSLO is the share of requests with a first token within the
	// TTFT SLO (abandoned and unserved requests are misses).
	TTFTWithinSLO Summary `json:"ttftWithinSLO"`
	// GPUHoursVsOracle is the GPU-hours against the oracle's of the same seed.
	GPUHoursVsOracle Summary `json:"gpuHoursVsOracle"`
	// Abandoned is the share of requests whose client gave up.
	Abandoned Summary `json:"abandoned"`
	// PeakReplicas is the most pods at once.
	PeakReplicas Summary `json:"peakReplicas"`
}

// PointResult is one point's results.
type PointResult struct {
	Family  string `json:"family"`
	Label   string `json:"label"`
	Default bool   `json:"default,omitempty"`
	// Tuned marks the family's choice on the tune slice: its cheapest point
	// whose median share within the SLO reaches the goal there, else its
	// point of the highest median share.
	Tuned bool `json:"tuned,omitempty"`
	// TunedOnScore marks the family's choice the other way round, for the
	// two-fold check: chosen by the same rule on the score slice, reported on
	// the tune slice.
	TunedOnScore bool  `json:"tunedOnScore,omitempty"`
	Tune         Stats `json:"tune"`
	Score        Stats `json:"score"`
	// DominatedBy names the points (family/label) whose score-slice medians
	// are at least as good on both axes and better on one; DominatedOnTune
	// the same on the tune slice.
	DominatedBy     []string `json:"dominatedBy,omitempty"`
	DominatedOnTune []string `json:"dominatedOnTune,omitempty"`
}

// Name is family/label.
func (p PointResult) Name() string { return p.Family + "/" + p.Label }

// FamilyResult is a family's points.
type FamilyResult struct {
	Name        string        `json:"name"`
	Description string        `json:"description"`
	Baseline    bool          `json:"baseline"`
	Points      []PointResult `json:"points"`
}

// Tuned returns the family's tuned point.
func (f FamilyResult) Tuned() PointResult {
	for _, p := range f.Points {
		if p.Tuned {
			return p
		}
	}
	return f.Points[0]
}

// TunedOnScore returns the family's point tuned on the score slice (the
// two-fold check's reverse direction).
func (f FamilyResult) TunedOnScore() PointResult {
	for _, p := range f.Points {
		if p.TunedOnScore {
			return p
		}
	}
	return f.Points[0]
}

// OracleStats are the oracle's own results per slice over the seeds.
type OracleStats struct {
	TTFTWithinSLO Summary `json:"ttftWithinSLO"`
	GPUHours      Summary `json:"gpuHours"`
	// Unachievable is the misses per seed the oracle found no replica count
	// removes.
	Unachievable Summary `json:"unachievable"`
}

// Result is a scoreboard.
type Result struct {
	// Tune and Score are the slices; Seeds the seeds of each.
	Tune  Slice    `json:"tune"`
	Score Slice    `json:"score"`
	Seeds []uint64 `json:"seeds"`
	// SLOGoal and CostGoal are the goal the verdict reads.
	SLOGoal  float64 `json:"sloGoal"`
	CostGoal float64 `json:"costGoal"`
	// TTFTSLOSeconds and ColdStartSeconds echo the simulation's settings.
	TTFTSLOSeconds   float64 `json:"ttftSLOSeconds"`
	ColdStartSeconds float64 `json:"coldStartSeconds"`
	// WarmUpSeconds is the unscored replay before each slice (at most what
	// precedes the slice in the trace; 0: slices start cold).
	WarmUpSeconds float64 `json:"warmUpSeconds,omitempty"`
	// Requests, ScoreMeanRate and ScorePeakMinuteRate describe the score
	// slice (requests: the median over the seeds; rates per second).
	Requests            int     `json:"requests"`
	ScoreMeanRate       float64 `json:"scoreMeanRequestsPerSecond"`
	ScorePeakMinuteRate float64 `json:"scorePeakMinuteRequestsPerSecond"`
	// TuneOracle and ScoreOracle are the oracle's results.
	TuneOracle  OracleStats `json:"tuneOracle"`
	ScoreOracle OracleStats `json:"scoreOracle"`
	// Families are the results, in the configuration's order.
	Families []FamilyResult `json:"families"`
}

// job is one replay: a slice and a seed.
type job struct {
	tune bool
	seed uint64
}

// outcome is a job's report.
type outcome struct {
	rep *simulate.Report
	err error
}

// Run replays every point on every seed of both slices and summarizes them.
// Replays run in parallel (Config.Workers); the result does not depend on how
// many.
func Run(cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var autoscalers []simulate.Autoscaler
	for _, f := range cfg.Families {
		for _, p := range f.Points {
			a := p.Autoscaler
			a.Name = f.Name + "/" + p.Label
			autoscalers = append(autoscalers, a)
		}
	}
	var jobs []job
	for _, tune := range []bool{true, false} {
		for _, s := range cfg.Seeds {
			jobs = append(jobs, job{tune: tune, seed: s})
		}
	}
	workers := cfg.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	results := make([]outcome, len(jobs))
	var wg sync.WaitGroup
	var mu sync.Mutex
	next, done := 0, 0
	start := time.Now()
	for range min(workers, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= len(jobs) {
					return
				}
				rep, err := replay(cfg, jobs[i], autoscalers)
				results[i] = outcome{rep, err}
				mu.Lock()
				done++
				if cfg.Progress != nil {
					slice := "score"
					if jobs[i].tune {
						slice = "tune"
					}
					cfg.Progress(fmt.Sprintf("replayed %d autoscalers on the %s slice, seed %d (%d/%d, %.0fs)", len(autoscalers), slice, jobs[i].seed, done, len(jobs), time.Since(start).Seconds()))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.err != nil {
			return nil, fmt.Errorf("seed %d: %w", jobs[i].seed, r.err)
		}
	}
	return summarizeAll(cfg, jobs, results), nil
}

// replay runs every autoscaler on one slice and seed.
func replay(cfg Config, j job, autoscalers []simulate.Autoscaler) (*simulate.Report, error) {
	sl := cfg.Score
	if j.tune {
		sl = cfg.Tune
	}
	o := cfg.Window
	o.Start, o.Length, o.Seed = sl.Start, sl.Length, j.seed
	w, err := simulate.NewWorkload(cfg.Trace, o)
	if err != nil {
		return nil, err
	}
	sim := cfg.Sim
	sim.Seed = j.seed
	sim.OnAutoscalerDone = nil
	return simulate.Run(sim, w, autoscalers)
}

// summarizeAll builds the result from the reports, in the families' order.
func summarizeAll(cfg Config, jobs []job, results []outcome) *Result {
	res := &Result{Tune: cfg.Tune, Score: cfg.Score, Seeds: cfg.Seeds, SLOGoal: cfg.SLOGoal, CostGoal: cfg.CostGoal,
		TTFTSLOSeconds: cfg.Sim.TTFTSLO.Seconds(), ColdStartSeconds: cfg.Sim.ColdStart.Seconds(), WarmUpSeconds: cfg.Window.WarmUp.Seconds()}
	collect := func(tune bool, name string, get func(simulate.AutoscalerResult) float64) []float64 {
		var out []float64
		for i, j := range jobs {
			if j.tune != tune {
				continue
			}
			for _, a := range results[i].rep.Autoscalers {
				if a.Name == name {
					out = append(out, get(a))
				}
			}
		}
		return out
	}
	stats := func(tune bool, name string) Stats {
		return Stats{
			TTFTWithinSLO:    summarize(collect(tune, name, func(a simulate.AutoscalerResult) float64 { return a.TTFTWithinSLO })),
			GPUHoursVsOracle: summarize(collect(tune, name, func(a simulate.AutoscalerResult) float64 { return a.GPUHoursVsOracle })),
			Abandoned: summarize(collect(tune, name, func(a simulate.AutoscalerResult) float64 {
				return float64(a.Abandoned) / float64(a.Requests)
			})),
			PeakReplicas: summarize(collect(tune, name, func(a simulate.AutoscalerResult) float64 { return float64(a.PeakReplicas) })),
		}
	}
	oracle := func(tune bool) OracleStats {
		return OracleStats{
			TTFTWithinSLO: summarize(collect(tune, "oracle", func(a simulate.AutoscalerResult) float64 { return a.TTFTWithinSLO })),
			GPUHours:      summarize(collect(tune, "oracle", func(a simulate.AutoscalerResult) float64 { return a.GPUHours })),
			Unachievable:  summarize(collect(tune, "oracle", func(a simulate.AutoscalerResult) float64 { return float64(a.Unachievable) })),
		}
	}
	res.TuneOracle, res.ScoreOracle = oracle(true), oracle(false)
	var reqs []float64
	for i, j := range jobs {
		if !j.tune {
			w := results[i].rep.Workload
			reqs = append(reqs, float64(w.Requests))
			res.ScoreMeanRate, res.ScorePeakMinuteRate = w.MeanRate, w.PeakRate
		}
	}
	res.Requests = int(summarize(reqs).Median)
	for _, f := range cfg.Families {
		fr := FamilyResult{Name: f.Name, Description: f.Description, Baseline: f.Baseline}
		for _, p := range f.Points {
			name := f.Name + "/" + p.Label
			fr.Points = append(fr.Points, PointResult{Family: f.Name, Label: p.Label, Default: p.Default, Tune: stats(true, name), Score: stats(false, name)})
		}
		fr.Points[pickTuned(fr.Points, cfg.SLOGoal, tuneSide)].Tuned = true
		fr.Points[pickTuned(fr.Points, cfg.SLOGoal, scoreSide)].TunedOnScore = true
		res.Families = append(res.Families, fr)
	}
	markDominated(res)
	return res
}

// tuneSide and scoreSide read a point's results on one slice.
func tuneSide(p *PointResult) Stats  { return p.Tune }
func scoreSide(p *PointResult) Stats { return p.Score }

// pickTuned returns the index of the point a family chooses on one slice (on
// reads it): the cheapest whose median share within the SLO reaches goal
// there, else the one of the highest share.
func pickTuned(points []PointResult, goal float64, on func(*PointResult) Stats) int {
	tuned := -1
	for i := range points {
		p := on(&points[i])
		if p.TTFTWithinSLO.Median >= goal && (tuned < 0 || p.GPUHoursVsOracle.Median < on(&points[tuned]).GPUHoursVsOracle.Median) {
			tuned = i
		}
	}
	if tuned >= 0 {
		return tuned
	}
	for i := range points {
		if tuned < 0 || on(&points[i]).TTFTWithinSLO.Median > on(&points[tuned]).TTFTWithinSLO.Median {
			tuned = i
		}
	}
	return tuned
}

// markDominated names, for every point, the points whose medians are at
// least as good on both axes (share within the SLO, GPU-hours against the
// oracle) and strictly better on one: on the score slice (DominatedBy) and on
// the tune slice (DominatedOnTune).
func markDominated(res *Result) {
	var all []*PointResult
	for fi := range res.Families {
		for pi := range res.Families[fi].Points {
			all = append(all, &res.Families[fi].Points[pi])
		}
	}
	for _, p := range all {
		p.DominatedBy = beatenOn(all, p, scoreSide)
		p.DominatedOnTune = beatenOn(all, p, tuneSide)
	}
}

// beatenOn returns the names of the points of all that dominate p on the
// slice on reads, in all's order; nil when none does.
func beatenOn(all []*PointResult, p *PointResult, on func(*PointResult) Stats) []string {
	var out []string
	ps, pc := on(p).TTFTWithinSLO.Median, on(p).GPUHoursVsOracle.Median
	for _, q := range all {
		if p == q {
			continue
		}
		qs, qc := on(q).TTFTWithinSLO.Median, on(q).GPUHoursVsOracle.Median
		if qs >= ps && qc <= pc && (qs > ps || qc < pc) {
			out = append(out, q.Name())
		}
	}
	return out
}

// Family returns the family named name, nil when there is none.
func (r *Result) Family(name string) *FamilyResult {
	for i := range r.Families {
		if r.Families[i].Name == name {
			return &r.Families[i]
		}
	}
	return nil
}
