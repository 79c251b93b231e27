package scrape_test

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	promconfig "github.com/prometheus/common/config"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// vllmSample is the real vLLM V1 dump (47 KB): one engine, idle, KV-cache usage
// 0.0011764705882353343, nothing running or waiting.
const vllmSample = "samples/vllm_v1-0.10-nvcr25.09_single-engine.prom"

func readSample(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// engine is an httptest server standing in for one pod's /metrics, whose
// handler a test can swap between scrapes.
type engine struct {
	srv     *httptest.Server
	handler atomic.Pointer[http.Handler]
	hits    atomic.Int64
	newConn atomic.Int64
}

func newEngine(t *testing.T, h http.Handler) *engine {
	t.Helper()
	e := &engine{}
	e.set(h)
	e.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.hits.Add(1)
		(*e.handler.Load()).ServeHTTP(w, r)
	}))
	e.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			e.newConn.Add(1)
		}
	}
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	return e
}

func (e *engine) set(h http.Handler) { e.handler.Store(&h) }

func (e *engine) target(name string) scrape.Target {
	return scrape.Target{Pod: types.NamespacedName{Namespace: "llm", Name: name}, UID: types.UID(name), URL: e.srv.URL + "/metrics"}
}

// serve answers every request with code and body.
func serve(code int, body []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.WriteHeader(code)
		_, _ = w.Write(body)
	})
}

type fixture struct {
	scraper *scrape.Scraper
	metrics *scrape.Metrics
	reg     *prometheus.Registry
	clock   *clocktesting.FakeClock
}

func defaultOptions() scrape.Options {
	return scrape.Options{Timeout: 2 * time.Second, MaxBodyBytes: 4 << 20, Concurrency: 4}
}

func newFixture(t *testing.T, opts scrape.Options) *fixture {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := scrape.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	client := newClient(t, promconfig.TLSConfig{})
	t.Cleanup(client.CloseIdleConnections)
	return &fixture{
		scraper: scrape.New(opts, client, scrape.Reader{Extractor: signals.NewExtractor()}, clk, m),
		metrics: m, reg: reg, clock: clk,
	}
}

func newClient(t testing.TB, c promconfig.TLSConfig) *http.Client {
	t.Helper()
	client, err := scrape.NewHTTPClient(c)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// checkErrors fails unless the scrape-errors counter has exactly the wanted
// reasons, each counted once.
func (f *fixture) checkErrors(t *testing.T, reasons ...string) {
	t.Helper()
	if got := testutil.CollectAndCount(f.metrics.Errors); got != len(reasons) {
		t.Errorf("scrape_errors_total has %d reason series, want %d (%q)", got, len(reasons), reasons)
	}
	for _, r := range reasons {
		if got := testutil.ToFloat64(f.metrics.Errors.WithLabelValues(r)); got != 1 {
			t.Errorf("scrape_errors_total{reason=%q} = %g, want 1", r, got)
		}
	}
}

func TestScrapeOneSuccess(t *testing.T) {
	body := readSample(t, vllmSample)
	tests := []struct {
		name string
		body []byte
		opts func(*scrape.Options)
	}{
		{name: "real vLLM dump", body: body},
		{name: "no final newline", body: []byte(strings.TrimRight(string(body), "\n"))},
		{name: "body exactly MaxBodyBytes", body: body, opts: func(o *scrape.Options) { o.MaxBodyBytes = int64(len(body)) }},
		{
			name: "body exactly MaxBodyBytes without final newline",
			body: body[:len(body)-1],
			opts: func(o *scrape.Options) { o.MaxBodyBytes = int64(len(body) - 1) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := defaultOptions()
			if tt.opts != nil {
				tt.opts(&opts)
			}
			f := newFixture(t, opts)
			e := newEngine(t, serve(http.StatusOK, tt.body))
			target := e.target("pod-0")

			r := f.scraper.ScrapeOne(context.Background(), target)

			if r.Err != nil {
				t.Fatalf("Err = %v, want nil", r.Err)
			}
			if r.Reading() == nil {
				t.Fatal("Reading = nil, want the extracted reading")
			}
			if r.Reading().Dialect != "vllm-v1" {
				t.Errorf("Dialect = %q, want vllm-v1", r.Reading().Dialect)
			}
			const kv = 0.0011764705882353343
			if got := r.Reading().Ptr(signals.KVCacheUsage); got == nil || *got != kv {
				t.Errorf("KVCacheUsage = %v, want %g", ptrString(got), kv)
			}
			if got := r.Reading().Ptr(signals.QueueDepth); got == nil || *got != 0 {
				t.Errorf("QueueDepth = %v, want 0", ptrString(got))
			}
			// Idle (nothing running or waiting): the KV residue is not demand.
			if got, want := saturationOf(t, r.Reading()), 0.0; got == nil || math.Abs(*got-want) > 1e-15 {
				t.Errorf("saturation = %v, want %g", ptrString(got), want)
			}
			if !r.Time.Equal(f.clock.Now()) {
				t.Errorf("Time = %v, want %v", r.Time, f.clock.Now())
			}
			if !r.ErrTime.IsZero() {
				t.Errorf("ErrTime = %v, want zero", r.ErrTime)
			}
			if got, ok := f.scraper.Latest(target.UID); !ok || got != r {
				t.Errorf("Latest = %p, %v; want the returned result %p", got, ok, r)
			}
			f.checkErrors(t)
		})
	}
}

func ptrString(p *float64) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// TestScrapeOneFailureKeepsReading scrapes a good body first, then a failing
// one: the failure must set Err and ErrTime, keep the previous Reading, Fusion
// and Time, and count one error under the right reason.
func TestScrapeOneFailureKeepsReading(t *testing.T) {
	good := readSample(t, vllmSample)
	elsewhere := newEngine(t, serve(http.StatusOK, good))
	tests := []struct {
		name string
		opts func(*scrape.Options)
		// failing returns the handler of the second scrape.
		failing    func(t *testing.T) http.Handler
		wantReason string
		wantErr    string
		check      func(t *testing.T)
	}{
		{
			name:       "HTTP 500",
			failing:    func(*testing.T) http.Handler { return serve(http.StatusInternalServerError, []byte("engine dead\n")) },
			wantReason: "http_status",
			wantErr:    "HTTP 500",
		},
		{
			name:       "HTTP 404",
			failing:    func(*testing.T) http.Handler { return http.NotFoundHandler() },
			wantReason: "http_status",
			wantErr:    "HTTP 404",
		},
		{
			name: "body larger than MaxBodyBytes",
			opts: func(o *scrape.Options) { o.MaxBodyBytes = int64(len(good)) },
			failing: func(*testing.T) http.Handler {
				return serve(http.StatusOK, append(slices.Clone(good), "# one byte too many\n"...))
			},
			wantReason: "body_too_large",
			wantErr:    fmt.Sprintf("body exceeds %d bytes", len(good)),
		},
		{
			name: "malformed body",
			failing: func(*testing.T) http.Handler {
				return serve(http.StatusOK, []byte("vllm:num_requests_waiting{engine=\"0\" 3\n"))
			},
			wantReason: "parse",
			wantErr:    "parsing exposition",
		},
		{
			name: "no engine metrics",
			failing: func(*testing.T) http.Handler {
				return serve(http.StatusOK, []byte("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\n"))
			},
			wantReason: "no_engine_metrics",
			wantErr:    signals.ErrNoEngineMetrics.Error(),
		},
		{
			name:       "empty body",
			failing:    func(*testing.T) http.Handler { return serve(http.StatusOK, nil) },
			wantReason: "no_engine_metrics",
			wantErr:    signals.ErrNoEngineMetrics.Error(),
		},
		{
			// The engine redirects to a server with a good body: the scraper must
			// neither follow the redirect nor count it as a success.
			name: "redirect is not followed",
			failing: func(*testing.T) http.Handler {
				return http.RedirectHandler(elsewhere.srv.URL+"/metrics", http.StatusFound)
			},
			wantReason: "http_status",
			wantErr:    "HTTP 302",
			check: func(t *testing.T) {
				if n := elsewhere.hits.Load(); n != 0 {
					t.Errorf("redirect target got %d requests, want 0", n)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := defaultOptions()
			if tt.opts != nil {
				tt.opts(&opts)
			}
			f := newFixture(t, opts)
			e := newEngine(t, serve(http.StatusOK, good))
			target := e.target("pod-0")

			first := f.scraper.ScrapeOne(context.Background(), target)
			if first.Err != nil {
				t.Fatalf("first scrape: %v", first.Err)
			}
			okTime := f.clock.Now()
			f.clock.Step(2 * time.Second)
			e.set(tt.failing(t))

			r := f.scraper.ScrapeOne(context.Background(), target)

			if r.Err == nil || !strings.Contains(r.Err.Error(), tt.wantErr) {
				t.Errorf("Err = %v, want an error containing %q", r.Err, tt.wantErr)
			}
			// Callers who may not list pods see the error: never the pod's address.
			if r.Err != nil && (strings.Contains(r.Err.Error(), "127.0.0.1") || strings.Contains(r.Err.Error(), "/metrics")) {
				t.Errorf("Err = %v, want no address or URL in it", r.Err)
			}
			var se *scrape.Error
			if !errors.As(r.Err, &se) || string(se.Reason) != tt.wantReason || se.Unwrap() != nil {
				t.Errorf("Err = %#v, want a stored *scrape.Error with reason %s and no full error kept", r.Err, tt.wantReason)
			}
			if !r.ErrTime.Equal(f.clock.Now()) {
				t.Errorf("ErrTime = %v, want %v", r.ErrTime, f.clock.Now())
			}
			if r.Reading() != first.Reading() {
				t.Errorf("Reading = %p, want the previous reading %p", r.Reading(), first.Reading())
			}
			if !r.Time.Equal(okTime) {
				t.Errorf("Time = %v, want the previous reading's %v", r.Time, okTime)
			}
			if got, _ := f.scraper.Latest(target.UID); got != r {
				t.Errorf("Latest = %p, want the returned result %p", got, r)
			}
			if first.Err != nil || first.ErrTime != (time.Time{}) {
				t.Errorf("first result was modified: Err = %v, ErrTime = %v", first.Err, first.ErrTime)
			}
			f.checkErrors(t, tt.wantReason)
			if tt.check != nil {
				tt.check(t)
			}
		})
	}
}

// TestScrapeOneTimeout checks that a handler that hangs past Timeout, before
// or after sending headers, fails with reason timeout and does not hold the
// scraper much longer than Timeout.
func TestScrapeOneTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	good := readSample(t, vllmSample)
	tests := []struct {
		name string
		hang func(w http.ResponseWriter, r *http.Request, release <-chan struct{})
	}{
		{
			name: "before headers",
			hang: func(_ http.ResponseWriter, r *http.Request, release <-chan struct{}) {
				select {
				case <-r.Context().Done():
				case <-release:
				}
			},
		},
		{
			name: "mid body",
			hang: func(w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write(good[:len(good)/2])
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
				case <-release:
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := defaultOptions()
			opts.Timeout = timeout
			f := newFixture(t, opts)
			release := make(chan struct{})
			e := newEngine(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tt.hang(w, r, release) }))
			t.Cleanup(func() { close(release) }) // runs before the server's Close, which waits for handlers

			done := make(chan *scrape.Result, 1)
			go func() { done <- f.scraper.ScrapeOne(context.Background(), e.target("pod-0")) }()
			var r *scrape.Result
			select {
			case r = <-done:
			case <-time.After(timeout + 10*time.Second): // generous: the machine may be loaded
				t.Fatalf("ScrapeOne did not return within %s of its %s timeout", 10*time.Second, timeout)
			}
			if r.Err == nil || !strings.Contains(r.Err.Error(), "timed out after 200ms") {
				t.Errorf("Err = %v, want a timeout error", r.Err)
			}
			if r.Reading() != nil {
				t.Errorf("Reading = %+v, want nil", r.Reading())
			}
			f.checkErrors(t, "timeout")
		})
	}
}

func TestScrapeOneConnectError(t *testing.T) {
	// A listener closed at once: the port is (almost certainly) refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	f := newFixture(t, defaultOptions())
	r := f.scraper.ScrapeOne(context.Background(), scrape.Target{Pod: types.NamespacedName{Namespace: "llm", Name: "gone"}, UID: "gone", URL: "http://" + addr + "/metrics"})
	if r.Err == nil {
		t.Fatal("Err = nil, want a connection error")
	}
	if r.Reading() != nil || !r.Time.IsZero() {
		t.Errorf("Reading, Time = %v, %v; want nil, zero for a pod never scraped", r.Reading(), r.Time)
	}
	f.checkErrors(t, "connect")
}

func TestScrapeOneInvalidSamples(t *testing.T) {
	body := []byte(`# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} NaN
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} +Inf
`)
	f := newFixture(t, defaultOptions())
	e := newEngine(t, serve(http.StatusOK, body))
	r := f.scraper.ScrapeOne(context.Background(), e.target("pod-0"))
	if r.Err != nil {
		t.Fatalf("Err = %v, want nil: invalid values are not scrape errors", r.Err)
	}
	if r.Reading().Ptr(signals.KVCacheUsage) != nil {
		t.Errorf("KVCacheUsage = %g, want nil for NaN", *r.Reading().Ptr(signals.KVCacheUsage))
	}
	if got, want := saturationOf(t, r.Reading()), 3.0/5; got == nil || *got != want {
		t.Errorf("saturation = %s, want %g (queue term alone)", ptrString(got), want)
	}
	for reason, want := range map[string]float64{"nan": 1, "inf": 1} {
		if got := testutil.ToFloat64(f.metrics.InvalidSamples.WithLabelValues(reason)); got != want {
			t.Errorf("invalid_samples_total{reason=%q} = %g, want %g", reason, got, want)
		}
	}
	if got := testutil.CollectAndCount(f.metrics.InvalidSamples); got != 2 {
		t.Errorf("invalid_samples_total has %d reason series, want 2", got)
	}
	f.checkErrors(t)
}

func TestSyncForgetsTheRest(t *testing.T) {
	good := readSample(t, vllmSample)
	tests := []struct {
		name        string
		sync        bool
		wantKept    []string
		wantTargets float64
	}{
		{name: "sync", sync: true, wantKept: []string{"a"}, wantTargets: 1},
		// An on-demand scrape is not the scrape set: nothing is forgotten, the gauge stays.
		{name: "scrape", sync: false, wantKept: []string{"a", "b", "c"}, wantTargets: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, defaultOptions())
			e := newEngine(t, serve(http.StatusOK, good))
			all := []scrape.Target{e.target("a"), e.target("b"), e.target("c")}
			f.scraper.Sync(context.Background(), all)
			if got := testutil.ToFloat64(f.metrics.Targets); got != 3 {
				t.Errorf("scrape_targets = %g, want 3", got)
			}

			if tt.sync {
				f.scraper.Sync(context.Background(), all[:1])
			} else {
				f.scraper.Scrape(context.Background(), all[:1])
			}

			var kept []string
			for _, tg := range all {
				if r, ok := f.scraper.Latest(tg.UID); ok {
					if r.Err != nil {
						t.Errorf("%s: Err = %v", tg.Pod, r.Err)
					}
					kept = append(kept, tg.Pod.Name)
				}
			}
			if !slices.Equal(kept, tt.wantKept) {
				t.Errorf("results kept for %q, want %q", kept, tt.wantKept)
			}
			if got := testutil.ToFloat64(f.metrics.Targets); got != tt.wantTargets {
				t.Errorf("scrape_targets = %g, want %g", got, tt.wantTargets)
			}
		})
	}
}

func TestSyncConcurrency(t *testing.T) {
	tests := []struct {
		concurrency, targets int
	}{
		{concurrency: 2, targets: 10},
		{concurrency: 1, targets: 4},
		{concurrency: 0, targets: 3}, // 0 means 1, never a deadlock
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("concurrency %d targets %d", tt.concurrency, tt.targets), func(t *testing.T) {
			opts := defaultOptions()
			opts.Concurrency = tt.concurrency
			f := newFixture(t, opts)
			e, inFlight := newCountingEngine(t)
			var targets []scrape.Target
			for i := range tt.targets {
				targets = append(targets, e.target(fmt.Sprintf("pod-%d", i)))
			}

			f.scraper.Sync(context.Background(), targets)

			if got := e.hits.Load(); got != int64(tt.targets) {
				t.Errorf("engine got %d requests, want %d", got, tt.targets)
			}
			if limit, got := max(1, tt.concurrency), inFlight(); got > limit {
				t.Errorf("max in flight = %d, want ≤ %d", got, limit)
			}
			for _, tg := range targets {
				if r, ok := f.scraper.Latest(tg.UID); !ok || r.Err != nil || r.Reading() == nil {
					t.Errorf("%s: result %+v, %v; want a reading", tg.Pod, r, ok)
				}
			}
		})
	}
}

func TestSyncCanceled(t *testing.T) {
	good := readSample(t, vllmSample)
	f := newFixture(t, defaultOptions())
	e := newEngine(t, serve(http.StatusOK, good))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan struct{})
	go func() {
		f.scraper.Sync(ctx, []scrape.Target{e.target("a"), e.target("b")})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Sync with a canceled context did not return")
	}
}

// TestConnectionReuse checks that NewHTTPClient keeps the connection to a pod
// open between scrape rounds, including after an HTTP error status.
func TestConnectionReuse(t *testing.T) {
	good := readSample(t, vllmSample)
	tests := []struct {
		name   string
		rounds []http.Handler
	}{
		{name: "6 good rounds", rounds: []http.Handler{serve(http.StatusOK, good), serve(http.StatusOK, good), serve(http.StatusOK, good),
			serve(http.StatusOK, good), serve(http.StatusOK, good), serve(http.StatusOK, good)}},
		{name: "HTTP 500 in between", rounds: []http.Handler{serve(http.StatusOK, good), serve(http.StatusInternalServerError, []byte("busy\n")),
			serve(http.StatusOK, good), serve(http.StatusInternalServerError, []byte("busy\n")), serve(http.StatusOK, good), serve(http.StatusOK, good)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, defaultOptions())
			e := newEngine(t, tt.rounds[0])
			targets := []scrape.Target{e.target("pod-0")}
			for i, h := range tt.rounds {
				e.set(h)
				f.scraper.Sync(context.Background(), targets)
				if r, _ := f.scraper.Latest(targets[0].UID); r.Reading() == nil {
					t.Fatalf("round %d: no reading: %v", i, r.Err)
				}
			}
			// The client hands a finished connection back to its pool just after the
			// body is read, so a round may rarely race it and dial once more; without
			// reuse every round dials.
			if got := e.newConn.Load(); got > 2 {
				t.Errorf("engine saw %d new connections over %d rounds, want at most 2 (keep-alive)", got, len(tt.rounds))
			}
		})
	}
}

// Scrapes from several callers share one bound: the periodic loop and the
// on-demand scrapes of concurrent requests together stay within Concurrency.
func TestConcurrencyBoundIsShared(t *testing.T) {
	e, inFlight := newCountingEngine(t)
	opts := defaultOptions()
	opts.Concurrency = 2
	f := newFixture(t, opts)
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ts []scrape.Target
			for i := range 3 {
				ts = append(ts, e.target(fmt.Sprintf("c%d-%d", c, i)))
			}
			f.scraper.Scrape(context.Background(), ts)
		}()
	}
	wg.Wait()
	if got := inFlight(); got > 2 {
		t.Errorf("max in flight = %d across callers, want <= 2", got)
	}
}

// A scrape abandoned by its caller stores nothing about the pod.
func TestCanceledScrapeStoresNothing(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	e := newEngine(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	f := newFixture(t, defaultOptions())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if r := f.scraper.ScrapeOne(ctx, e.target("a")); r != nil {
		t.Errorf("result = %+v, want nil: a canceled scrape says nothing about the pod", r)
	}
	if _, ok := f.scraper.Latest(e.target("a").UID); ok {
		t.Error("a canceled scrape was stored")
	}
}

// newCountingEngine serves the real dump slowly and reports the most requests it
// had in flight at once.
func newCountingEngine(t *testing.T) (*engine, func() int) {
	good := readSample(t, vllmSample)
	var mu sync.Mutex
	inFlight, maxInFlight := 0, 0
	e := newEngine(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		maxInFlight = max(maxInFlight, inFlight)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
		serve(http.StatusOK, good).ServeHTTP(w, r)
	}))
	return e, func() int { mu.Lock(); defer mu.Unlock(); return maxInFlight }
}

// https engines: verified against the configured CA and server name, and an
// unverifiable certificate is a connect error, never a silent success.
func TestScrapeTLS(t *testing.T) {
	srv := httptest.NewTLSServer(serve(http.StatusOK, readSample(t, vllmSample)))
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	target := scrape.Target{Pod: types.NamespacedName{Namespace: "llm", Name: "tls"}, UID: "tls", URL: srv.URL + "/metrics"}
	tests := []struct {
		name   string
		config promconfig.TLSConfig
		ok     bool
	}{
		{name: "system roots reject a private CA", ok: false},
		{name: "configured CA", config: promconfig.TLSConfig{CAFile: caFile}, ok: true},
		{name: "configured CA, wrong server name", config: promconfig.TLSConfig{CAFile: caFile, ServerName: "vllm.internal"}, ok: false},
		{name: "configured CA and a server name in the certificate", config: promconfig.TLSConfig{CAFile: caFile, ServerName: "example.com"}, ok: true},
		{name: "verification off", config: promconfig.TLSConfig{InsecureSkipVerify: true}, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := scrape.NewMetrics(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			client := newClient(t, tt.config)
			defer client.CloseIdleConnections()
			s := scrape.New(defaultOptions(), client, scrape.Reader{Extractor: signals.NewExtractor()}, clocktesting.NewFakeClock(time.Now()), m)
			r := s.ScrapeOne(context.Background(), target)
			if tt.ok != (r.Err == nil && r.Reading() != nil) {
				t.Errorf("result err = %v, want ok = %v", r.Err, tt.ok)
			}
			if !tt.ok && testutil.ToFloat64(m.Errors.WithLabelValues("connect")) != 1 {
				t.Error("an unverifiable certificate was not counted as a connect error")
			}
		})
	}
}

// saturationOf is the built-in llm_saturation of one reading, as the provider
// computes it.
func saturationOf(t *testing.T, r *signals.Reading) *float64 {
	t.Helper()
	c, err := policy.BuiltinCatalog(policy.DefaultSetPoints(), policy.DefaultUnknownSaturation)
	if err != nil {
		t.Fatal(err)
	}
	h := history.NewHistory(history.HistoryOptions{}, r)
	return c.Lookup(policy.MetricSaturation).ExplainPod(h, "", r.At(), time.Hour).Saturation
}
