// Package scrape fetches engines' /metrics endpoints over HTTP, turns each body
// into a signals.Reading and keeps the latest result per pod.
package scrape

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/saturation-adapter/saturation-adapter/pkg/selfmetrics"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// Target is one pod to scrape.
type Target struct {
	// Key identifies the pod.
	Key types.NamespacedName
	// URL is the pod's /metrics address, built from the pod (never from a request).
	URL string
}

// Result is the latest known state of one target.
type Result struct {
	// Reading is the last successfully extracted reading; nil if none yet.
	Reading *signals.Reading
	// Fusion is the saturation of Reading, computed once per scrape with
	// Options.Targets rather than once per request.
	Fusion signals.Fusion
	// Time is when Reading was taken (the response arrived).
	Time time.Time
	// Err is the error of the last attempt, nil when it succeeded. A failed
	// attempt keeps the previous Reading: it ages out by its Time.
	Err error
	// ErrTime is when the last failed attempt ended.
	ErrTime time.Time
}

// Options bound each scrape.
type Options struct {
	// Timeout is the whole-request deadline of one scrape.
	Timeout time.Duration
	// MaxBodyBytes is the largest body accepted; a larger one is an error.
	MaxBodyBytes int64
	// Concurrency is the number of scrapes in flight at once.
	Concurrency int
	// Targets are the fusion set points applied to each reading.
	Targets signals.Targets
}

// Scraper scrapes targets and stores their results. It is safe for concurrent use.
type Scraper struct {
	opts      Options
	client    *http.Client
	extractor *signals.Extractor
	clock     clock.PassiveClock
	metrics   *selfmetrics.Metrics

	bufs sync.Pool // *bytes.Buffer
	// sem bounds scrapes in flight across every caller (the periodic loop and
	// on-demand scrapes of requests) to Options.Concurrency.
	sem chan struct{}

	mu      sync.RWMutex
	results map[types.NamespacedName]*Result
}

// New returns a Scraper. client must be safe for concurrent use; NewHTTPClient
// gives one tuned for many keep-alive targets.
func New(opts Options, client *http.Client, extractor *signals.Extractor, clk clock.PassiveClock, metrics *selfmetrics.Metrics) *Scraper {
	return &Scraper{
		opts: opts, client: client, extractor: extractor, clock: clk, metrics: metrics,
		bufs:    sync.Pool{New: func() any { return new(bytes.Buffer) }},
		sem:     make(chan struct{}, max(1, opts.Concurrency)),
		results: map[types.NamespacedName]*Result{},
	}
}

// NewHTTPClient returns a client that keeps idle connections to every pod open
// between scrapes (the default transport keeps only 100 idle connections in all,
// so a thousand pods would reconnect on every scrape), and never follows
// redirects: a /metrics endpoint that redirects is misconfigured, and following it
// would let a pod point the adapter at another address. tlsConfig verifies
// https engines; nil means the system roots with the pod IP as the server name.
func NewHTTPClient(timeout time.Duration, tlsConfig *tls.Config) *http.Client {
	t := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tlsConfig,
		MaxIdleConns:        0, // no limit across hosts
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
	}
	return &http.Client{
		Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// Latest returns the stored result for a pod key. Results are immutable once
// stored (a scrape stores a new one), so the pointer may be kept and read freely.
func (s *Scraper) Latest(key types.NamespacedName) (*Result, bool) {
	s.mu.RLock()
	r, ok := s.results[key]
	s.mu.RUnlock()
	return r, ok
}

// ScrapeAll scrapes every target, with at most Options.Concurrency scrapes in
// flight across all callers, and stores the results. With prune, targets is the
// whole scrape set: results of other pods are forgotten and the scrape-targets
// gauge is set. It returns when every scrape has finished.
func (s *Scraper) ScrapeAll(ctx context.Context, targets []Target, prune bool) {
	var wg sync.WaitGroup
	for _, t := range targets {
		// select picks at random among ready cases: check cancellation first so a
		// stopped adapter starts no new scrape (which would be stored as an error).
		if ctx.Err() != nil {
			wg.Wait()
			return
		}
		select {
		case s.sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer func() { <-s.sem; wg.Done() }()
			s.ScrapeOne(ctx, t)
		}()
	}
	wg.Wait()
	if prune {
		keep := make(map[types.NamespacedName]struct{}, len(targets))
		for _, t := range targets {
			keep[t.Key] = struct{}{}
		}
		s.mu.Lock()
		for k := range s.results {
			if _, ok := keep[k]; !ok {
				delete(s.results, k)
			}
		}
		s.mu.Unlock()
		s.metrics.ScrapeTargets.Set(float64(len(targets)))
	}
}

// Run scrapes the targets returned by targets every interval until ctx is done.
func (s *Scraper) Run(ctx context.Context, interval time.Duration, targets func() []Target) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		s.ScrapeAll(ctx, targets(), true)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// ScrapeOne scrapes one target, stores and returns its result. When ctx ends
// first, nothing is stored and the previous result (possibly nil) is returned.
func (s *Scraper) ScrapeOne(ctx context.Context, t Target) *Result {
	start := s.clock.Now()
	reading, reason, err := s.fetch(ctx, t.URL)
	now := s.clock.Now()
	if err != nil && ctx.Err() != nil {
		// The caller gave up (shutdown, or a request's cold-scrape budget): that says
		// nothing about the pod, so nothing is stored or counted.
		r, _ := s.Latest(t.Key)
		return r
	}

	var fusion signals.Fusion
	if err == nil {
		fusion = signals.Fuse(reading, s.opts.Targets)
	}
	s.mu.Lock()
	r := &Result{}
	if prev, ok := s.results[t.Key]; ok {
		*r = *prev
	}
	if err != nil {
		r.Err, r.ErrTime = err, now
	} else {
		r.Reading, r.Fusion, r.Time, r.Err = reading, fusion, now, nil
	}
	s.results[t.Key] = r
	s.mu.Unlock()

	if err != nil {
		s.metrics.ScrapeDuration.WithLabelValues("error").Observe(now.Sub(start).Seconds())
		s.metrics.ScrapeErrors.WithLabelValues(reason).Inc()
		klog.V(4).InfoS("scrape failed", "pod", t.Key.String(), "url", t.URL, "reason", reason, "err", err)
	} else {
		s.metrics.ScrapeDuration.WithLabelValues("success").Observe(now.Sub(start).Seconds())
		for why, n := range reading.Invalid {
			s.metrics.InvalidSamples.WithLabelValues(string(why)).Add(float64(n))
		}
		if len(reading.Warnings) > 0 {
			klog.V(2).InfoS("engine reported unusable series", "pod", t.Key.String(), "warnings", reading.Warnings)
		}
	}
	return r
}

// fetch GETs one /metrics body and extracts it. On error it returns the reason
// label for the scrape-errors counter.
func (s *Scraper) fetch(ctx context.Context, url string) (*signals.Reading, string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, "request", fmt.Errorf("building request for %s: %w", url, err)
	}
	// Ask for the text format explicitly: protobuf or OpenMetrics would need
	// another parser.
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	resp, err := s.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, "timeout", fmt.Errorf("GET %s: timed out after %s", url, s.opts.Timeout)
		}
		return nil, "connect", fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Drain a little so the connection can be reused.
		_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
		return nil, "http_status", fmt.Errorf("GET %s: HTTP %s", url, resp.Status)
	}

	buf := s.bufs.Get().(*bytes.Buffer)
	defer s.bufs.Put(buf)
	buf.Reset()
	n, err := buf.ReadFrom(io.LimitReader(resp.Body, s.opts.MaxBodyBytes+1))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, "timeout", fmt.Errorf("reading %s: timed out after %s", url, s.opts.Timeout)
		}
		return nil, "read", fmt.Errorf("reading %s: %w", url, err)
	}
	if n > s.opts.MaxBodyBytes {
		return nil, "body_too_large", fmt.Errorf("reading %s: body exceeds %d bytes", url, s.opts.MaxBodyBytes)
	}
	// The parser needs a final newline; adding it here reuses the pooled buffer
	// instead of letting the parser copy the body.
	body := buf.Bytes()
	if len(body) > 0 && body[len(body)-1] != '\n' {
		buf.WriteByte('\n')
		body = buf.Bytes()
	}
	reading, err := s.extractor.Extract(body)
	if err != nil {
		reason := "parse"
		if errors.Is(err, signals.ErrNoEngineMetrics) {
			reason = "no_engine_metrics"
		}
		return nil, reason, fmt.Errorf("reading %s: %w", url, err)
	}
	return &reading, "", nil
}
