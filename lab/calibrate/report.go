package calibrate

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/saturation-adapter/saturation-adapter/lab/simulate"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

// Report is the outcome of a calibration run. Rates are requests per second,
// times seconds, KV-cache usage a ratio in [0, 1].
type Report struct {
	// URL, MetricsURL and Model are what was measured.
	URL        string `json:"url"`
	MetricsURL string `json:"metricsURL"`
	Model      string `json:"model"`
	// Settings are the run's settings.
	Settings Settings `json:"settings"`
	// Requests counts every request sent, warm-up included.
	Requests int `json:"requests"`
	// Steps are the steps run, in order.
	Steps []StepReport `json:"steps"`
	// Saturation is the saturation point; nil when the first step already failed.
	Saturation *Saturation `json:"saturation"`
	// CapacityRequestsPerSecond is the most requests per second the engine
	// completed in a step (its capacity when a step overloaded it).
	CapacityRequestsPerSecond float64 `json:"capacityRequestsPerSecond"`
	// Recommended are the set points; nil without a saturation point.
	Recommended *Recommendation `json:"recommended"`
	// Profile is the fitted engine profile (`lab simulate --profile` reads it),
	// Fit how it was obtained and ProfileCheck what it predicts.
	Profile      simulate.Profile `json:"profile"`
	Fit          Fit              `json:"fit"`
	ProfileCheck *ProfileCheck    `json:"profileCheck"`
	// Notes are what could not be measured, and advice.
	Notes []string `json:"notes"`
}

// Settings echo the run's configuration (Config); durations in seconds.
type Settings struct {
	// WarmupRequests is Config.Warmup, ContextProbe Config.ContextProbe (0:
	// skipped); Rates the steps' rates (requests per second), StepSeconds
	// their length and Arrivals their spacing.
	WarmupRequests int       `json:"warmupRequests"`
	ContextProbe   int       `json:"contextProbe"`
	Rates          []float64 `json:"rates"`
	StepSeconds    float64   `json:"stepSeconds"`
	Arrivals       Arrivals  `json:"arrivals"`
	// Shapes counts the request sizes drawn from; MeanPromptTokens and
	// MeanOutputTokens are their means.
	Shapes           int     `json:"shapes"`
	MeanPromptTokens float64 `json:"meanPromptTokens"`
	MeanOutputTokens float64 `json:"meanOutputTokens"`
	// TTFTSLOSeconds, TTFTQuantile and MaxQueue are the pass rules.
	TTFTSLOSeconds float64 `json:"ttftSLOSeconds"`
	TTFTQuantile   float64 `json:"ttftQuantile"`
	MaxQueue       float64 `json:"maxQueue"`
	// MaxRequests and StepsPastSaturation bound the run.
	MaxRequests         int `json:"maxRequests"`
	StepsPastSaturation int `json:"stepsPastSaturation"`
	// Headroom is the set points' fraction of the saturation rate.
	Headroom float64 `json:"headroom"`
	// MetricsIntervalSecond is the time between two reads of the metrics.
	MetricsIntervalSecond float64 `json:"metricsIntervalSeconds"`
	// Seed is Config.Seed.
	Seed uint64 `json:"seed"`
}

// Saturation is the saturation point and what the engine showed there.
type Saturation struct {
	// Step is the step's number, from 1; RateRequestsPerSecond its rate.
	Step                  int     `json:"step"`
	RateRequestsPerSecond float64 `json:"rateRequestsPerSecond"`
	// Reached reports whether a step above it failed; false means the test ended
	// first (rates too low or the request cap), so the true point is higher.
	Reached bool `json:"reached"`
	// QueueDepth, Running and KVCacheUsage are the step's gauges; TTFTQuantileSeconds
	// its TTFT at Config.TTFTQuantile.
	QueueDepth          *Stat    `json:"queueDepth"`
	Running             *Stat    `json:"running"`
	KVCacheUsage        *Stat    `json:"kvCacheUsage"`
	TTFTQuantileSeconds *float64 `json:"ttftQuantileSeconds"`
}

// Recommendation is what the run recommends for the adapter (see the package
// documentation for how each is derived): the set points, and the demand rate
// one replica serves.
type Recommendation struct {
	// TargetRateRequestsPerSecond is Headroom × the saturation rate: the load per
	// pod the set points aim at, and the set point of a demandRate term
	// (requests per second per replica).
	TargetRateRequestsPerSecond float64 `json:"targetRateRequestsPerSecond"`
	// SetPoints are --queue-depth-set-point and --kv-cache-usage-set-point
	// (policy.SetPoints, the adapter's one set-point type).
	SetPoints policy.SetPoints `json:"setPoints"`
	// KVMeasured is false when the engine reports no KV-cache usage: the KV set
	// point is then the adapter's default.
	KVMeasured bool `json:"kvMeasured"`
	// QueueNoise is the queue the engine showed below saturation (the 95th
	// percentile of the passing steps' readings) and QueueSLOBound the queue
	// that would use up the TTFT budget left at the saturation point:
	// the queue set point sits above the first, at most at the second.
	QueueNoise    float64 `json:"queueNoise"`
	QueueSLOBound float64 `json:"queueSLOBound"`
	// Flags are the adapter flags that set them.
	Flags string `json:"flags"`
}

// analyse turns the run's records into the report. Every request has ended.
func (r *runner) analyse(windows []window, warmupEnd time.Duration) *Report {
	cfg := r.cfg
	rep := &Report{URL: cfg.URL, MetricsURL: r.metricsURL, Model: r.model, Requests: len(r.records)}
	var sp, so float64
	for _, s := range cfg.Shapes {
		sp += float64(s.PromptTokens)
		so += float64(s.OutputTokens)
	}
	rep.Settings = Settings{
		WarmupRequests: cfg.Warmup, ContextProbe: cfg.ContextProbe, Rates: cfg.Rates, StepSeconds: cfg.StepDuration.Seconds(), Arrivals: cfg.Arrivals,
		Shapes: len(cfg.Shapes), MeanPromptTokens: round(sp / float64(len(cfg.Shapes))), MeanOutputTokens: round(so / float64(len(cfg.Shapes))),
		TTFTSLOSeconds: cfg.TTFTSLO.Seconds(), TTFTQuantile: cfg.TTFTQuantile, MaxQueue: cfg.MaxQueue, MaxRequests: cfg.MaxRequests,
		StepsPastSaturation: cfg.StepsPastSaturation, Headroom: cfg.Headroom, MetricsIntervalSecond: cfg.MetricsInterval.Seconds(), Seed: cfg.Seed,
	}
	recs := make([]record, len(r.records))
	for i, rec := range r.records {
		recs[i] = *rec
	}
	for i, w := range windows {
		st := judgeStep(cfg, w, i, recs, r.samples)
		rep.Steps = append(rep.Steps, st)
		rep.CapacityRequestsPerSecond = max(rep.CapacityRequestsPerSecond, st.ThroughputRequestsPerSecond)
	}
	rep.Notes = append(rep.Notes, r.notes...)
	if r.scrapeErrors > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d reads of %s failed (last: %v)", r.scrapeErrors, r.metricsURL, r.lastScrape))
	}

	sat, reached := saturationIndex(rep.Steps)
	switch {
	case len(rep.Steps) == 0:
	case sat < 0:
		rep.Notes = append(rep.Notes, fmt.Sprintf("the first step (%g req/s) already fails: lower the rates", cfg.Rates[0]))
	case !reached:
		rep.Notes = append(rep.Notes, "no step failed before the test ended: the saturation point is higher than reported; raise the rates (or --max-requests)")
	}
	if sat >= 0 {
		s := rep.Steps[sat]
		rep.Saturation = &Saturation{Step: s.Step, RateRequestsPerSecond: s.RateRequestsPerSecond, Reached: reached,
			QueueDepth: s.QueueDepth, Running: s.Running, KVCacheUsage: s.KVCacheUsage, TTFTQuantileSeconds: s.TTFTQuantileSeconds}
		rep.Recommended = r.recommend(rep.Steps[:sat+1], warmupEnd, rep.CapacityRequestsPerSecond)
		if !rep.Recommended.KVMeasured {
			rep.Notes = append(rep.Notes, "the engine reports no KV-cache usage (absent, or 0 throughout): only the queue term can be set; leave --kv-cache-usage-set-point at its default")
		}
	}

	engine, fit, notes := r.fitProfile(rep.Steps, warmupEnd)
	rep.Profile, rep.Fit = simulate.ProfileOf(engine), fit
	rep.Profile.Name = fmt.Sprintf("%s at %s, calibrated", r.model, cfg.URL)
	rep.Notes = append(rep.Notes, notes...)
	if len(windows) > 0 {
		chk, err := r.checkProfile(engine, windows)
		if err != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("the fitted profile could not be replayed: %v", err))
		} else {
			chk.judge(rep.Saturation)
			rep.ProfileCheck = chk
			if !chk.Agrees {
				rep.Notes = append(rep.Notes, "the fitted profile does not reproduce the engine: "+chk.Disagreement+"; `lab simulate` with it would not be right about this engine (run the test again on a quiet machine, with more warm-up requests or longer steps)")
			}
		}
	}
	return rep
}

// recommend derives the set points from the steps up to the saturation point
// (the last of steps).
func (r *runner) recommend(steps []StepReport, warmupEnd time.Duration, capacity float64) *Recommendation {
	cfg := r.cfg
	sat := steps[len(steps)-1]
	target := cfg.Headroom * sat.RateRequestsPerSecond
	sp := &Recommendation{TargetRateRequestsPerSecond: round(target), SetPoints: policy.DefaultSetPoints()}
	// The queue set point is measured: just above the queue a pod shows below
	// saturation (noise: requests that arrived during the engine's current
	// step), so that noise alone never reaches it, and no higher than the
	// queue that would spend the TTFT budget left at saturation (waiting
	// behind it at the measured capacity), since a new pod takes a cold start.
	var readings []float64
	for _, st := range steps {
		half := st.StartSeconds + st.DurationSeconds/2
		for _, s := range r.samples {
			if sec := s.at.Seconds(); s.queue != nil && sec >= half && sec < st.StartSeconds+st.DurationSeconds {
				readings = append(readings, *s.queue)
			}
		}
	}
	slices.Sort(readings)
	if len(readings) > 0 {
		sp.QueueNoise = round(readings[min(len(readings)-1, int(math.Ceil(0.95*float64(len(readings))))-1)])
	}
	budget := cfg.TTFTSLO.Seconds()
	if sat.TTFTQuantileSeconds != nil {
		budget -= *sat.TTFTQuantileSeconds
	}
	sp.QueueSLOBound = round(math.Max(0, budget) * capacity)
	q := math.Max(1, math.Ceil(sp.QueueNoise)+1)
	if sp.QueueSLOBound >= 1 {
		q = math.Min(q, math.Floor(sp.QueueSLOBound))
	}
	sp.SetPoints.QueueDepth = q

	idle := math.Inf(1)
	for _, s := range r.samples {
		if s.at <= warmupEnd && s.kv != nil {
			idle = math.Min(idle, *s.kv)
		}
	}
	var pts [][2]float64
	if !math.IsInf(idle, 1) {
		pts = append(pts, [2]float64{0, idle})
	}
	for _, s := range steps {
		if s.KVCacheUsage != nil {
			pts = append(pts, [2]float64{s.RateRequestsPerSecond, s.KVCacheUsage.Mean})
		}
	}
	flags := "--queue-depth-set-point " + strconv.FormatFloat(sp.SetPoints.QueueDepth, 'f', -1, 64)
	if len(pts) > 0 && pts[len(pts)-1][1] > 0 {
		kv := interpolate(pts, target)
		if kv >= 0.1 {
			kv = math.Round(100*kv) / 100
		} else {
			kv = math.Round(1000*kv) / 1000
		}
		kv = math.Min(1, math.Max(0.001, kv))
		sp.SetPoints.KVCacheUsage, sp.KVMeasured = kv, true
		flags += " --kv-cache-usage-set-point " + strconv.FormatFloat(kv, 'f', -1, 64)
	}
	sp.Flags = flags
	return sp
}

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteProfile writes the fitted profile as YAML, the file `lab simulate
// --profile` reads.
func (rep *Report) WriteProfile(w io.Writer) error {
	b, err := simulate.MarshalProfile(rep.Profile)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func secs(p *float64) string {
	if p == nil {
		return "never"
	}
	return strconv.FormatFloat(*p, 'f', 3, 64) + "s"
}

func ms(p *float64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatFloat(*p*1000, 'f', 1, 64) + "ms"
}

func statMean(s *Stat, prec int) string {
	if s == nil {
		return "-"
	}
	return strconv.FormatFloat(s.Mean, 'f', prec, 64)
}

// WriteTable writes the steps as a table, then the saturation point, the
// recommended set points, the profile and the notes.
func (rep *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\trate/s\tsent\tdone/s\tTTFT p50\tTTFT p95\tITL\tqueue\trunning\tKV\t result")
	for _, s := range rep.Steps {
		fmt.Fprintf(tw, "%d\t%g\t%d\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\t %s\n", s.Step, s.RateRequestsPerSecond, s.Sent, s.ThroughputRequestsPerSecond,
			secs(s.TTFTSeconds.P50), secs(s.TTFTSeconds.P95), ms(s.InterTokenLatencySeconds), statMean(s.QueueDepth, 2), statMean(s.Running, 1),
			statMean(s.KVCacheUsage, 3), s.verdict())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if sat := rep.Saturation; sat != nil {
		qualifier := ""
		if !sat.Reached {
			qualifier = " (at least: no step failed)"
		}
		fmt.Fprintf(w, "saturation point: %g req/s (step %d)%s; there queue %s, running %s, KV-cache usage %s (max %s), TTFT p%g %s; measured capacity %g req/s\n",
			sat.RateRequestsPerSecond, sat.Step, qualifier, statMean(sat.QueueDepth, 2), statMean(sat.Running, 1), statMean(sat.KVCacheUsage, 3),
			statMax(sat.KVCacheUsage), 100*rep.Settings.TTFTQuantile, secs(sat.TTFTQuantileSeconds), rep.CapacityRequestsPerSecond)
	} else {
		fmt.Fprintf(w, "saturation point: none (measured capacity %g req/s)\n", rep.CapacityRequestsPerSecond)
	}
	if sp := rep.Recommended; sp != nil {
		fmt.Fprintf(w, "recommended set points (each pod at %.0f %% of the saturation point, %g req/s): %s\n", 100*rep.Settings.Headroom, sp.TargetRateRequestsPerSecond, sp.Flags)
		fmt.Fprintf(w, "queue set point measured: above the queue noise below saturation (p95 %g), at most the queue that spends the TTFT budget left at saturation (%g); demandRate term: setPoint %g (requests per second per replica)\n",
			sp.QueueNoise, sp.QueueSLOBound, sp.TargetRateRequestsPerSecond)
	}
	p := rep.Profile
	fmt.Fprintf(w, "engine profile: maxNumSeqs %d (%s), numGPUBlocks %d and blockSize %d (%s), maxModelLen %d (%s), stepTime base %v perSeq %v perPrefillToken %v perContextToken %v",
		p.MaxNumSeqs, rep.Fit.MaxNumSeqsFrom, p.NumGPUBlocks, p.BlockSize, rep.Fit.KVCacheFrom, p.MaxModelLen, rep.Fit.MaxModelLenFrom,
		p.StepTime.Base.Duration, p.StepTime.PerSeq.Duration, p.StepTime.PerPrefillToken.Duration, p.StepTime.PerContextToken.Duration)
	if c := rep.ProfileCheck; c != nil {
		if c.SaturationRateRequestsPerSecond != nil {
			fmt.Fprintf(w, "; replayed on it the steps saturate at %g req/s (capacity %g req/s)", *c.SaturationRateRequestsPerSecond, c.CapacityRequestsPerSecond)
		} else {
			fmt.Fprintf(w, "; replayed on it the first step already fails (capacity %g req/s)", c.CapacityRequestsPerSecond)
		}
		if c.Agrees {
			fmt.Fprint(w, ", as the engine did")
		} else {
			fmt.Fprint(w, ", NOT as the engine did")
		}
	}
	fmt.Fprintln(w)
	if cp := rep.Fit.ContextProbe; cp != nil && cp.PerContextTokenSeconds != nil {
		fmt.Fprintf(w, "context probe: %d requests at once; step time", cp.Batch)
		for _, g := range cp.Groups {
			fmt.Fprintf(w, " %.2fms with %d-token prompts (%.0f tokens held),", 1000*g.StepSeconds, g.PromptTokens, g.ContextTokens)
		}
		fmt.Fprintf(w, " so %.3g ns per token of context held (median over the rounds)\n", 1e9**cp.PerContextTokenSeconds)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

// verdict is "ok" or "FAIL: " and the reasons.
func (s StepReport) verdict() string {
	v := "ok"
	if !s.Pass {
		v = "FAIL: " + strings.Join(s.Reasons, "; ")
	}
	if s.Truncated {
		v += " (cut short by the request cap)"
	}
	return v
}

// summary is the step on one line, for progress.
func (s StepReport) summary() string {
	return fmt.Sprintf("%d sent, %.2f done/s, TTFT p95 %s, queue %s, running %s, KV %s: %s", s.Sent, s.ThroughputRequestsPerSecond,
		secs(s.TTFTSeconds.P95), statMean(s.QueueDepth, 2), statMean(s.Running, 1), statMean(s.KVCacheUsage, 3), s.verdict())
}

func statMax(s *Stat) string {
	if s == nil {
		return "-"
	}
	return strconv.FormatFloat(s.Max, 'f', 3, 64)
}
