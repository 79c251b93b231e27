// Package loadgen is the gateway of the end-to-end tests: it sends OpenAI-style streaming
// completions to the Ready engine pods, least outstanding requests first, on a schedule
// (a step pattern or a time-compressed Azure trace) and records time to first token and
// end-to-end latency for every request.
package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Result is the outcome of one request.
type Result struct {
	Start    time.Time
	Endpoint string
	Request  Request
	// TTFT is the time to the first streamed token; E2E to the end of the stream.
	TTFT, E2E time.Duration
	// Wait is how long the gateway held the request because no pod was Ready.
	Wait time.Duration
	Err  error
}

// Options configure a Gateway.
type Options struct {
	// Endpoints returns the base URLs (http://ip:port) of the Ready pods; called for
	// every request.
	Endpoints func() []string
	// Model is the request's model field.
	Model string
	// MaxWait is how long a request waits for a Ready pod before failing; default 60 s.
	MaxWait time.Duration
	// Timeout bounds one request; default 5 min.
	Timeout time.Duration
	// ExtraBody fields are added to every request body (e.g. an engine's exact
	// prompt-token extension or ignore_eos).
	ExtraBody map[string]any
	// PromptTokensField, when set, names a body field given the exact prompt token count
	// (the prompt text is then short); otherwise the prompt is text of about that many
	// tokens.
	PromptTokensField string
	// OutputTokensField, when set, names a body field given the exact output length.
	OutputTokensField string
}

// Gateway sends requests and records results. It is safe for concurrent use.
type Gateway struct {
	o      Options
	client *http.Client

	mu          sync.Mutex
	outstanding map[string]int
	results     []Result
	inflight    int
	sent        int
	rr          int
}

// New returns a Gateway.
func New(o Options) *Gateway {
	if o.MaxWait == 0 {
		o.MaxWait = 60 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0, IdleConnTimeout: 30 * time.Second}
	return &Gateway{o: o, client: &http.Client{Transport: tr}, outstanding: map[string]int{}}
}

// Run sends reqs on their schedule (At relative to now) and returns when all have
// finished or ctx is done. Results accumulate across runs.
func (g *Gateway) Run(ctx context.Context, reqs []Request) {
	start := time.Now()
	var wg sync.WaitGroup
	for _, r := range reqs {
		d := time.Until(start.Add(r.At))
		if d > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return
			case <-time.After(d):
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.send(ctx, r)
		}()
	}
	wg.Wait()
}

// Inflight returns the number of requests sent and not yet finished.
func (g *Gateway) Inflight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inflight
}

// Sent returns the number of requests started so far (finished or not).
func (g *Gateway) Sent() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sent
}

// Results returns a copy of the results so far.
func (g *Gateway) Results() []Result {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Result(nil), g.results...)
}

// pick returns the Ready endpoint with the fewest outstanding requests (round-robin among
// ties) and counts the request against it.
func (g *Gateway) pick() string {
	eps := g.o.Endpoints()
	if len(eps) == 0 {
		return ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rr++
	best, bestN := "", 0
	for i := range eps {
		ep := eps[(i+g.rr)%len(eps)]
		if n := g.outstanding[ep]; best == "" || n < bestN {
			best, bestN = ep, n
		}
	}
	g.outstanding[best]++
	return best
}

func (g *Gateway) release(ep string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.outstanding[ep]--; g.outstanding[ep] <= 0 {
		delete(g.outstanding, ep)
	}
}

func (g *Gateway) send(ctx context.Context, r Request) {
	res := Result{Start: time.Now(), Request: r}
	g.mu.Lock()
	g.inflight++
	g.sent++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.inflight--
		g.results = append(g.results, res)
		g.mu.Unlock()
	}()
	// Hold the request until an endpoint is Ready, up to MaxWait.
	var ep string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, g.o.MaxWait, true, func(context.Context) (bool, error) {
		ep = g.pick()
		return ep != "", nil
	})
	switch {
	case ctx.Err() != nil:
		res.Err = ctx.Err()
		return
	case err != nil:
		res.Err = errors.New("no Ready endpoint")
		return
	}
	defer g.release(ep)
	res.Endpoint = ep
	res.Wait = time.Since(res.Start)
	res.TTFT, res.E2E, res.Err = g.complete(ctx, ep, r)
	res.TTFT += res.Wait
	res.E2E += res.Wait
}

// complete sends one streaming completion and measures it from the moment it is sent.
func (g *Gateway) complete(ctx context.Context, ep string, r Request) (ttft, e2e time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, g.o.Timeout)
	defer cancel()
	body := map[string]any{
		"model":      g.o.Model,
		"max_tokens": max(r.OutputTokens, 1),
		"stream":     true,
	}
	if g.o.PromptTokensField != "" {
		body["prompt"] = "emulated prompt"
		body[g.o.PromptTokensField] = max(r.PromptTokens, 1)
	} else {
		body["prompt"] = Prompt(r.PromptTokens)
	}
	if g.o.OutputTokensField != "" {
		body[g.o.OutputTokensField] = max(r.OutputTokens, 1)
	}
	for k, v := range g.o.ExtraBody {
		body[k] = v
	}
	buf, err := json.Marshal(body)
	if err != nil {
		return 0, 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep+"/v1/completions", bytes.NewReader(buf))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	sent := time.Now()
	resp, err := g.client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var msg bytes.Buffer
		_, _ = msg.ReadFrom(io.LimitReader(resp.Body, 1024))
		return 0, time.Since(sent), fmt.Errorf("%s: %s: %s", ep, resp.Status, strings.TrimSpace(msg.String()))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data:") {
			continue
		}
		if strings.TrimSpace(strings.TrimPrefix(line, "data:")) == "[DONE]" {
			break
		}
		if ttft == 0 {
			ttft = time.Since(sent)
		}
	}
	e2e = time.Since(sent)
	if err := sc.Err(); err != nil {
		return ttft, e2e, err
	}
	if ttft == 0 {
		ttft = e2e
	}
	return ttft, e2e, nil
}

// Prompt returns a prompt of roughly n tokens (one short word each).
func Prompt(n int) string {
	if n <= 0 {
		return "hi"
	}
	return strings.Repeat("tok ", n)
}

// Summary condenses results.
type Summary struct {
	Requests, Errors int
	TTFTp50, TTFTp95 time.Duration
	E2Ep50, E2Ep95   time.Duration
	FirstError       error
}

// Summarize computes a Summary over results that started at or after since (zero: all).
func Summarize(results []Result, since time.Time) Summary {
	var s Summary
	var ttft, e2e []time.Duration
	for _, r := range results {
		if r.Start.Before(since) {
			continue
		}
		s.Requests++
		if r.Err != nil {
			s.Errors++
			if s.FirstError == nil {
				s.FirstError = r.Err
			}
			continue
		}
		ttft = append(ttft, r.TTFT)
		e2e = append(e2e, r.E2E)
	}
	s.TTFTp50, s.TTFTp95 = Percentile(ttft, 0.5), Percentile(ttft, 0.95)
	s.E2Ep50, s.E2Ep95 = Percentile(e2e, 0.5), Percentile(e2e, 0.95)
	return s
}

// Percentile returns the q-quantile of ds by the nearest-rank method: the
// smallest sample such that at least a fraction q of the samples are at or
// below it (rank ceil(q·n), no interpolation; q=0 gives the minimum). 0 when ds
// is empty.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	i = min(max(i, 0), len(s)-1)
	return s[i]
}

// String formats a summary on one line.
func (s Summary) String() string {
	out := fmt.Sprintf("requests=%d errors=%d ttft p50=%s p95=%s e2e p50=%s p95=%s",
		s.Requests, s.Errors, s.TTFTp50.Round(time.Millisecond), s.TTFTp95.Round(time.Millisecond),
		s.E2Ep50.Round(time.Millisecond), s.E2Ep95.Round(time.Millisecond))
	if s.FirstError != nil {
		out += " firstError=" + s.FirstError.Error()
	}
	return out
}
