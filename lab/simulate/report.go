package simulate

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"
)

// Report is the comparison of policies on one workload. Its JSON form is what
// `lab simulate --json` writes; the same configuration and seed give the same
// bytes.
type Report struct {
	// Settings are the simulation's settings.
	Settings Settings `json:"settings"`
	// Workload describes the replayed traffic.
	Workload WorkloadInfo `json:"workload"`
	// Autoscalers are the results, oracle and static first.
	Autoscalers []AutoscalerResult `json:"autoscalers"`

	oracleGPUHours float64
	oracleSteps    []time.Duration // starts of the oracle's rises
	coldStart      time.Duration
	horizon        time.Duration
}

// Settings echo the Config that produced a report; durations in seconds.
type Settings struct {
	// Seed is Config.Seed; Engine the engine profile.
	Seed   uint64  `json:"seed"`
	Engine Profile `json:"engine"`
	// ColdStartSeconds, TTFTSLOSeconds, TPOTSLOSeconds, SLOTarget and
	// OracleIntervalSeconds are the fleet's and the oracle's settings.
	ColdStartSeconds      float64 `json:"coldStartSeconds"`
	TTFTSLOSeconds        float64 `json:"ttftSLOSeconds"`
	TPOTSLOSeconds        float64 `json:"tpotSLOSeconds"`
	SLOTarget             float64 `json:"sloTarget"`
	OracleIntervalSeconds float64 `json:"oracleIntervalSeconds"`
	// HPASyncPeriodSeconds and HPATolerance are the HPA controller's settings.
	HPASyncPeriodSeconds float64 `json:"hpaSyncPeriodSeconds"`
	HPATolerance         float64 `json:"hpaTolerance"`
	// ScrapeIntervalSeconds, PrometheusScrapeIntervalSeconds and
	// KEDAPollingIntervalSeconds are the metrics pipelines' periods, and
	// ClockPhasesSeconds the phases the seed gave their clocks.
	ScrapeIntervalSeconds           float64 `json:"scrapeIntervalSeconds"`
	PrometheusScrapeIntervalSeconds float64 `json:"prometheusScrapeIntervalSeconds"`
	KEDAPollingIntervalSeconds      float64 `json:"kedaPollingIntervalSeconds"`
	ClockPhasesSeconds              Phases  `json:"clockPhasesSeconds"`
	// SampleIntervalSeconds and DrainLimitSeconds bound the replay.
	SampleIntervalSeconds float64 `json:"sampleIntervalSeconds"`
	DrainLimitSeconds     float64 `json:"drainLimitSeconds"`
	// MinReplicas and MaxReplicas bound the built-in HPAs and the oracle (0:
	// twice the oracle's peak).
	MinReplicas int `json:"minReplicas"`
	MaxReplicas int `json:"maxReplicas"`
	// HistogramsObserved and ScrapedAtEveryInterval echo the MetricSource options.
	HistogramsObserved     bool `json:"histogramsObserved"`
	ScrapedAtEveryInterval bool `json:"scrapedAtEveryInterval"`
}

// Phases are the offsets, in seconds, of the first tick of each periodic clock:
// the HPA's sync, the adapter's scrape, Prometheus's scrape (engines and GPU) and
// KEDA's poll.
type Phases struct {
	HPASync    float64 `json:"hpaSync"`
	Scrape     float64 `json:"scrape"`
	Prometheus float64 `json:"prometheus"`
	KEDAPoll   float64 `json:"kedaPoll"`
}

// WorkloadInfo describes the replayed traffic: its requests and length, the mean
// and peak-minute rates (requests per second), mean sizes in tokens, and the
// requests no autoscaler can serve within the TTFT SLO.
type WorkloadInfo struct {
	Requests        int     `json:"requests"`
	DurationSeconds float64 `json:"durationSeconds"`
	MeanRate        float64 `json:"meanRequestsPerSecond"`
	PeakRate        float64 `json:"peakRequestsPerSecond"`
	MeanPrompt      float64 `json:"meanPromptTokens"`
	MeanOutput      float64 `json:"meanOutputTokens"`
	// Unattainable counts requests that cannot meet the TTFT SLO even alone on an
	// idle engine (or that the engine refuses): the oracle does not scale for
	// them, and they count as misses everywhere.
	Unattainable int `json:"unattainable"`
	// WarmUpSeconds is the replayed but unscored start (Workload.ScoreFrom):
	// every figure here and in the results covers what follows it, while the
	// series start with it.
	WarmUpSeconds float64 `json:"warmUpSeconds,omitempty"`
}

// AutoscalerResult is one autoscaler's outcome.
type AutoscalerResult struct {
	// Name and Description identify the policy.
	Name        string `json:"name"`
	Description string `json:"description"`
	// Requests is the workload's size; Rejected the requests the engine refused;
	// Abandoned those whose client gave up before a first token
	// (Config.AbandonAfter); Unfinished those without a first token when the
	// simulation ended. All are misses.
	Requests   int `json:"requests"`
	Rejected   int `json:"rejected"`
	Abandoned  int `json:"abandoned"`
	Unfinished int `json:"unfinished"`
	// TTFTWithinSLO is the share of requests with TTFT <= the TTFT SLO; WithinSLO
	// the share that also finished within TTFT SLO + output tokens × TPOT SLO.
	TTFTWithinSLO float64 `json:"ttftWithinSLO"`
	WithinSLO     float64 `json:"withinSLO"`
	// TTFTSeconds are the nearest-rank TTFT quantiles over all requests.
	TTFTSeconds Quantiles `json:"ttftSeconds"`
	// GPUHours is the time every pod (starting, Ready or draining) existed during
	// the traffic window, and GPUHoursVsOracle its ratio to the oracle's.
	GPUHours         float64 `json:"gpuHours"`
	GPUHoursVsOracle float64 `json:"gpuHoursVsOracle"`
	// ScaleEvents counts changes of the replica count; PeakReplicas the most
	// non-terminating pods at a sample.
	ScaleEvents  int `json:"scaleEvents"`
	PeakReplicas int `json:"peakReplicas"`
	// LoadSteps is how fast the autoscaler scaled up when load rose.
	LoadSteps StepReaction `json:"loadSteps"`
	// HPASyncs and Scrapes count the HPA reconciles and the /metrics bodies
	// rendered and parsed (zero for the oracle and the static fleet).
	HPASyncs int `json:"hpaSyncs"`
	Scrapes  int `json:"scrapes"`
	// Schedule is the oracle's Ready replicas per interval; Infeasible its
	// intervals where even the replica cap missed the target.
	Schedule   []int `json:"schedule,omitempty"`
	Infeasible int   `json:"infeasibleIntervals,omitempty"`
	// Unachievable counts the misses the oracle found no replica count
	// removes and did not chase (see oracle.go).
	Unachievable int `json:"unachievableMisses,omitempty"`
	// Series is the fleet over time, every sample interval.
	Series []Sample `json:"series"`
}

// StepReaction measures scale-up latency. A load step is the start of a rise in
// the oracle's schedule (consecutive rising intervals are one step); the
// reaction is the time from it to the autoscaler's first scale-up at or after one
// cold start before it (the oracle's own starts a cold start early, so it
// reacts at -ColdStart) and before the next step. Steps without a scale-up in
// that span count as missed.
type StepReaction struct {
	// Steps counts the load steps, Reacted those with a scale-up; MeanSeconds and
	// MaxSeconds are over the reacted ones (nil when none).
	Steps       int      `json:"steps"`
	Reacted     int      `json:"reacted"`
	MeanSeconds *float64 `json:"meanSeconds"`
	MaxSeconds  *float64 `json:"maxSeconds"`
}

func newReport(cfg Config, w Workload, attainable []bool, ps pipelineSettings) *Report {
	r := &Report{coldStart: cfg.ColdStart, horizon: w.Duration}
	r.Settings = Settings{
		Seed: cfg.Seed, Engine: ProfileOf(cfg.Engine),
		ColdStartSeconds: cfg.ColdStart.Seconds(), TTFTSLOSeconds: cfg.TTFTSLO.Seconds(), TPOTSLOSeconds: cfg.TPOTSLO.Seconds(),
		SLOTarget: cfg.SLOTarget, OracleIntervalSeconds: cfg.OracleInterval.Seconds(),
		HPASyncPeriodSeconds: cfg.HPA.SyncPeriod.Seconds(), HPATolerance: cfg.HPA.Tolerance,
		ScrapeIntervalSeconds: cfg.ScrapeInterval.Seconds(), PrometheusScrapeIntervalSeconds: cfg.PrometheusScrapeInterval.Seconds(),
		KEDAPollingIntervalSeconds: cfg.KEDAPollingInterval.Seconds(),
		ClockPhasesSeconds: Phases{HPASync: round(ps.sync.phase.Seconds()), Scrape: round(ps.scrape.phase.Seconds()),
			Prometheus: round(ps.prom.phase.Seconds()), KEDAPoll: round(ps.poll.phase.Seconds())},
		SampleIntervalSeconds: cfg.SampleInterval.Seconds(), DrainLimitSeconds: cfg.DrainLimit.Seconds(),
		MinReplicas: cfg.MinReplicas, MaxReplicas: cfg.MaxReplicas,
		HistogramsObserved: cfg.ObserveHistograms, ScrapedAtEveryInterval: cfg.ScrapeEveryTick,
	}
	scored := w.Duration - w.ScoreFrom
	wi := WorkloadInfo{DurationSeconds: round(scored.Seconds()), WarmUpSeconds: round(w.ScoreFrom.Seconds())}
	var prompt, output float64
	perMinute := map[int64]int{}
	for i, q := range w.Requests {
		if !w.Scored(i) {
			continue
		}
		wi.Requests++
		prompt += float64(q.PromptTokens)
		output += float64(q.OutputTokens)
		perMinute[int64((q.At-w.ScoreFrom)/time.Minute)]++
		if !attainable[i] {
			wi.Unattainable++
		}
	}
	peak := 0
	for _, n := range perMinute {
		peak = max(peak, n)
	}
	n := float64(wi.Requests)
	wi.MeanPrompt, wi.MeanOutput = round(prompt/n), round(output/n)
	if scored > 0 {
		wi.MeanRate = round(n / scored.Seconds())
	}
	wi.PeakRate = round(float64(peak) / 60)
	r.Workload = wi
	return r
}

// add summarizes one autoscaler's outcome; the oracle must come first.
func (r *Report) add(cfg Config, w Workload, name, desc string, out *outcome, or *oracleResult) {
	res := AutoscalerResult{Name: name, Description: desc, HPASyncs: out.syncs, Scrapes: out.renders}
	ttft := make([]float64, 0, len(w.Requests))
	okTTFT, ok := 0, 0
	for i, q := range w.Requests {
		if !w.Scored(i) {
			continue
		}
		res.Requests++
		switch {
		case out.rec.rejectedAt(i):
			res.Rejected++
		case out.rec.abandonedAt(i):
			res.Abandoned++
		case out.rec.first[i] == unset:
			res.Unfinished++
		}
		first, fin := out.rec.first[i], out.rec.finish[i]
		if first == unset {
			ttft = append(ttft, math.Inf(1))
			continue
		}
		ttft = append(ttft, (first - q.At).Seconds())
		if first-q.At <= cfg.TTFTSLO {
			okTTFT++
			if fin != unset && fin-q.At <= cfg.TTFTSLO+time.Duration(q.OutputTokens)*cfg.TPOTSLO {
				ok++
			}
		}
	}
	n := res.Requests
	res.TTFTWithinSLO, res.WithinSLO = round(float64(okTTFT)/float64(n)), round(float64(ok)/float64(n))
	res.TTFTSeconds = quantiles(ttft)
	res.GPUHours = math.Round(out.f.gpuTime().Hours()*1e6) / 1e6
	res.ScaleEvents = len(out.f.changes)
	for _, s := range out.series {
		res.PeakReplicas = max(res.PeakReplicas, s.Replicas)
	}
	res.Series = out.series
	if name == "oracle" {
		r.oracleGPUHours = out.f.gpuTime().Hours()
		res.Schedule, res.Infeasible, res.Unachievable = or.schedule, or.infeasible, or.unachievable
		for k := 1; k < len(or.schedule); k++ {
			rise := or.schedule[k] > or.schedule[k-1] && (k == 1 || or.schedule[k-1] <= or.schedule[k-2])
			if rise && w.scoredAt(time.Duration(k)*cfg.OracleInterval) {
				r.oracleSteps = append(r.oracleSteps, time.Duration(k)*cfg.OracleInterval)
			}
		}
	}
	if r.oracleGPUHours > 0 {
		res.GPUHoursVsOracle = round(out.f.gpuTime().Hours() / r.oracleGPUHours)
	}
	res.LoadSteps = r.reaction(out.f.changes)
	r.Autoscalers = append(r.Autoscalers, res)
}

func (r *Report) reaction(changes []scaleChange) StepReaction {
	sr := StepReaction{Steps: len(r.oracleSteps)}
	var sum, worst float64
	for i, s := range r.oracleSteps {
		end := never
		if i+1 < len(r.oracleSteps) {
			end = r.oracleSteps[i+1]
		}
		for _, c := range changes {
			if c.to > c.from && c.at >= s-r.coldStart && c.at < end {
				d := (c.at - s).Seconds()
				sum += d
				if sr.Reacted == 0 || d > worst {
					worst = d
				}
				sr.Reacted++
				break
			}
		}
	}
	if sr.Reacted > 0 {
		mean, w := round(sum/float64(sr.Reacted)), round(worst)
		sr.MeanSeconds, sr.MaxSeconds = &mean, &w
	}
	return sr
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes one line per autoscaler: SLO attainment, TTFT quantiles,
// GPU-hours and their ratio to the oracle, scale events and the mean reaction to
// load steps.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	slo := fmt.Sprintf("TTFT<=%gs", r.Settings.TTFTSLOSeconds)
	fmt.Fprintf(tw, "autoscaler\t%s\tSLO met\tp50 TTFT\tp95 TTFT\tp99 TTFT\tGPU-h\tx oracle\tpeak\tscale events\tstep->scale-up\t\n", slo)
	pct := func(v float64) string { return fmt.Sprintf("%.2f%%", 100*v) }
	sec := func(v *float64) string {
		if v == nil {
			return "never"
		}
		return fmt.Sprintf("%.2fs", *v)
	}
	for _, p := range r.Autoscalers {
		react := "-"
		if p.LoadSteps.MeanSeconds != nil {
			react = fmt.Sprintf("%+.0fs (%d/%d)", *p.LoadSteps.MeanSeconds, p.LoadSteps.Reacted, p.LoadSteps.Steps)
		} else if p.LoadSteps.Steps > 0 {
			react = fmt.Sprintf("none (0/%d)", p.LoadSteps.Steps)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%.2f\t%d\t%d\t%s\t\n", p.Name, pct(p.TTFTWithinSLO), pct(p.WithinSLO),
			sec(p.TTFTSeconds.P50), sec(p.TTFTSeconds.P95), sec(p.TTFTSeconds.P99), p.GPUHours, p.GPUHoursVsOracle, p.PeakReplicas, p.ScaleEvents, react)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d requests over %.0fs (mean %.2f/s, peak minute %.2f/s); %d cannot meet the TTFT SLO even alone. SLO met = TTFT and e2e <= TTFT SLO + %gs/token.\n",
		r.Workload.Requests, r.Workload.DurationSeconds, r.Workload.MeanRate, r.Workload.PeakRate, r.Workload.Unattainable, r.Settings.TPOTSLOSeconds)
	return err
}
