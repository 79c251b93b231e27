package calibrate

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
)

// Fit is how the engine profile was obtained: the measurements behind each field.
type Fit struct {
	// IdleTTFTSeconds is the warm-up's median TTFT, IdleInterTokenLatencySeconds
	// its inter-token latency as the warm-up alone reads it (the intercept of
	// the line over the contexts, or the median): a request alone on an idle
	// engine.
	IdleTTFTSeconds              float64 `json:"idleTTFTSeconds"`
	IdleInterTokenLatencySeconds float64 `json:"idleInterTokenLatencySeconds"`
	// Points are (mean running requests, step time in seconds net of its
	// prefill and of the fitted context cost) pairs: the idle engine first
	// (at 1: the warm-up's inter-token latency net of the fitted context
	// cost), then one per passing step. On them the fitted model is the line Base +
	// PerSeq × running.
	Points [][2]float64 `json:"points"`
	// ContextProbe is what the context probe measured; nil when it did not run.
	ContextProbe *ContextProbe `json:"contextProbe,omitempty"`
	// MaxNumSeqsFrom, KVCacheFrom and MaxModelLenFrom say where those fields came
	// from ("observed", "cache_config_info", "estimated", "/v1/models",
	// "default").
	MaxNumSeqsFrom  string `json:"maxNumSeqsFrom"`
	KVCacheFrom     string `json:"kvCacheFrom"`
	MaxModelLenFrom string `json:"maxModelLenFrom"`
}

// median returns the median of vs (the mean of the middle two for an even
// count); 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// lineFit is an ordinary least-squares line y = a + b x; with fewer than two
// distinct x it returns the mean of y and slope 0.
func lineFit(pts [][2]float64) (a, b float64) {
	n := float64(len(pts))
	var sx, sy, sxx, sxy float64
	for _, p := range pts {
		sx += p[0]
		sy += p[1]
		sxx += p[0] * p[0]
		sxy += p[0] * p[1]
	}
	den := n*sxx - sx*sx
	if n == 0 {
		return 0, 0
	}
	if math.Abs(den) < 1e-12*math.Max(1, n*sxx) {
		return sy / n, 0
	}
	b = (n*sxy - sx*sy) / den
	return (sy - b*sx) / n, b
}

// fitProfile fits the engine configuration (see the package documentation) from
// the warm-up and probe records, the steps and the samples (those from
// stepsStart, the end of the warm-up and the probe, for the batch limit). It returns the configuration,
// how each part was obtained and notes on what could not be observed.
func (r *runner) fitProfile(steps []StepReport, stepsStart time.Duration) (emulator.Config, Fit, []string) {
	cfg := emulator.DefaultConfig()
	var (
		fit   Fit
		notes []string
	)
	base, perSeq, perPrefill, perCtx, stepNotes := r.fitStepTime(steps, &fit)
	notes = append(notes, stepNotes...)
	cfg.StepTime = emulator.StepTimeModel{
		Base:            roundDuration(base),
		PerSeq:          roundDuration(perSeq),
		PerPrefillToken: roundDuration(perPrefill),
		PerContextToken: roundDuration(perCtx),
	}
	if cfg.StepTime.Duration(1, 0, 0) <= 0 {
		cfg.StepTime.Base = time.Microsecond
		notes = append(notes, "no step time could be measured: base set to 1us")
	}
	notes = append(notes, r.fitMaxNumSeqs(&cfg, &fit, stepsStart)...)
	notes = append(notes, r.fitKVCache(steps, &cfg, &fit)...)
	notes = append(notes, r.fitMaxModelLen(&cfg, &fit)...)
	notes = append(notes, fmt.Sprintf("maxNumBatchedTokens cannot be observed from outside: the emulator's default %d is kept (set it to your --max-num-batched-tokens)", cfg.MaxNumBatchedTokens))
	return cfg, fit, notes
}

// fitMaxNumSeqs sets cfg.MaxNumSeqs, the batch limit, and fit.MaxNumSeqsFrom:
// the most running requests while some were waiting, if the batch sat at it
// (in a quarter of those readings, and at least 3). A queue also forms below
// the limit when the token budget (long prompts) or the KV cache stops
// admissions; then the limit is not observed, and the most running requests
// seen is a lower bound. It returns a note when the limit was not observed.
func (r *runner) fitMaxNumSeqs(cfg *emulator.Config, fit *Fit, from time.Duration) []string {
	var waitingRunning []float64
	var maxRunning, kvAtMax float64
	// The probe's groups arrive at once and may be preempted: their readings
	// show requests waiting below the batch limit.
	samples := r.samples[:0:0]
	for _, s := range r.samples {
		if s.at >= from {
			samples = append(samples, s)
		}
	}
	for _, s := range samples {
		if s.running == nil {
			continue
		}
		maxRunning = math.Max(maxRunning, *s.running)
		if s.queue != nil && *s.queue > 0 {
			waitingRunning = append(waitingRunning, *s.running)
		}
	}
	peak, atPeak := 0.0, 0
	for _, v := range waitingRunning {
		peak = math.Max(peak, v)
	}
	for _, v := range waitingRunning {
		if v == peak {
			atPeak++
		}
	}
	for _, s := range samples {
		if s.running != nil && *s.running == peak && s.queue != nil && *s.queue > 0 && s.kv != nil {
			kvAtMax = math.Max(kvAtMax, *s.kv)
		}
	}
	plateau := peak >= 1 && atPeak >= max(3, len(waitingRunning)/4)
	switch {
	case plateau && kvAtMax < 0.95:
		cfg.MaxNumSeqs = int(peak)
		fit.MaxNumSeqsFrom = "observed"
		return nil
	case peak >= 1 || maxRunning >= 1:
		seen := int(math.Max(peak, maxRunning))
		cfg.MaxNumSeqs = max(cfg.MaxNumSeqs, seen)
		fit.MaxNumSeqsFrom = "lower bound"
		why := "no reading had requests waiting"
		switch {
		case plateau:
			why = fmt.Sprintf("requests waited with %.0f running and the KV cache %.0f %% used: the KV cache limited the batch", peak, 100*kvAtMax)
		case peak >= 1:
			why = fmt.Sprintf("requests waited while the batch varied (up to %.0f running): the token budget or the KV cache limited admissions, not the batch", peak)
		}
		return []string{fmt.Sprintf("%s, so maxNumSeqs is not observed: at least %d, %d written (set it to your --max-num-seqs)", why, seen, cfg.MaxNumSeqs)}
	default:
		fit.MaxNumSeqsFrom = "default"
		return []string{"the engine reports no running requests: maxNumSeqs is the emulator's default"}
	}
}

// fitKVCache sets cfg's KV cache (BlockSize and NumBlocks) and
// fit.KVCacheFrom: vllm:cache_config_info's when the engine exports it, else
// the blocks estimated from the steps at the emulator's block size, else the
// emulator's defaults. It returns a note unless the engine exported it.
func (r *runner) fitKVCache(steps []StepReport, cfg *emulator.Config, fit *Fit) []string {
	if r.cache != nil {
		cfg.BlockSize, cfg.NumBlocks = r.cache.blockSize, r.cache.numGPUBlocks
		fit.KVCacheFrom = "cache_config_info"
		return nil
	}
	if n, ok := r.estimateBlocks(steps, cfg.BlockSize); ok {
		cfg.NumBlocks = n
		fit.KVCacheFrom = "estimated"
		return []string{fmt.Sprintf("no vllm:cache_config_info: numGPUBlocks %d estimated from KV usage and the tokens the running requests hold, at the emulator's block size %d", n, cfg.BlockSize)}
	}
	fit.KVCacheFrom = "default"
	return []string{"no vllm:cache_config_info and no KV-cache usage: numGPUBlocks and blockSize are the emulator's defaults"}
}

// fitMaxModelLen sets cfg.MaxModelLen and fit.MaxModelLenFrom: /v1/models'
// max_model_len, at most what the KV cache (already fitted in cfg) holds. It
// returns a note when the KV cache cut it.
func (r *runner) fitMaxModelLen(cfg *emulator.Config, fit *Fit) []string {
	kvTokens := (cfg.NumBlocks - 1) * cfg.BlockSize
	switch {
	case r.maxModelLen > 0 && r.maxModelLen <= kvTokens:
		cfg.MaxModelLen = r.maxModelLen
		fit.MaxModelLenFrom = "/v1/models"
	case r.maxModelLen > 0:
		cfg.MaxModelLen = kvTokens
		fit.MaxModelLenFrom = "KV cache"
		return []string{fmt.Sprintf("max_model_len %d is more than the KV cache holds (%d tokens): maxModelLen set to %d", r.maxModelLen, kvTokens, kvTokens)}
	default:
		cfg.MaxModelLen = min(cfg.MaxModelLen, kvTokens)
		fit.MaxModelLenFrom = "default"
	}
	return nil
}

// fitStepTime fits lab/emulator's step-time model (see the package
// documentation). Alone on the idle engine, a warm-up request's inter-token
// latency is one decode step, Base + PerSeq + PerContextToken × the context it
// holds: a line over the warm-up gives Base + PerSeq (its intercept, a0) and
// PerContextToken (its slope), and the TTFT of a one-chunk prompt
// PerPrefillToken. Under load, each passing step's engine step time net of its
// prefill and context costs, against its running requests, is a line through
// the idle point (1, a0) whose intercept is Base and slope PerSeq.
//
// Under load the context held grows with the running requests, so the steps
// cannot tell PerContextToken from PerSeq. The idle slope can, weakly: on the
// default engine it moves a lone request's inter-token latency by 0.3 ms over
// 8,000 tokens, which a shared CPU or a busy host hides. The context probe
// (see ProbeRounds), when it ran, measures it instead: the same batch at two
// contexts, 2.5 ms apart on the default engine; the idle point is then the
// warm-up's inter-token latency net of the probe's context cost. (The
// probe's groups are not points of the line: at 8 requests at once they
// would outweigh the steps, and a busy host stretches their steps.)
// When the context cost is so far off that the steps' line would need a PerSeq below 0
// (measured against `lab emulator`'s default engine on a loaded machine: 134–222
// ns per token against 40, then PerSeq 0 and a profile that saturated at 12
// requests/s against 16), the three are fitted together instead, over the
// warm-up and the steps, each at least 0 (fitStepModel): the steps then fix
// what they measure well, PerSeq + PerContextToken × the context held, and the
// profile replays them.
func (r *runner) fitStepTime(steps []StepReport, fit *Fit) (base, perSeq, perPrefill, perCtx float64, notes []string) {
	idle, a0, perCtx, perPrefill, notes := r.fitIdle(fit)
	probeCtx, probed, probeNotes := r.fitProbe(fit)
	if probed {
		// The probe's difference replaces the lone requests' slope (what the
		// warm-up could not tell about it no longer matters); the idle point
		// is their inter-token latency net of it.
		notes = slices.DeleteFunc(notes, func(n string) bool { return strings.Contains(n, "perContextToken") })
		perCtx = probeCtx
		if len(idle) > 0 {
			a0 = idleNet(idle, perCtx)
		}
	}
	notes = append(notes, probeNotes...)
	load := r.loadPoints(steps, perPrefill)
	// line is the idle point and the steps net of the context cost perCtx.
	line := func(perCtx float64) [][2]float64 {
		l := [][2]float64{}
		if a0 > 0 {
			l = append(l, [2]float64{1, a0})
		}
		for _, p := range load {
			l = append(l, [2]float64{p.running, p.seconds - perCtx*p.context})
		}
		return l
	}
	base, perSeq = lineFit(line(perCtx))
	if perSeq < 0 || base < 0 {
		pts := slices.Concat(idle, load)
		if probed {
			// The probe's context cost stands: base and perSeq alone are
			// fitted, at least 0, over the points net of it.
			for i := range pts {
				pts[i].seconds -= perCtx * pts[i].context
				pts[i].context = 0
			}
		}
		coef, held := fitStepModel(pts)
		if probed {
			coef[2], held[2] = perCtx, false
			notes = append(notes, fmt.Sprintf("net of the context probe's cost (%.3g ns per token), the steps' line needs a negative base or perSeq (timings are noisy, e.g. on a shared CPU): the two fitted at least 0", perCtx*1e9))
		} else {
			notes = append(notes, fmt.Sprintf("the steps do not bear the warm-up's context cost (%.3g ns per token; its timings are noisy, e.g. on a shared CPU): base, perSeq and perContextToken fitted together over the warm-up and the steps",
				perCtx*1e9))
		}
		base, perSeq, perCtx = coef[0], coef[1], coef[2]
		for i, name := range []string{"base", "perSeq", "perContextToken"} {
			if held[i] {
				notes = append(notes, fmt.Sprintf("%s fitted as 0: its least-squares value was negative, or the points could not tell it from the others", name))
			}
		}
		if len(idle) > 0 {
			a0 = idleNet(idle, perCtx)
		}
	}
	fit.Points = [][2]float64{}
	for _, p := range line(perCtx) {
		fit.Points = append(fit.Points, [2]float64{round(p[0]), round(p[1])})
	}
	return base, perSeq, perPrefill, perCtx, notes
}

// idleNet is the idle point net of the context cost perCtx: the median of the
// warm-up's inter-token latencies less it.
func idleNet(idle []stepPoint, perCtx float64) float64 {
	net := make([]float64, len(idle))
	for i, p := range idle {
		net[i] = p.seconds - perCtx*p.context
	}
	return median(net)
}

// stepPoint is one observation of an engine step: running requests, the
// context tokens they hold, and the step's time in seconds net of its prefill
// cost.
type stepPoint struct{ running, context, seconds float64 }

// fitStepModel fits seconds = c[0] + c[1] × running + c[2] × context to pts by
// least squares with every coefficient at least 0 (non-negative least squares,
// exactly, by trying each set of free coefficients: the optimum is the
// unconstrained fit on its free set, so the feasible fit with the least squared
// error is it). held reports the coefficients the constraint holds at 0. With
// no point, or none that can be solved, every coefficient is 0 and held.
func fitStepModel(pts []stepPoint) (c [3]float64, held [3]bool) {
	best, nfree := math.Inf(1), 0
	held = [3]bool{true, true, true}
	for free := 1; free < 8; free++ {
		var idx []int
		for j := range 3 {
			if free&(1<<j) != 0 {
				idx = append(idx, j)
			}
		}
		sol, ok := leastSquares(pts, idx)
		if !ok {
			continue
		}
		var cand [3]float64
		feasible := true
		for k, j := range idx {
			cand[j] = sol[k]
			feasible = feasible && sol[k] >= 0
		}
		if !feasible {
			continue
		}
		var sse float64
		for _, p := range pts {
			e := p.seconds - cand[0] - cand[1]*p.running - cand[2]*p.context
			sse += e * e
		}
		// A tie (a fit as good with fewer coefficients) keeps the larger set:
		// a coefficient is held at 0 only when the constraint binds.
		if sse < best*(1-1e-9) || (sse <= best*(1+1e-9) && len(idx) > nfree) {
			best, nfree, c = sse, len(idx), cand
			held = [3]bool{true, true, true}
			for _, j := range idx {
				held[j] = false
			}
		}
	}
	return c, held
}

// leastSquares solves the normal equations of seconds against the regressors
// idx of (1, running, context) over pts; false when they are singular (fewer
// points than unknowns, or a regressor that does not vary independently).
func leastSquares(pts []stepPoint, idx []int) ([]float64, bool) {
	n := len(idx)
	if len(pts) < n {
		return nil, false
	}
	x := func(p stepPoint, j int) float64 {
		switch j {
		case 1:
			return p.running
		case 2:
			return p.context
		}
		return 1
	}
	// Columns scaled to unit size, so that the singularity test does not
	// depend on their units (context tokens are thousands, the intercept 1).
	scale := make([]float64, n)
	for k, j := range idx {
		for _, p := range pts {
			scale[k] = math.Max(scale[k], math.Abs(x(p, j)))
		}
		if scale[k] == 0 {
			return nil, false
		}
	}
	a := make([][]float64, n)
	for r := range a {
		a[r] = make([]float64, n+1)
		for c := range n {
			for _, p := range pts {
				a[r][c] += x(p, idx[r]) / scale[r] * x(p, idx[c]) / scale[c]
			}
		}
		for _, p := range pts {
			a[r][n] += x(p, idx[r]) / scale[r] * p.seconds
		}
	}
	// Gaussian elimination with partial pivoting.
	for col := range n {
		piv := col
		for r := col + 1; r < n; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[piv][col]) {
				piv = r
			}
		}
		if math.Abs(a[piv][col]) < 1e-9*float64(len(pts)) {
			return nil, false
		}
		a[col], a[piv] = a[piv], a[col]
		for r := range n {
			if r == col {
				continue
			}
			f := a[r][col] / a[col][col]
			for c := col; c <= n; c++ {
				a[r][c] -= f * a[col][c]
			}
		}
	}
	sol := make([]float64, n)
	for k := range n {
		sol[k] = a[k][n] / a[k][k] / scale[k]
	}
	return sol, true
}

// idleWarmup returns the warm-up requests that got a first token, less the
// first (it may pay compilation and connection set-up) when there are more.
func (r *runner) idleWarmup() []*record {
	var warm []*record
	for _, rec := range r.records {
		if rec.step == stepWarmup && rec.err == nil && rec.first >= 0 {
			warm = append(warm, rec)
		}
	}
	if len(warm) > 1 {
		warm = warm[1:]
	}
	return warm
}

// fitIdle reads the warm-up: one point per request that generated two tokens
// or more (running 1, the context it held on average, its inter-token
// latency); a0 and perCtx, the intercept and slope of a line over them when
// their contexts varied (else their median and 0); perPrefill, the median TTFT
// net of a0 per prompt token of the one-chunk prompts. It records the idle
// medians in fit and returns notes on what it could not observe.
func (r *runner) fitIdle(fit *Fit) (pts []stepPoint, a0, perCtx, perPrefill float64, notes []string) {
	var alone [][2]float64 // (context, ITL)
	var ttfts [][2]float64 // (prompt, TTFT)
	var idleTTFT []float64
	for _, rec := range r.idleWarmup() {
		d, _ := rec.ttft()
		idleTTFT = append(idleTTFT, d.Seconds())
		if rec.tokens >= 2 && rec.last > rec.first {
			itl := (rec.last - rec.first).Seconds() / float64(rec.tokens-1)
			// A request's k-th decode reads its prompt and k-1 outputs: P + n/2 on average.
			ctx := float64(rec.prompt) + float64(rec.tokens)/2
			alone = append(alone, [2]float64{ctx, itl})
			pts = append(pts, stepPoint{running: 1, context: ctx, seconds: itl})
		}
		if rec.prompt > 0 && rec.prompt <= emulator.DefaultConfig().MaxNumBatchedTokens {
			ttfts = append(ttfts, [2]float64{float64(rec.prompt), d.Seconds()})
		}
	}
	fit.IdleTTFTSeconds = round(median(idleTTFT))
	if len(alone) == 0 {
		notes = append(notes, "no warm-up request generated two tokens: the idle inter-token latency is unknown (use an output of 2 tokens or more)")
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range alone {
		lo, hi = math.Min(lo, p[0]), math.Max(hi, p[0])
	}
	if len(alone) > 1 && hi > 1.5*lo {
		a0, perCtx = lineFit(alone)
		if perCtx < 0 {
			notes = append(notes, fmt.Sprintf("the inter-token latency alone fell as the context grew (slope %.3gs per token): perContextToken set to 0", perCtx))
			perCtx = 0
			a0 = idleNet(pts, 0) // the median of the same latencies
		}
	} else {
		a0 = idleNet(pts, 0) // the median of the same latencies
		if len(alone) > 0 {
			notes = append(notes, "the warm-up's contexts did not vary: perContextToken is not observed (0 written)")
		}
	}
	fit.IdleInterTokenLatencySeconds = round(a0)
	var perToken []float64
	for _, p := range ttfts {
		perToken = append(perToken, math.Max(0, p[1]-a0)/p[0])
	}
	return pts, a0, perCtx, median(perToken), notes
}

// loadPoints returns one point per passing step: its mean running requests,
// the context they hold and its engine step time net of its prefill cost
// (perPrefill × prefill tokens per engine step).
//
// Under load, per step, τ = base + perSeq × b + perPrefill × x + perCtx × C
// with x the prefill tokens per engine step and C the context the running
// requests hold (each request holds its prompt and, on average, half its
// output, weighted by the steps it runs: its output tokens).
func (r *runner) loadPoints(steps []StepReport, perPrefill float64) []stepPoint {
	var pts []stepPoint
	for i, s := range steps {
		// An overloaded step's requests run on into the next step, at another
		// batch than the one its gauges saw: only passing steps are points.
		// In a passing step the engine is steady: it generates the step's rate
		// × mean output tokens per second, one per running request per engine
		// step, so an engine step lasts running / (rate × mean output). (The
		// requests' own inter-token latency would also count the tokens they
		// generate after the step, at the next step's load.)
		// With vllm:iteration_tokens_total the engine counts its steps and
		// their tokens itself: the step time and the prefill tokens per step
		// (tokens per step less one decode per running request) are measured.
		out := r.meanOutput(i)
		if !s.Pass || s.Running == nil || s.Running.Mean <= 0 || out <= 0 {
			continue
		}
		tau := s.Running.Mean / (s.RateRequestsPerSecond * out)
		x := s.PrefillTokensPerSecond * tau
		if s.EngineStepSeconds != nil {
			tau, x = *s.EngineStepSeconds, math.Max(0, *s.TokensPerEngineStep-s.Running.Mean)
		}
		pts = append(pts, stepPoint{running: s.Running.Mean, context: s.Running.Mean * r.heldContext(i), seconds: tau - x*perPrefill})
	}
	return pts
}

// meanOutput is the mean output tokens of step i's requests.
func (r *runner) meanOutput(i int) float64 {
	var sum, n float64
	for _, rec := range r.records {
		if rec.step == i && rec.err == nil && rec.tokens > 0 {
			sum += float64(rec.tokens)
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / n
}

// heldContext is the mean context a running request of step i holds: its
// prompt and half its output, weighted by its output (the steps it runs).
func (r *runner) heldContext(i int) float64 {
	var num, den float64
	for _, rec := range r.records {
		if rec.step == i && rec.err == nil && rec.tokens > 0 {
			o := float64(rec.tokens)
			num += (float64(rec.prompt) + o/2) * o
			den += o
		}
	}
	if den == 0 {
		return 0
	}
	return num / den
}

// estimateBlocks estimates num_gpu_blocks from the steps' mean KV usage and
// running requests: a running request holds its prompt and, on average, half its
// output, rounded up to blocks (half a block on average), plus the reserved null
// block: used ≈ running × ((prompt + output/2) / blockSize + 1/2) + 1 and
// usage = used / numGPUBlocks (lab/emulator's accounting, after vLLM V1's
// BlockPool). It fits numGPUBlocks by least squares through the origin.
func (r *runner) estimateBlocks(steps []StepReport, blockSize int) (int, bool) {
	var prompt, output float64
	n := 0
	for _, rec := range r.records {
		if rec.step >= 0 && rec.err == nil {
			prompt += float64(rec.prompt)
			output += float64(rec.tokens)
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	perReq := (prompt/float64(n)+output/float64(n)/2)/float64(blockSize) + 0.5
	var suk, skk float64
	for _, s := range steps {
		if s.KVCacheUsage == nil || s.Running == nil || s.KVCacheUsage.Mean < 0.01 {
			continue
		}
		used := s.Running.Mean*perReq + 1
		suk += used * s.KVCacheUsage.Mean
		skk += s.KVCacheUsage.Mean * s.KVCacheUsage.Mean
	}
	if skk == 0 {
		return 0, false
	}
	return max(2, int(math.Round(suk/skk))), true
}

// roundDuration rounds seconds to a duration of 4 significant digits (at
// least 1 ns when positive; 0 for NaN; the longest duration past it).
func roundDuration(sec float64) time.Duration {
	switch {
	case !(sec > 0): // NaN too
		return 0
	case sec >= float64(math.MaxInt64)/float64(time.Second):
		// Saturated, not wrapped to a negative duration: the profile's
		// bounds then refuse it by name.
		return time.Duration(math.MaxInt64)
	}
	return max(time.Nanosecond, time.Duration(math.Round(round(sec)*float64(time.Second))))
}
