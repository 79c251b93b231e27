package calibrate

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
)

// Fit is how the engine profile was obtained: the measurements behind each field.
type Fit struct {
	// IdleTTFTSeconds and IdleInterTokenLatencySeconds are the warm-up's medians:
	// a request alone on an idle engine.
	IdleTTFTSeconds              float64 `json:"idleTTFTSeconds"`
	IdleInterTokenLatencySeconds float64 `json:"idleInterTokenLatencySeconds"`
	// Points are the (mean running requests, step time net of prefill, seconds)
	// pairs the line Base + PerSeq × running was fitted to: the idle point first,
	// then one per step.
	Points [][2]float64 `json:"points"`
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
// the warm-up records, the steps and the samples. It returns the configuration,
// how each part was obtained and notes on what could not be observed.
func (r *runner) fitProfile(steps []StepReport) (emulator.Config, Fit, []string) {
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
	notes = append(notes, r.fitMaxNumSeqs(&cfg, &fit)...)
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
func (r *runner) fitMaxNumSeqs(cfg *emulator.Config, fit *Fit) []string {
	var waitingRunning []float64
	var maxRunning, kvAtMax float64
	for _, s := range r.samples {
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
	for _, s := range r.samples {
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
// documentation): alone on the idle engine, the warm-up's inter-token latency
// against the context its request holds gives Base + PerSeq (the intercept) and
// PerContextToken (the slope), its TTFT of a one-chunk prompt PerPrefillToken;
// under load, each step's mean inter-token latency net of its prefill and
// context costs against its mean running requests gives Base and PerSeq (a
// line through the idle point and the steps).
func (r *runner) fitStepTime(steps []StepReport, fit *Fit) (base, perSeq, perPrefill, perCtx float64, notes []string) {
	a0, perCtx, perPrefill, notes := r.fitIdle(fit)
	pts := r.loadPoints(steps, a0, perPrefill, perCtx)
	fit.Points = pts
	base, perSeq = lineFit(pts)
	if perSeq < 0 {
		notes = append(notes, fmt.Sprintf("step time fell as the batch grew (slope %.3gs per request): perSeq set to 0", perSeq))
		perSeq, base = 0, median(column(pts, 1))
	}
	if base < 0 {
		// Through the origin instead.
		var sxy, sxx float64
		for _, p := range pts {
			sxy += p[0] * p[1]
			sxx += p[0] * p[0]
		}
		base, perSeq = 0, math.Max(0, sxy/math.Max(sxx, 1e-12))
	}
	return base, perSeq, perPrefill, perCtx, notes
}

// idleWarmup returns the warm-up requests that got a first token, less the
// first (it may pay compilation and connection set-up) when there are more.
func (r *runner) idleWarmup() []*record {
	var warm []*record
	for _, rec := range r.records {
		if rec.step < 0 && rec.err == nil && rec.first >= 0 {
			warm = append(warm, rec)
		}
	}
	if len(warm) > 1 {
		warm = warm[1:]
	}
	return warm
}

// fitIdle fits the idle engine from the warm-up: a0 is the inter-token latency
// of a request alone (Base + PerSeq) and perCtx its slope over the context the
// request holds, when the contexts varied enough; perPrefill is the median
// TTFT net of a0 per prompt token of the one-chunk prompts. It records the idle
// medians in fit and returns notes on what it could not observe.
func (r *runner) fitIdle(fit *Fit) (a0, perCtx, perPrefill float64, notes []string) {
	var alone, ttfts [][2]float64 // (context, ITL), (prompt, TTFT)
	var idleTTFT []float64
	for _, rec := range r.idleWarmup() {
		d, _ := rec.ttft()
		idleTTFT = append(idleTTFT, d.Seconds())
		if rec.tokens >= 2 && rec.last > rec.first {
			itl := (rec.last - rec.first).Seconds() / float64(rec.tokens-1)
			// A request's k-th decode reads its prompt and k-1 outputs: P + n/2 on average.
			alone = append(alone, [2]float64{float64(rec.prompt) + float64(rec.tokens)/2, itl})
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
			a0 = median(column(alone, 1))
		}
	} else {
		a0 = median(column(alone, 1))
		if len(alone) > 0 {
			notes = append(notes, "the warm-up's contexts did not vary: perContextToken is not observed (0 written)")
		}
	}
	fit.IdleInterTokenLatencySeconds = round(a0)
	var perToken []float64
	for _, p := range ttfts {
		perToken = append(perToken, math.Max(0, p[1]-a0)/p[0])
	}
	return a0, perCtx, median(perToken), notes
}

// loadPoints returns the (mean running requests, step time net of prefill and
// context costs) points the line Base + PerSeq × running is fitted to: the idle
// point (1, a0) when a0 > 0, then one per passing step.
//
// Under load, per step, τ = base + perSeq × b + perPrefill × x + perCtx × C
// with x the prefill tokens per engine step and C the context the running
// requests hold (each request holds its prompt and, on average, half its
// output, weighted by the steps it runs: its output tokens).
func (r *runner) loadPoints(steps []StepReport, a0, perPrefill, perCtx float64) [][2]float64 {
	pts := [][2]float64{}
	if a0 > 0 {
		pts = append(pts, [2]float64{1, a0})
	}
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
		ctx := s.Running.Mean * r.heldContext(i)
		pts = append(pts, [2]float64{round(s.Running.Mean), round(tau - x*perPrefill - ctx*perCtx)})
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

func column(pts [][2]float64, j int) []float64 {
	out := make([]float64, len(pts))
	for i, p := range pts {
		out[i] = p[j]
	}
	return out
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
// least 1 ns when positive).
func roundDuration(sec float64) time.Duration {
	if sec <= 0 {
		return 0
	}
	return max(time.Nanosecond, time.Duration(math.Round(round(sec)*float64(time.Second))))
}
