// Package scrape fetches engines' /metrics endpoints over HTTP, turns each body
// into a signals.Reading and keeps each pod's recent readings as a
// history.History. Each pod is scraped on its own schedule with its own backoff
// (schedule.go), and the scrape capacity is shared fairly between namespaces and
// pools (fair.go). It moves bytes and stores readings; what they mean (scores,
// states, pools) is pkg/signals' job.
package scrape

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	promconfig "github.com/prometheus/common/config"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/saturation-adapter/saturation-adapter/internal/excerpt"
	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// Target is one pod to scrape.
type Target struct {
	// Pod names the pod, for logs and messages.
	Pod types.NamespacedName
	// UID keys the pod's results: a pod re-created under the same name is a new
	// pod and never inherits its predecessor's reading.
	UID types.UID
	// URL is the pod's /metrics address, built from the pod (never from a request).
	URL string
	// Pool is an opaque key of the pool (a selector in the pod's namespace) the
	// pod was selected for: scrape capacity is shared fairly between the pools of
	// a namespace, as between namespaces. Pods with the same key share a queue.
	Pool string
	// BearerTokenFile, when set, is read on every scrape (prometheus/common's
	// FileSecret, so a rotated token is picked up) and sent as
	// "Authorization: Bearer <token>" (a gateway input's endpoint picker).
	BearerTokenFile string
}

// Result is the latest known state of one target.
type Result struct {
	// History holds the successful readings, newest last; nil if none yet. A
	// failed attempt keeps it: its newest reading ages out by its time.
	History *history.History
	// Time is when the newest reading was taken (the response arrived).
	Time time.Time
	// Err is the error of the last attempt, nil when it succeeded.
	Err error
	// ErrTime is when the last failed attempt ended.
	ErrTime time.Time
}

// Reading returns the newest successful reading, nil if none.
func (r *Result) Reading() *signals.Reading { return r.History.Latest() }

// Reader is how bodies become readings: the extractor (which families it
// reads) and what each pod's History keeps. Both follow the metric catalog, so
// a configuration reload replaces the Reader.
type Reader struct {
	Extractor *signals.Extractor
	History   history.HistoryOptions
}

// Options bound each scrape.
type Options struct {
	// Timeout is the whole-request deadline of one scrape.
	Timeout time.Duration
	// MaxBodyBytes is the largest body accepted; a larger one is an error.
	MaxBodyBytes int64
	// Concurrency is the number of scrapes in flight at once, scheduled and
	// on-demand together, shared fairly between namespaces (see Run).
	Concurrency int
	// InflightBytes bounds what the scrapes in flight hold while they read
	// and extract bodies (inflightFactor bytes per byte of body), a
	// namespace at most a quarter of it: a scrape waits for room, within its
	// timeout. DefaultInflightBytes when 0.
	InflightBytes int64
	// ReadingsBytes bounds what each namespace's kept readings hold
	// (Footprint of every pod's History): a pod whose new reading would take
	// its namespace past it is not stored (ReasonOverBudget).
	// DefaultReadingsBytes when 0.
	ReadingsBytes int64
}

// maxPooledBuffer is the largest body buffer kept for reuse: a pod's huge
// body must not stay in memory once read.
const maxPooledBuffer = 1 << 20

// Scraper scrapes targets and stores their results. It is safe for concurrent use.
type Scraper struct {
	opts    Options
	client  *http.Client
	reader  atomic.Pointer[Reader]
	clock   clock.WithTicker
	metrics *Metrics

	bufs sync.Pool // *bytes.Buffer
	// budget bounds the bytes of readings, in flight and kept.
	budget *budget
	// dispatch bounds scrapes in flight across every caller (the schedule and
	// on-demand scrapes of requests) to Options.Concurrency, fairly.
	dispatch *dispatcher
	sched    schedule
	// scrapeFn is ScrapeOne; tests of the schedule replace it.
	scrapeFn func(context.Context, Target) *Result

	// stored holds the functions told about each result stored (OnStore).
	storedMu sync.Mutex
	stored   atomic.Pointer[[]func(pod types.NamespacedName, uid types.UID)]

	mu      sync.RWMutex
	results map[types.UID]*Result
	// base is the context scrapes run with: Run's, else Background.
	base context.Context
}

// New returns a Scraper reading bodies with reader. client must be safe for
// concurrent use; NewHTTPClient gives the one the adapter uses. clk timestamps
// readings and drives the schedule's timers.
func New(opts Options, client *http.Client, reader Reader, clk clock.WithTicker, metrics *Metrics) *Scraper {
	s := &Scraper{
		opts: opts, client: client, clock: clk, metrics: metrics,
		bufs:    sync.Pool{New: func() any { return new(bytes.Buffer) }},
		budget:  newBudget(opts.InflightBytes, opts.ReadingsBytes),
		results: map[types.UID]*Result{},
		base:    context.Background(),
	}
	s.SetReader(reader)
	s.scrapeFn = s.ScrapeOne
	s.dispatch = newDispatcher(opts.Concurrency, s.run)
	s.sched.entries = map[types.UID]*entry{}
	s.sched.wake = make(chan struct{}, 1)
	return s
}

// SetReader replaces how bodies become readings, from the next scrape on (a
// metric catalog reload). Histories already kept stay as they are.
func (s *Scraper) SetReader(r Reader) { s.reader.Store(&r) }

// NewHTTPClient returns the client engines are scraped with: a net/http
// Transport with Prometheus's own scrape client settings
// (github.com/prometheus/common/config), so TLS settings mean what they mean
// in a Prometheus scrape config and a CA file is re-read when it changes (the
// round tripper compares its hash on each request), with smaller
// per-connection buffers and no dial tracing (see newRoundTripper). It never
// follows redirects: a /metrics endpoint that redirects is misconfigured, and
// following it would let a pod point the adapter at another address. It keeps
// idle connections to every pod open between scrapes (up to two per pod,
// 20,000 in all; idle ones are closed after 90 s) and uses no proxy from the
// environment. Errors name the invalid TLS setting.
func NewHTTPClient(tlsConfig promconfig.TLSConfig) (*http.Client, error) {
	cfg := promconfig.HTTPClientConfig{TLSConfig: tlsConfig, FollowRedirects: false, EnableHTTP2: false}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("scrape TLS settings: %w", err)
	}
	rt, err := newRoundTripper(tlsConfig)
	if err != nil {
		return nil, fmt.Errorf("scrape TLS settings: %w", err)
	}
	return &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, nil
}

// userAgent is the User-Agent of every scrape.
const userAgent = "saturation-adapter"

// OnStore registers fn, called after each result is stored (a scrape that
// succeeded or failed), with the pod, from the scrape's goroutine: fn must
// not block.
func (s *Scraper) OnStore(fn func(pod types.NamespacedName, uid types.UID)) {
	s.storedMu.Lock()
	defer s.storedMu.Unlock()
	var fns []func(types.NamespacedName, types.UID)
	if old := s.stored.Load(); old != nil {
		fns = append(fns, *old...)
	}
	fns = append(fns, fn)
	s.stored.Store(&fns)
}

// Latest returns the stored result for a pod. Results are immutable once
// stored (a scrape stores a new one), so the pointer may be kept and read freely.
func (s *Scraper) Latest(uid types.UID) (*Result, bool) {
	s.mu.RLock()
	r, ok := s.results[uid]
	s.mu.RUnlock()
	return r, ok
}

// ScrapeOne scrapes one target, stores and returns its result. When ctx ends
// first, nothing is stored and the previous result (possibly nil) is returned.
// A failure is stored as an *Error: a reason and a short detail without the
// pod's address (the full error is logged at -v=4).
func (s *Scraper) ScrapeOne(ctx context.Context, t Target) *Result {
	start := s.clock.Now()
	rd := s.reader.Load()
	reading, err := s.fetch(ctx, t, rd.Extractor)
	now := s.clock.Now()
	if err != nil && ctx.Err() != nil {
		// The caller gave up (shutdown, or a request's cold-scrape budget): that says
		// nothing about the pod, so nothing is stored or counted.
		r, _ := s.Latest(t.UID)
		return r
	}

	s.mu.Lock()
	r := &Result{}
	if prev, ok := s.results[t.UID]; ok {
		*r = *prev
	}
	if err == nil {
		reading.Time = now
		h := r.History.Append(reading, rd.History)
		if berr := s.budget.keep(t.UID, t.Pod.Namespace, Footprint(h)); berr != nil {
			err = newError(ReasonOverBudget, "the namespace's readings are over their byte budget", berr)
		} else {
			r.History, r.Time = h, now
		}
	}
	if err != nil {
		r.Err, r.ErrTime = err.stored(), now
	} else {
		r.Err = nil
	}
	s.results[t.UID] = r
	s.mu.Unlock()
	if fns := s.stored.Load(); fns != nil {
		for _, fn := range *fns {
			fn(t.Pod, t.UID)
		}
	}

	if err != nil {
		s.metrics.observe(OutcomeError, now.Sub(start).Seconds())
		s.metrics.failed(err.Reason)
		klog.V(4).InfoS("Scrape failed", "pod", t.Pod, "url", t.URL, "reason", err.Reason, "err", excerpt.String(err.cause.Error(), maxLoggedErrorBytes))
	} else {
		s.metrics.observe(OutcomeSuccess, now.Sub(start).Seconds())
		s.metrics.Count(reading)
		if len(reading.Warnings) > 0 {
			klog.V(2).InfoS("Engine reported unusable series", "pod", t.Pod, "warnings", loggedWarnings(reading.Warnings))
		}
	}
	return r
}

// maxLoggedErrorBytes bounds the error text of a failed scrape in the log.
const maxLoggedErrorBytes = 1024

// loggedWarnings returns excerpts of a reading's warnings for the log: a pod
// controls their text (label values), so each is cut to 256 bytes.
func loggedWarnings(warnings []string) []string {
	out := make([]string, len(warnings))
	for i, w := range warnings {
		out[i] = excerpt.String(w, 256)
	}
	return out
}

// fetch GETs one /metrics body and extracts it. Its error says what callers
// may see and keeps the full error (with the URL) for the log.
func (s *Scraper) fetch(ctx context.Context, t Target, extractor *signals.Extractor) (*signals.Reading, *Error) {
	url := t.URL
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, newError(ReasonRequest, "invalid scrape URL", fmt.Errorf("building request for %s: %w", url, err))
	}
	if t.BearerTokenFile != "" {
		tok, err := promconfig.NewFileSecret(t.BearerTokenFile).Fetch(ctx)
		if err != nil || tok == "" {
			if err == nil {
				err = errors.New("empty")
			}
			return nil, newError(ReasonRequest, "the bearer token file cannot be read", fmt.Errorf("bearer token file %s: %w", t.BearerTokenFile, err))
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	// The text format first, OpenMetrics next (engines serve one or the
	// other; the extractor reads both); never protobuf.
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1")
	req.Header.Set("User-Agent", userAgent)
	resp, err := s.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, newError(ReasonTimeout, fmt.Sprintf("timed out after %s", s.opts.Timeout), fmt.Errorf("GET %s: timed out after %s", url, s.opts.Timeout))
		}
		return nil, newError(ReasonConnect, connectDetail(err), fmt.Errorf("GET %s: %w", url, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Read a little: it tells llama.cpp's "model is not loaded" apart, and
		// the connection can be reused.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxStatusBodyBytes))
		if e := notLoadedError(resp, body, url); e != nil {
			return nil, e
		}
		return nil, statusError(resp, url)
	}

	// What this scrape holds while it reads and extracts is bounded
	// (Options.InflightBytes): it waits for room, within its timeout.
	h := &hold{b: s.budget, namespace: t.Pod.Namespace}
	defer h.release()
	if err := h.acquire(ctx, max(minInflight, inflightFactor*min(resp.ContentLength, s.opts.MaxBodyBytes))); err != nil {
		return nil, newError(ReasonTimeout, fmt.Sprintf("timed out after %s waiting for the scrapes' memory bound", s.opts.Timeout), fmt.Errorf("reading %s: %w", url, err))
	}
	buf := s.bufs.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBuffer {
			s.bufs.Put(buf)
		}
	}()
	buf.Reset()
	n, err := buf.ReadFrom(&growingReader{r: io.LimitReader(resp.Body, s.opts.MaxBodyBytes+1), h: h})
	if err != nil {
		if errors.Is(err, errInflight) {
			return nil, newError(ReasonOverBudget, "the body is larger than the room the scrapes' memory bound leaves", fmt.Errorf("reading %s: %w", url, err))
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, newError(ReasonTimeout, fmt.Sprintf("timed out after %s", s.opts.Timeout), fmt.Errorf("reading %s: timed out after %s", url, s.opts.Timeout))
		}
		return nil, newError(ReasonRead, readDetail(err), fmt.Errorf("reading %s: %w", url, err))
	}
	if n > s.opts.MaxBodyBytes {
		return nil, newError(ReasonBodyTooLarge, fmt.Sprintf("body exceeds %d bytes", s.opts.MaxBodyBytes), fmt.Errorf("reading %s: body exceeds %d bytes", url, s.opts.MaxBodyBytes))
	}
	reading, err := extractor.ExtractContent(buf.Bytes(), resp.Header.Get("Content-Type"))
	if err != nil {
		cause := fmt.Errorf("reading %s: %w", url, err)
		switch {
		case errors.Is(err, signals.ErrNoEngineMetrics):
			return nil, newError(ReasonNoEngineMetrics, excerpt.String(err.Error(), bodyExcerptBytes), cause)
		case errors.Is(err, signals.ErrTooManySeries):
			return nil, newError(ReasonTooManySeries, excerpt.String(err.Error(), bodyExcerptBytes), cause)
		case errors.Is(err, signals.ErrTooManyEngines):
			return nil, newError(ReasonTooManyEngines, excerpt.String(err.Error(), bodyExcerptBytes), cause)
		}
		// The parser's message may quote the body: keep a short excerpt.
		return nil, newError(ReasonParse, excerpt.String(err.Error(), bodyExcerptBytes), cause)
	}
	return &reading, nil
}
