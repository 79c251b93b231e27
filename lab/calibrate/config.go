package calibrate

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"time"

	"k8s.io/utils/clock"

	"github.com/saturation-adapter/saturation-adapter/lab/trace"
)

// Arrivals is how requests are spaced within a step.
type Arrivals string

const (
	// ArrivalsUniform sends requests evenly spaced, 1/rate apart: a fixed request
	// rate, as the production guides' stepped tests do. Below capacity no queue
	// forms, so the saturation point is sharp.
	ArrivalsUniform Arrivals = "uniform"
	// ArrivalsPoisson sends requests as a Poisson process of that rate
	// (exponential gaps drawn from Config.Seed): bursty like real traffic, so a
	// queue forms somewhat below capacity.
	ArrivalsPoisson Arrivals = "poisson"
)

// Shape is the size of one request in tokens.
type Shape struct {
	// PromptTokens is the prompt length, >= 1. The prompt is text of about that
	// many tokens (one short word each) behind a unique prefix, so that no two
	// requests share a cached prefix.
	PromptTokens int `json:"promptTokens"`
	// OutputTokens is max_tokens, >= 1; with Config.IgnoreEOS the engine generates
	// exactly that many.
	OutputTokens int `json:"outputTokens"`
}

// ShapesFromTrace returns the request sizes of a trace (its rows' prompt and
// output lengths; their times are not used), keeping those whose prompt plus
// output fit in maxModelLen tokens (0: all). It fails when none is left.
func ShapesFromTrace(tr trace.Trace, maxModelLen int) ([]Shape, error) {
	var out []Shape
	for _, r := range tr.Requests {
		if maxModelLen > 0 && r.PromptTokens+r.OutputTokens > maxModelLen {
			continue
		}
		out = append(out, Shape{PromptTokens: r.PromptTokens, OutputTokens: r.OutputTokens})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no request of the trace's %d fits in %d tokens (prompt + output)", len(tr.Requests), maxModelLen)
	}
	return out, nil
}

// Config is one calibration run. Start from [DefaultConfig] and set URL and
// Rates.
type Config struct {
	// URL is the base URL of the OpenAI-compatible API (http or https), without
	// /v1: requests go to URL + "/v1/completions". Required.
	URL string
	// MetricsURL is the engine's Prometheus endpoint; "" means URL + "/metrics".
	MetricsURL string
	// Model is the request's model field; "" asks GET URL + "/v1/models" and
	// takes the first model served.
	Model string
	// Warmup is the number of requests sent one at a time before the steps, >= 1.
	Warmup int
	// ContextProbe is the number of requests sent at once in each group of the
	// context probe, run after the warm-up (ProbeRounds rounds of a short- and
	// a long-prompt group; see fitStepTime); 0 skips it. At most MaxContextProbe.
	ContextProbe int
	// Rates are the steps' request rates in requests per second, each > 0 and
	// increasing.
	Rates []float64
	// StepDuration is how long each step sends requests.
	StepDuration time.Duration
	// Arrivals spaces the requests within a step.
	Arrivals Arrivals
	// Shapes are the request sizes, drawn uniformly at random (Seed) for every
	// request; one shape gives fixed sizes.
	Shapes []Shape
	// IgnoreEOS sends vLLM's ignore_eos extension so that every request generates
	// exactly its OutputTokens.
	IgnoreEOS bool
	// TTFTSLO is the time-to-first-token objective and TTFTQuantile the share of a
	// step's requests that must meet it, in (0, 1] (0.95: TTFT p95 <= SLO).
	TTFTSLO      time.Duration
	TTFTQuantile float64
	// MaxQueue is the mean queue depth (waiting requests, over the second half of
	// a step) at or below which the queue counts as near 0.
	MaxQueue float64
	// MaxRequests caps the requests of the whole run, warm-up included: once sent,
	// no more are, and the step in progress is judged on what it sent.
	MaxRequests int
	// StepsPastSaturation is how many steps run after the first failing one
	// (they measure the engine overloaded: its full batch and its throughput).
	StepsPastSaturation int
	// Headroom is the fraction of the saturation rate the recommended set points
	// aim each pod at, in (0, 1]; see the package documentation.
	Headroom float64
	// MetricsInterval is the time between two reads of MetricsURL.
	MetricsInterval time.Duration
	// RequestTimeout bounds one request, from its send to its last token.
	RequestTimeout time.Duration
	// Seed drives the shapes' draws and the Poisson gaps.
	Seed uint64
	// Client sends every request; nil means a client of its own, which follows
	// no redirect (traffic goes only to URL and MetricsURL).
	Client *http.Client
	// Clock times the requests and the steps; nil means the real clock.
	Clock clock.WithTicker
	// Progress, if set, is called with a line of progress for a person waiting:
	// at each step's start and end and every ProgressInterval within a step.
	Progress         func(line string)
	ProgressInterval time.Duration
}

// DefaultConfig returns the defaults: 20 warm-up requests, a context probe of
// 8 requests at once, 60 s steps of evenly
// spaced requests of 1000 prompt and 200 output tokens (about the Azure
// conversation trace's means: 1155 and 211), ignore_eos, a TTFT p95 of at most
// 2 s (simulate's default SLO), a queue near 0 at a mean of at most 1 waiting,
// one step past saturation, at most 20,000 requests, set points at 90 % of the
// saturation rate (about 1 / (1 + the HPA's default tolerance of 0.1)), /metrics
// every second, requests bounded by 5 minutes, seed 1.
// Rates and URL are left for the caller.
func DefaultConfig() Config {
	return Config{
		Warmup:              20,
		ContextProbe:        8,
		StepDuration:        60 * time.Second,
		Arrivals:            ArrivalsUniform,
		Shapes:              []Shape{{PromptTokens: 1000, OutputTokens: 200}},
		IgnoreEOS:           true,
		TTFTSLO:             2 * time.Second,
		TTFTQuantile:        0.95,
		MaxQueue:            1,
		MaxRequests:         20000,
		StepsPastSaturation: 1,
		Headroom:            0.9,
		MetricsInterval:     time.Second,
		RequestTimeout:      5 * time.Minute,
		Seed:                1,
		ProgressInterval:    10 * time.Second,
	}
}

// MaxRate is the highest request rate a step may send, requests per second:
// far above what one engine serves, and a gap between requests of at least 1 µs.
const MaxRate = 1e6

// MaxSteps is the most steps a run may have: at the shortest step (1 s),
// more than a quarter of an hour of load.
const MaxSteps = 1000

// StepRates returns count rates from start, step apart: start, start+step, ...
// It fails on a count below 1 or a rate that is not > 0 and finite (Validate
// bounds them by MaxRate).
func StepRates(start, step float64, count int) ([]float64, error) {
	if count < 1 || count > MaxSteps {
		return nil, fmt.Errorf("step count must be in [1, %d], got %d", MaxSteps, count)
	}
	if !(start > 0) || math.IsInf(start, 0) || !(step > 0) || math.IsInf(step, 0) {
		return nil, fmt.Errorf("start rate and rate step must be finite numbers > 0, got %g and %g", start, step)
	}
	out := make([]float64, count)
	for i := range out {
		out[i] = start + float64(i)*step
	}
	return out, nil
}

// metricsURL returns MetricsURL or its default.
func (c Config) metricsURL() string {
	if c.MetricsURL != "" {
		return c.MetricsURL
	}
	u, err := url.JoinPath(c.URL, "metrics")
	if err != nil {
		return c.URL + "/metrics"
	}
	return u
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	errs = append(errs, c.validateURLs()...)
	errs = append(errs, c.validateLoad()...)
	errs = append(errs, c.validateVerdict()...)
	errs = append(errs, c.validateLimits()...)
	return errors.Join(errs...)
}

// validateURLs checks URL (required) and MetricsURL (optional): http or https
// URLs with a host.
func (c Config) validateURLs() []error {
	var errs []error
	checkURL := func(name, s string) {
		u, err := url.Parse(s)
		switch {
		case s == "":
			errs = append(errs, fmt.Errorf("%s is required", name))
		case err != nil:
			errs = append(errs, fmt.Errorf("%s %q: %w", name, s, err))
		case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
			errs = append(errs, fmt.Errorf("%s %q: want an http or https URL with a host", name, s))
		}
	}
	checkURL("URL", c.URL)
	if c.MetricsURL != "" {
		checkURL("metrics URL", c.MetricsURL)
	}
	return errs
}

// validateLoad checks the load the run sends: the warm-up, the rates (finite,
// positive, increasing), the step duration (each step sends a request), the
// arrivals and the request shapes.
func (c Config) validateLoad() []error {
	var errs []error
	if c.Warmup < 1 {
		errs = append(errs, fmt.Errorf("warm-up requests must be >= 1 (they measure the idle engine), got %d", c.Warmup))
	}
	if c.ContextProbe < 0 || c.ContextProbe > MaxContextProbe {
		errs = append(errs, fmt.Errorf("context probe must be 0 (off) to %d requests at once, got %d", MaxContextProbe, c.ContextProbe))
	}
	if len(c.Rates) == 0 {
		errs = append(errs, errors.New("no request rate"))
	}
	// One error of each kind, the first: a --start-rate of 1e300 made every
	// step "not increase" (1e300 + 1 is 1e300), once per step.
	var badRate, notIncreasing error
	if len(c.Rates) > MaxSteps {
		errs = append(errs, fmt.Errorf("%d steps: want at most %d", len(c.Rates), MaxSteps))
	}
	ok := func(r float64) bool { return r > 0 && r <= MaxRate }
	for i, r := range c.Rates {
		if !ok(r) {
			if badRate == nil {
				badRate = fmt.Errorf("rate %g: want a number in (0, %g] (requests per second)", r, MaxRate)
			}
		} else if i > 0 && ok(c.Rates[i-1]) && !(r > c.Rates[i-1]) && notIncreasing == nil {
			notIncreasing = fmt.Errorf("rates must increase: %g follows %g", r, c.Rates[i-1])
		}
	}
	for _, err := range []error{badRate, notIncreasing} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if c.StepDuration <= 0 {
		errs = append(errs, fmt.Errorf("step duration must be > 0, got %v", c.StepDuration))
	}
	for i, r := range c.Rates {
		if r > 0 && c.StepDuration > 0 && r*c.StepDuration.Seconds() < 1 {
			errs = append(errs, fmt.Errorf("step %d sends no request: %g/s for %v", i+1, r, c.StepDuration))
			break
		}
	}
	if !slices.Contains([]Arrivals{ArrivalsUniform, ArrivalsPoisson}, c.Arrivals) {
		errs = append(errs, fmt.Errorf("arrivals %q: want %s or %s", c.Arrivals, ArrivalsUniform, ArrivalsPoisson))
	}
	if len(c.Shapes) == 0 {
		errs = append(errs, errors.New("no request shape"))
	}
	for _, s := range c.Shapes {
		if s.PromptTokens < 1 || s.OutputTokens < 1 {
			errs = append(errs, fmt.Errorf("request shape %d prompt + %d output tokens: both must be >= 1", s.PromptTokens, s.OutputTokens))
			break
		}
	}
	return errs
}

// validateVerdict checks what a step is judged by: the TTFT SLO and quantile
// and the queue that counts as near 0.
func (c Config) validateVerdict() []error {
	var errs []error
	if c.TTFTSLO <= 0 {
		errs = append(errs, fmt.Errorf("TTFT SLO must be > 0, got %v", c.TTFTSLO))
	}
	if !(c.TTFTQuantile > 0 && c.TTFTQuantile <= 1) {
		errs = append(errs, fmt.Errorf("TTFT quantile must be in (0, 1], got %g", c.TTFTQuantile))
	}
	if !(c.MaxQueue >= 0) || math.IsInf(c.MaxQueue, 0) {
		errs = append(errs, fmt.Errorf("max queue must be a finite number >= 0, got %g", c.MaxQueue))
	}
	return errs
}

// validateLimits checks the rest: the request cap and the steps past
// saturation (when the run stops), the headroom of the recommendation, and
// the metrics, request and progress intervals.
func (c Config) validateLimits() []error {
	var errs []error
	if before := c.Warmup + 2*ProbeRounds*max(0, c.ContextProbe); c.MaxRequests <= before {
		errs = append(errs, fmt.Errorf("max requests %d leaves none for the steps after %d warm-up and context probe requests", c.MaxRequests, before))
	}
	if c.StepsPastSaturation < 0 {
		errs = append(errs, fmt.Errorf("steps past saturation must be >= 0, got %d", c.StepsPastSaturation))
	}
	if !(c.Headroom > 0 && c.Headroom <= 1) {
		errs = append(errs, fmt.Errorf("headroom must be in (0, 1], got %g", c.Headroom))
	}
	if c.MetricsInterval <= 0 {
		errs = append(errs, fmt.Errorf("metrics interval must be > 0, got %v", c.MetricsInterval))
	} else if c.StepDuration > 0 && c.MetricsInterval*4 > c.StepDuration {
		errs = append(errs, fmt.Errorf("metrics interval %v gives fewer than 4 readings per %v step", c.MetricsInterval, c.StepDuration))
	}
	if c.RequestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("request timeout must be > 0, got %v", c.RequestTimeout))
	}
	if c.ProgressInterval < 0 {
		errs = append(errs, fmt.Errorf("progress interval must be >= 0, got %v", c.ProgressInterval))
	}
	return errs
}
