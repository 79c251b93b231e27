package calibrate

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// window is the time a step sent requests, as offsets from the run's start.
type window struct {
	start, end time.Duration
	rate       float64
	// truncated: the request cap ended the step early.
	truncated bool
}

// runner is one calibration run in progress.
type runner struct {
	cfg            Config
	clk            clock.WithTicker
	t0             time.Time
	client         *http.Client
	model          string
	maxModelLen    int
	completionsURL string
	metricsURL     string
	ex             *signals.Extractor
	rng            *rand.Rand

	mu           sync.Mutex
	records      []*record
	samples      []sample
	scrapeErrors int
	lastScrape   error
	cache        *cacheConfig
	inflight     int
	notes        []string // for the report
}

func (r *runner) since() time.Duration { return r.clk.Since(r.t0) }

func (r *runner) progress(format string, args ...any) {
	if r.cfg.Progress != nil {
		r.cfg.Progress(fmt.Sprintf(format, args...))
	}
}

// Run calibrates against the engine at cfg.URL: it checks the model list and the
// metrics endpoint, warms up, runs the steps and analyses them (see the package
// documentation). Errors: an invalid cfg; an endpoint that lists no model, whose
// metrics cannot be read or carry no engine metric; a warm-up request that
// fails; ctx ending. Requests failing during the steps are not errors: they fail
// their step.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, clk: cfg.Clock, client: cfg.Client, model: cfg.Model, metricsURL: cfg.metricsURL(),
		ex: signals.NewExtractor(), rng: rand.New(rand.NewPCG(cfg.Seed, 0xca1b))}
	if r.clk == nil {
		r.clk = clock.RealClock{}
	}
	if r.client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 1024
		// Traffic goes only where the user pointed it: a redirect is an answer,
		// not a place to send load to.
		r.client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	var err error
	if r.completionsURL, err = url.JoinPath(cfg.URL, "v1", "completions"); err != nil {
		return nil, fmt.Errorf("URL %q: %w", cfg.URL, err)
	}
	info, err := fetchModel(ctx, r.client, cfg.URL)
	switch {
	case err == nil:
		r.maxModelLen = info.maxModelLen
		if r.model == "" {
			r.model = info.id
		}
	case r.model == "":
		return nil, fmt.Errorf("finding the model to request (set it to skip this): %w", err)
	}
	if r.maxModelLen > 0 {
		var fit []Shape
		for _, s := range cfg.Shapes {
			if s.PromptTokens+s.OutputTokens <= r.maxModelLen {
				fit = append(fit, s)
			}
		}
		switch {
		case len(fit) == 0 && len(cfg.Shapes) == 1:
			return nil, fmt.Errorf("requests of %d prompt + %d output tokens are longer than the model's max_model_len %d",
				cfg.Shapes[0].PromptTokens, cfg.Shapes[0].OutputTokens, r.maxModelLen)
		case len(fit) == 0:
			return nil, fmt.Errorf("none of the %d request shapes fits in the model's max_model_len %d", len(cfg.Shapes), r.maxModelLen)
		case len(fit) < len(cfg.Shapes):
			r.notes = append(r.notes, fmt.Sprintf("%d of %d request shapes are longer than max_model_len %d and were left out", len(cfg.Shapes)-len(fit), len(cfg.Shapes), r.maxModelLen))
		}
		r.cfg.Shapes = fit
	}
	r.t0 = r.clk.Now()
	if err := r.scrape(ctx); err != nil {
		return nil, fmt.Errorf("reading the engine's metrics: %w", err)
	}
	pctx, stopPoll := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		r.poll(pctx)
	}()
	windows, warmupEnd, err := r.load(ctx)
	stopPoll()
	<-polled
	if err != nil {
		return nil, err
	}
	return r.analyse(windows, warmupEnd), nil
}

// scrape reads the metrics once and keeps the sample.
func (r *runner) scrape(ctx context.Context) error {
	body, err := fetchMetrics(ctx, r.client, r.metricsURL, max(r.cfg.MetricsInterval, time.Second))
	var rd signals.Reading
	if err == nil {
		rd, err = r.ex.Extract(body)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.scrapeErrors++
		r.lastScrape = err
		return err
	}
	smp := readingSample(r.since(), rd)
	if steps, tokens, ok := parseIterationTokens(body); ok {
		smp.steps, smp.stepTokens = &steps, &tokens
	}
	r.samples = append(r.samples, smp)
	if r.cache == nil {
		if cc, ok := parseCacheConfig(body); ok {
			r.cache = &cc
		}
	}
	return nil
}

// poll scrapes every MetricsInterval until ctx ends.
func (r *runner) poll(ctx context.Context) {
	t := r.clk.NewTicker(r.cfg.MetricsInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if err := r.scrape(ctx); err != nil && ctx.Err() == nil {
				klog.V(2).InfoS("Reading engine metrics failed", "url", r.metricsURL, "err", err)
			}
		}
	}
}

// latest returns the last sample.
func (r *runner) latest() sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.samples) == 0 {
		return sample{}
	}
	return r.samples[len(r.samples)-1]
}

// newRecord draws a shape and registers a request of step.
func (r *runner) newRecord(step int) (*record, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := &record{step: step, shape: r.cfg.Shapes[r.rng.IntN(len(r.cfg.Shapes))], sent: r.since(), first: -1, last: -1, done: -1}
	if step == stepWarmup && len(r.cfg.Shapes) == 1 && len(r.records)%2 == 1 {
		rec.shape = longWarmup(rec.shape, r.maxModelLen)
	}
	r.records = append(r.records, rec)
	r.inflight++
	return rec, len(r.records)
}

func (r *runner) finished() {
	r.mu.Lock()
	r.inflight--
	r.mu.Unlock()
}

// load sends the warm-up and the steps and waits for every request to end. It
// returns the steps' windows and the end of the warm-up.
func (r *runner) load(ctx context.Context) ([]window, time.Duration, error) {
	cfg := r.cfg
	r.progress("calibrating %s (model %s, metrics %s): %d warm-up requests, then %d steps of %v up to %g req/s (at most %d requests)",
		cfg.URL, r.model, r.metricsURL, cfg.Warmup, len(cfg.Rates), cfg.StepDuration, cfg.Rates[len(cfg.Rates)-1], cfg.MaxRequests)
	if err := r.warmup(ctx); err != nil {
		return nil, 0, err
	}
	if err := r.contextProbe(ctx); err != nil {
		return nil, 0, err
	}
	warmupEnd := r.since()
	what := "warm-up"
	if cfg.ContextProbe > 0 {
		what = "warm-up and context probe"
	}
	r.progress("%s done in %v", what, warmupEnd.Round(time.Millisecond))

	var progressC <-chan time.Time // nil: no progress within steps
	if cfg.ProgressInterval > 0 {
		t := r.clk.NewTicker(cfg.ProgressInterval)
		defer t.Stop()
		progressC = t.C()
	}
	var wg sync.WaitGroup
	windows, err := r.runSteps(ctx, &wg, progressC)
	if err != nil {
		return nil, 0, err
	}
	if err := r.awaitInflight(ctx, &wg, progressC); err != nil {
		return nil, 0, err
	}
	return windows, warmupEnd, nil
}

// warmup sends the warm-up requests one at a time. Errors: ctx's, or the first
// request that fails.
func (r *runner) warmup(ctx context.Context) error {
	for i := range r.cfg.Warmup {
		rec, id := r.newRecord(stepWarmup)
		r.complete(ctx, rec, id)
		r.finished()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if rec.err != nil {
			return fmt.Errorf("warm-up request %d of %d failed: %w", i+1, r.cfg.Warmup, rec.err)
		}
	}
	return nil
}

// runSteps runs the steps in turn, judging each as it ends, until the last
// rate, the request cap or more than StepsPastSaturation failing steps. Each
// request runs in a goroutine counted in wg. It returns the steps' windows, or
// ctx's error once every request sent has ended.
func (r *runner) runSteps(ctx context.Context, wg *sync.WaitGroup, progressC <-chan time.Time) ([]window, error) {
	cfg := r.cfg
	var windows []window
	r.mu.Lock()
	sent, failing := len(r.records), 0 // the warm-up's and the probe's
	r.mu.Unlock()
	for i, rate := range cfg.Rates {
		w, err := r.runStep(ctx, wg, progressC, i, rate, &sent)
		if err != nil {
			return nil, err
		}
		windows = append(windows, w)
		st := r.judgeNow(w, i)
		r.progress("step %d/%d: %s", i+1, len(cfg.Rates), st.summary())
		if w.truncated {
			r.progress("stopping: --max-requests %d reached", cfg.MaxRequests)
			break
		}
		if !st.Pass {
			failing++
			if failing > cfg.StepsPastSaturation {
				break
			}
		}
	}
	return windows, nil
}

// runStep sends step i's requests at rate for StepDuration, or until sent (the
// run's requests so far) reaches MaxRequests, which truncates the step; a
// step not truncated then waits out its duration. It prints the step's
// progress at each tick of progressC and returns the step's window, or ctx's
// error once every request sent has ended.
func (r *runner) runStep(ctx context.Context, wg *sync.WaitGroup, progressC <-chan time.Time, i int, rate float64, sent *int) (window, error) {
	cfg := r.cfg
	w := window{start: r.since(), rate: rate}
	r.progress("step %d/%d: %g req/s for %v", i+1, len(cfg.Rates), rate, cfg.StepDuration)
	// at is the offset of the next arrival within the step.
	for at := time.Duration(0); at < cfg.StepDuration; at += r.gap(rate) {
		if *sent >= cfg.MaxRequests {
			w.truncated = true
			break
		}
		if err := r.waitUntil(ctx, w.start+at, progressC, func() { r.stepProgress(i, w) }); err != nil {
			wg.Wait()
			return w, err
		}
		rec, id := r.newRecord(i)
		*sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.finished()
			r.complete(ctx, rec, id)
		}()
	}
	if !w.truncated {
		if d := w.start + cfg.StepDuration - r.since(); d > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return w, ctx.Err()
			case <-r.clk.After(d):
			}
		}
	}
	w.end = r.since()
	return w, nil
}

// waitUntil waits until due (an offset from the run's start), calling
// onProgress at each tick of progressC meanwhile. It returns ctx's error if ctx
// ends first.
func (r *runner) waitUntil(ctx context.Context, due time.Duration, progressC <-chan time.Time, onProgress func()) error {
	for {
		d := due - r.since()
		if d <= 0 {
			return nil
		}
		t := r.clk.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-progressC:
			t.Stop()
			onProgress()
		case <-t.C():
			return nil
		}
	}
}

// awaitInflight waits for the requests still in flight (wg), printing how many
// at each tick of progressC. If ctx ends first, it still waits for them, then
// returns ctx's error.
func (r *runner) awaitInflight(ctx context.Context, wg *sync.WaitGroup, progressC <-chan time.Time) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	for {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			<-done
			return ctx.Err()
		case <-progressC:
			r.mu.Lock()
			n := r.inflight
			r.mu.Unlock()
			r.progress("waiting for %d requests still in flight", n)
		}
	}
}

// longWarmup is the long-prompt variant of a fixed shape that every other
// warm-up request uses, so that the warm-up sees two contexts and the fit can
// tell the per-token context cost from the fixed cost: four times the prompt,
// within one default step budget (8,000 tokens) and maxModelLen (0: unknown).
func longWarmup(s Shape, maxModelLen int) Shape {
	p := min(4*s.PromptTokens, 8000)
	if maxModelLen > 0 {
		p = min(p, maxModelLen-s.OutputTokens)
	}
	s.PromptTokens = max(s.PromptTokens, p)
	return s
}

// gap returns the time to the next arrival at rate.
func (r *runner) gap(rate float64) time.Duration {
	mean := float64(time.Second) / rate
	if r.cfg.Arrivals == ArrivalsPoisson {
		r.mu.Lock()
		u := r.rng.Float64()
		r.mu.Unlock()
		return time.Duration(-math.Log(1-u) * mean)
	}
	return time.Duration(math.Round(mean))
}

// stepProgress prints where step i stands.
func (r *runner) stepProgress(i int, w window) {
	s := r.latest()
	r.mu.Lock()
	n, in := 0, r.inflight
	for _, rec := range r.records {
		if rec.step == i {
			n++
		}
	}
	r.mu.Unlock()
	r.progress("  step %d at %v: %d sent, %d in flight, queue %s, running %s, KV %s", i+1, (r.since() - w.start).Round(time.Second), n, in,
		fmtPtr(s.queue, "%.0f"), fmtPtr(s.running, "%.0f"), fmtPtr(s.kv, "%.2f"))
}

// judgeNow judges step i at its end from what is known: a request still without
// a first token counts with the time it has waited so far, a lower bound of its
// TTFT (a miss once that exceeds the SLO).
func (r *runner) judgeNow(w window, i int) StepReport {
	r.mu.Lock()
	recs := make([]record, len(r.records))
	for j, rec := range r.records {
		recs[j] = *rec
	}
	samples := append([]sample(nil), r.samples...)
	r.mu.Unlock()
	now := r.since()
	for j := range recs {
		if recs[j].step == i && recs[j].first < 0 && recs[j].done < 0 {
			recs[j].first = now // a lower bound of its TTFT: late once it has waited longer than the SLO
		}
	}
	return judgeStep(r.cfg, w, i, recs, samples)
}

func fmtPtr(p *float64, format string) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf(format, *p)
}
