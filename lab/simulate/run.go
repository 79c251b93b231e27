package simulate

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"

	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
	"github.com/saturation-adapter/saturation-adapter/lab/hpa"
)

// Config is everything a simulation needs besides the workload and the policies.
// Start from [DefaultConfig].
type Config struct {
	// Engine is the shape of every replica's engine.
	Engine emulator.Config
	// ColdStart is the mean time from a pod's creation to Ready (image pull,
	// model load, graph capture, readiness probe); the pod costs GPU time
	// throughout. Each pod draws its own (see the ColdStart type):
	// ColdStartSpread is the relative spread of its engine's start, in [0, 1),
	// ReadinessProbePeriod the probe period that notices it, and
	// NodeProvisioning, when > 0, the delay of a pod that needs a new node
	// (WarmNodes nodes exist from the start, one pod each).
	ColdStart            time.Duration
	ColdStartSpread      float64
	ReadinessProbePeriod time.Duration
	NodeProvisioning     time.Duration
	WarmNodes            int
	// AbandonAfter is how long a client waits for its first token before it
	// gives up (the request is aborted and counts as a miss); 0 waits forever.
	AbandonAfter time.Duration
	// TTFTSLO is the time-to-first-token objective; TPOTSLO the time per output
	// token: a request's e2e objective is TTFTSLO + output tokens × TPOTSLO.
	TTFTSLO, TPOTSLO time.Duration
	// SLOTarget is the share of requests the oracle keeps within TTFTSLO in every
	// interval, in (0, 1].
	SLOTarget float64
	// OracleInterval is the length of the oracle's constant-replica intervals.
	OracleInterval time.Duration
	// MinReplicas bounds every autoscaler and the oracle from below; MaxReplicas caps
	// the oracle's search and the built-in HPAs (0: twice the oracle's peak).
	MinReplicas, MaxReplicas int
	// HPA is the HPA controller's settings (sync period, tolerance, ...).
	HPA hpa.Options
	// ScrapeInterval is the adapter's scrape interval and MaxSampleAge the age
	// beyond which its reading of a pod is stale.
	ScrapeInterval, MaxSampleAge time.Duration
	// PrometheusScrapeInterval is Prometheus's scrape interval (engines and GPU
	// exporter); KEDAPollingInterval is KEDA's pollingInterval.
	PrometheusScrapeInterval, KEDAPollingInterval time.Duration
	// SampleInterval is the resolution of the time series in the report.
	SampleInterval time.Duration
	// DrainLimit is how long after the last arrival the simulation may run to
	// finish the requests; those without a first token by then count as misses.
	DrainLimit time.Duration
	// Seed fixes the phases of every periodic clock (scrapes, polls, HPA syncs),
	// the same for every policy. The same seed gives the same report.
	Seed uint64
	// NewSource makes each autoscaler's MetricSource (see NewAdapterSource)
	// unless the autoscaler brings its own (Autoscaler.Source).
	NewSource func() MetricSource
	// ScrapeEveryTick scrapes at every scrape tick instead of only before a read:
	// needed by a MetricSource that keeps history (rates, histogram windows).
	ScrapeEveryTick bool
	// ObserveHistograms feeds the engines' latency histograms at every step, for a
	// MetricSource that reads them; slower.
	ObserveHistograms bool
	// OnAutoscalerDone, if set, is called after each autoscaler's replay with its name
	// (progress for a person waiting).
	OnAutoscalerDone func(name string)
}

// DefaultConfig returns the emulator's default engine, a 120 s mean cold start
// (engine starts spread ±25 %, a 10 s readiness probe, no node provisioning),
// clients that give up after 60 s without a first token, a 2 s
// TTFT objective and 100 ms per output token, a 99 % target, 60 s oracle
// intervals, replicas from 1, kube-controller-manager's HPA defaults, the
// adapter's 2 s scrape (stale after 3 × 2 s), Prometheus at 15 s, KEDA polling at
// 30 s, 10 s samples, 30 min to drain, seed 1, and the adapter's signals with its
// default set points (queue 5, KV 0.8, unknown pods at 1).
func DefaultConfig() Config {
	return Config{
		Engine:                   emulator.DefaultConfig(),
		ColdStart:                120 * time.Second,
		ColdStartSpread:          0.25,
		ReadinessProbePeriod:     10 * time.Second,
		AbandonAfter:             60 * time.Second,
		TTFTSLO:                  2 * time.Second,
		TPOTSLO:                  100 * time.Millisecond,
		SLOTarget:                0.99,
		OracleInterval:           60 * time.Second,
		MinReplicas:              1,
		HPA:                      hpa.DefaultOptions(),
		ScrapeInterval:           2 * time.Second,
		MaxSampleAge:             6 * time.Second,
		PrometheusScrapeInterval: 15 * time.Second,
		KEDAPollingInterval:      30 * time.Second,
		SampleInterval:           10 * time.Second,
		DrainLimit:               30 * time.Minute,
		Seed:                     1,
		NewSource:                defaultAdapterSource(),
	}
}

// MinClockInterval is the shortest period of a replay's clocks (scrapes,
// Prometheus, KEDA, the HPA's sync, the samples): 100 ms.
const MinClockInterval = 100 * time.Millisecond

// MaxFleet is the most replicas a simulated fleet runs: the oracle's cap.
const MaxFleet = 1024

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if err := c.Engine.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("engine: %w", err))
	}
	if err := c.HPA.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("hpa: %w", err))
	}
	nonNeg := func(name string, d time.Duration) {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must be >= 0, got %v", name, d))
		}
	}
	pos := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be > 0, got %v", name, d))
		}
	}
	if err := c.coldStart().Validate(); err != nil {
		errs = append(errs, err)
	}
	// within bounds the clocks of a replay: an interval far under a second
	// multiplies the events of an hour's replay past any memory, one far over
	// an hour (or an SLO of days) only overflows time arithmetic.
	within := func(name string, d, lo, hi time.Duration) {
		if d < lo || d > hi {
			errs = append(errs, fmt.Errorf("%s must be in [%v, %v], got %v", name, lo, hi, d))
		}
	}
	within("abandon after", c.AbandonAfter, 0, time.Hour)
	if c.AbandonAfter > 0 && c.AbandonAfter < c.TTFTSLO {
		// An abort takes effect when the engine step under way ends (as
		// vLLM's does), so a request can reach its first token after its
		// client left; with the patience at least the SLO that token is a
		// miss anyway, and the score does not depend on the step.
		errs = append(errs, fmt.Errorf("abandon after %v is under the TTFT SLO %v: clients must wait at least the SLO (or 0 for ever)", c.AbandonAfter, c.TTFTSLO))
	}
	within("TTFT SLO", c.TTFTSLO, time.Millisecond, time.Hour)
	within("TPOT SLO", c.TPOTSLO, 0, time.Minute)
	within("oracle interval", c.OracleInterval, time.Second, time.Hour)
	within("scrape interval", c.ScrapeInterval, MinClockInterval, time.Hour)
	pos("max sample age", c.MaxSampleAge)
	within("Prometheus scrape interval", c.PrometheusScrapeInterval, MinClockInterval, time.Hour)
	within("KEDA polling interval", c.KEDAPollingInterval, MinClockInterval, time.Hour)
	within("sample interval", c.SampleInterval, MinClockInterval, time.Hour)
	within("HPA sync period", c.HPA.SyncPeriod, MinClockInterval, time.Hour)
	nonNeg("drain limit", c.DrainLimit)
	if !(c.SLOTarget > 0 && c.SLOTarget <= 1) {
		errs = append(errs, fmt.Errorf("SLO target must be in (0, 1], got %g", c.SLOTarget))
	}
	if c.MinReplicas < 1 || c.MinReplicas > MaxFleet {
		errs = append(errs, fmt.Errorf("min replicas must be in [1, %d], got %d", MaxFleet, c.MinReplicas))
	}
	if c.MaxReplicas < 0 || c.MaxReplicas > MaxFleet {
		errs = append(errs, fmt.Errorf("max replicas must be in [0, %d] (0: twice the oracle's peak), got %d", MaxFleet, c.MaxReplicas))
	}
	if c.MaxReplicas != 0 && c.MaxReplicas < c.MinReplicas {
		errs = append(errs, fmt.Errorf("max replicas %d is below min replicas %d", c.MaxReplicas, c.MinReplicas))
	}
	if c.NewSource == nil {
		errs = append(errs, errors.New("no metric source"))
	}
	return errors.Join(errs...)
}

// Autoscaler is one autoscaling strategy to compare: an HPA whose metrics reach it on
// a path.
type Autoscaler struct {
	// Name identifies the autoscaler in the report.
	Name string
	// Description says what it is, in a line.
	Description string
	// HPA is the autoscaler, with the API server's defaults applied (hpa.Parse or
	// hpa.SetDefaults). spec.maxReplicas 0 means twice the oracle's peak.
	HPA *autoscalingv2.HorizontalPodAutoscaler
	// Path says how its External and Pods metrics are served.
	Path MetricsPath
	// Source, when set, makes its MetricSource (its own catalog: set points,
	// terms); Config.NewSource otherwise.
	Source func() MetricSource
}

// Sample is the state of one autoscaler's fleet at one instant.
type Sample struct {
	// T is the time in seconds since the start.
	T float64 `json:"t"`
	// ArrivalRate is the requests per second that arrived in the previous interval.
	ArrivalRate float64 `json:"arrivalRate"`
	// Replicas counts the non-terminating pods (the Deployment's replicas), Ready
	// the Ready ones, Draining the terminating ones still finishing work.
	Replicas int `json:"replicas"`
	Ready    int `json:"ready"`
	Draining int `json:"draining"`
	// Queue is the requests waiting in the engines plus those held at the gateway
	// (Held of them); Running the requests in the engines' batches.
	Queue   int `json:"queue"`
	Held    int `json:"held"`
	Running int `json:"running"`
}

// outcome is what one autoscaler's run leaves.
type outcome struct {
	rec    *fullRecorder
	f      *fleet
	series []Sample
	renders,
	syncs int
}

// phases draws the phase of every periodic clock from the seed.
func (c Config) phases() pipelineSettings {
	rng := rand.New(rand.NewPCG(c.Seed, 0xc10c))
	tick := func(period time.Duration) ticker {
		return ticker{phase: time.Duration(rng.Int64N(int64(period))), period: period}
	}
	ps := pipelineSettings{sync: tick(c.HPA.SyncPeriod), scrape: tick(c.ScrapeInterval), prom: tick(c.PrometheusScrapeInterval),
		poll: tick(c.KEDAPollingInterval), maxAge: c.MaxSampleAge, everyTick: c.ScrapeEveryTick}
	ps.gpu = ps.prom
	return ps
}

// coldStart returns the cold-start distribution of the configuration.
func (c Config) coldStart() ColdStart {
	return ColdStart{Mean: c.ColdStart, Spread: c.ColdStartSpread, ProbePeriod: c.ReadinessProbePeriod,
		NodeProvisioning: c.NodeProvisioning, WarmNodes: c.WarmNodes, Seed: c.Seed}
}

// epoch returns the virtual wall-clock time of a simulation's start: any fixed
// instant (the engines and the HPA model take times, never read a clock).
func epoch() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// runFleet replays w on a fleet that starts with initial Ready pods, under the
// autoscaler mk builds (nil for a static fleet).
func runFleet(cfg Config, w Workload, initial int, mk func(f *fleet) (autoscaler, error)) (*outcome, error) {
	rec := newFullRecorder(len(w.Requests))
	f := newFleet(cfg.Engine, cfg.coldStart(), epoch(), w.Requests, rec, w.Duration)
	f.costStart = w.ScoreFrom
	f.observe = cfg.ObserveHistograms
	f.abandonAfter = cfg.AbandonAfter
	if err := f.addReady(initial); err != nil {
		return nil, err
	}
	var as autoscaler
	if mk != nil {
		var err error
		if as, err = mk(f); err != nil {
			return nil, err
		}
	}
	out := &outcome{rec: rec, f: f}
	horizon := w.Duration + cfg.DrainLimit
	nextSample := time.Duration(0)
	arrived := 0
	for {
		t := min(nextSample, horizon)
		if as != nil {
			t = min(t, as.next())
		}
		f.advance(t)
		if t == nextSample {
			prev := arrived
			for arrived < len(w.Requests) && w.Requests[arrived].At <= t {
				arrived++
			}
			queued, held, running := f.load()
			out.series = append(out.series, Sample{
				T: t.Seconds(), ArrivalRate: float64(arrived-prev) / cfg.SampleInterval.Seconds(),
				Replicas: f.nonTerminating(), Ready: f.count(phaseReady), Draining: f.count(phaseDraining),
				Queue: queued + held, Held: held, Running: running,
			})
			nextSample += cfg.SampleInterval
		}
		if as != nil && as.next() <= t {
			if err := as.wake(t, f); err != nil {
				return nil, err
			}
		}
		if t >= horizon || (f.done == len(w.Requests) && t >= w.Duration) {
			break
		}
	}
	if hp, ok := as.(*hpaPolicy); ok {
		out.syncs = hp.syncs
		if hp.adapter != nil {
			out.renders += hp.adapter.renders
		}
		if hp.prom != nil {
			out.renders += hp.prom.renders
		}
	}
	return out, nil
}

// Run replays w under the oracle, a static fleet sized for the oracle's peak, and
// each autoscaler, and reports them side by side. Every fleet starts with the
// oracle's initial replicas Ready; the report scores what follows w.ScoreFrom.
func Run(cfg Config, w Workload, policies []Autoscaler) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(w.Requests) == 0 {
		return nil, errors.New("empty workload")
	}
	names := map[string]bool{"oracle": true, "static": true}
	for _, p := range policies {
		if names[p.Name] || p.Name == "" {
			return nil, fmt.Errorf("autoscaler name %q is empty or used twice (oracle and static are built in)", p.Name)
		}
		names[p.Name] = true
		if p.HPA == nil {
			return nil, fmt.Errorf("autoscaler %s has no HPA", p.Name)
		}
		if p.HPA.Spec.MaxReplicas > MaxFleet {
			return nil, fmt.Errorf("autoscaler %s: maxReplicas %d: the simulated fleet runs at most %d replicas", p.Name, p.HPA.Spec.MaxReplicas, MaxFleet)
		}
	}
	ps := cfg.phases()
	attainable := attainableRequests(cfg, w)

	or, err := runOracle(cfg, w, attainable)
	if err != nil {
		return nil, fmt.Errorf("oracle: %w", err)
	}
	peak := 0
	for _, r := range or.schedule {
		peak = max(peak, r)
	}
	auto := cfg.MaxReplicas
	if auto == 0 {
		auto = max(2*peak, cfg.MinReplicas)
	}
	rep := newReport(cfg, w, attainable, ps)
	done := func(name string) {
		if cfg.OnAutoscalerDone != nil {
			cfg.OnAutoscalerDone(name)
		}
	}
	done("oracle")
	rep.add(cfg, w, "oracle", fmt.Sprintf("perfect foresight: fewest Ready replicas per %v interval meeting the TTFT SLO for %.4g %% of each interval's requests, pods started a cold start ahead", cfg.OracleInterval, 100*cfg.SLOTarget), or.outcome, or)

	static, err := runFleet(cfg, w, peak, nil)
	if err != nil {
		return nil, fmt.Errorf("static: %w", err)
	}
	done("static")
	rep.add(cfg, w, "static", fmt.Sprintf("%d replicas throughout: the oracle's peak", peak), static, or)

	for _, p := range policies {
		h := p.HPA.DeepCopy()
		if h.Spec.MaxReplicas == 0 {
			h.Spec.MaxReplicas = int32(auto)
		}
		initial := or.initial
		src := cfg.NewSource
		if p.Source != nil {
			src = p.Source
		}
		out, err := runFleet(cfg, w, initial, func(f *fleet) (autoscaler, error) {
			return newHPAPolicy(h, cfg.HPA, p.Path, src(), ps, f)
		})
		if err != nil {
			return nil, fmt.Errorf("autoscaler %s: %w", p.Name, err)
		}
		done(p.Name)
		rep.add(cfg, w, p.Name, p.Description, out, or)
	}
	return rep, nil
}

// attainableRequests reports, per request, whether it can meet the TTFT SLO at
// all: alone on an idle engine its prefill (in chunks of the token budget) ends
// within the SLO, and the engine accepts it.
func attainableRequests(cfg Config, w Workload) []bool {
	out := make([]bool, len(w.Requests))
	for i, r := range w.Requests {
		if r.PromptTokens+r.OutputTokens > cfg.Engine.MaxModelLen {
			continue
		}
		var d time.Duration
		for done := 0; done < r.PromptTokens; {
			n := min(r.PromptTokens-done, cfg.Engine.MaxNumBatchedTokens)
			d += cfg.Engine.StepTime.Duration(1, n, done)
			done += n
		}
		out[i] = d <= cfg.TTFTSLO
	}
	return out
}

// round keeps 4 decimals, for stable, readable JSON.
func round(v float64) float64 { return math.Round(v*1e4) / 1e4 }
