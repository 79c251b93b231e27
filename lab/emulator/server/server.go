package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
)

// FaultMode is a failure the server can be switched into for tests.
type FaultMode string

// The fault modes.
const (
	// FaultNone: everything works.
	FaultNone FaultMode = "none"
	// FaultMetrics500: GET /metrics answers 500.
	FaultMetrics500 FaultMode = "metrics-500"
	// FaultMetricsHang: GET /metrics never answers (until the client gives up or
	// the server stops).
	FaultMetricsHang FaultMode = "metrics-hang"
	// FaultMetricsMalformed: GET /metrics answers 200 with a body that is not
	// valid exposition text.
	FaultMetricsMalformed FaultMode = "metrics-malformed"
	// FaultFreeze: every engine stops stepping (a hung GPU worker). Requests are
	// still accepted and queue up; /metrics and /health keep answering.
	FaultFreeze FaultMode = "freeze"
)

// FaultModes returns every FaultMode.
func FaultModes() []FaultMode {
	return []FaultMode{FaultNone, FaultMetrics500, FaultMetricsHang, FaultMetricsMalformed, FaultFreeze}
}

// ParseFaultMode returns the FaultMode named s.
func ParseFaultMode(s string) (FaultMode, error) {
	for _, m := range FaultModes() {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown fault mode %q, want one of %v", s, FaultModes())
}

// Config configures a [Server].
type Config struct {
	// Engine is the shape of each engine.
	Engine emulator.Config
	// Engines is the number of data-parallel engines, >= 1.
	Engines int
	// ModelName is the served model name.
	ModelName string
	// MetricNames selects the vLLM metric names.
	MetricNames emulator.MetricNames
	// CharsPerToken is the text-to-token estimate, >= 1.
	CharsPerToken int
	// Fault is the fault mode at start.
	Fault FaultMode
	// EnableAdmin serves /admin/fault.
	EnableAdmin bool
	// ShutdownTimeout bounds Serve's graceful shutdown.
	ShutdownTimeout time.Duration
	// Clock drives the engines; clock.RealClock{} for serving.
	Clock clock.Clock
}

// Server serves emulated engines over HTTP: /v1/completions, /v1/models,
// /health, /metrics and, if enabled, /admin/fault.
type Server struct {
	cfg      Config
	runners  []*emulator.Runner
	registry *prometheus.Registry
	metrics  http.Handler
	fault    atomic.Value // FaultMode
	nextID   atomic.Uint64
	dispatch sync.Mutex // makes pick + Submit atomic
	stopping chan struct{}
	stopOnce sync.Once
}

// New builds the engines, their metrics on a registry of the server's own,
// and applies cfg.Fault.
func New(cfg Config) (*Server, error) {
	if cfg.Engines < 1 {
		return nil, fmt.Errorf("engines must be >= 1, got %d", cfg.Engines)
	}
	if cfg.CharsPerToken < 1 {
		return nil, fmt.Errorf("chars per token must be >= 1, got %d", cfg.CharsPerToken)
	}
	if cfg.Clock == nil {
		return nil, errors.New("clock is nil")
	}
	s := &Server{cfg: cfg, registry: prometheus.NewRegistry(), stopping: make(chan struct{})}
	var m *emulator.Metrics
	for i := 0; i < cfg.Engines; i++ {
		r, err := emulator.NewRunner(cfg.Engine, cfg.Clock, func(res *emulator.StepResult) { m.Observe(i, res) })
		if err != nil {
			return nil, err
		}
		s.runners = append(s.runners, r)
	}
	m, err := emulator.NewMetrics(emulator.MetricsOptions{
		ModelName: cfg.ModelName, Names: cfg.MetricNames, Engines: cfg.Engines,
		MaxModelLen: cfg.Engine.MaxModelLen, CreatedAt: cfg.Clock.Now(),
		BlockSize: cfg.Engine.BlockSize, NumGPUBlocks: cfg.Engine.NumBlocks,
	}, func(i int) emulator.Snapshot { return s.runners[i].Snapshot() })
	if err != nil {
		return nil, err
	}
	if err := s.registry.Register(m); err != nil {
		return nil, fmt.Errorf("registering engine metrics: %w", err)
	}
	s.metrics = promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
	if cfg.Fault == "" {
		cfg.Fault = FaultNone
	}
	s.SetFault(cfg.Fault)
	return s, nil
}

// SetFault switches the fault mode.
func (s *Server) SetFault(m FaultMode) {
	s.fault.Store(m)
	for _, r := range s.runners {
		r.SetFrozen(m == FaultFreeze)
	}
}

// Fault returns the current fault mode.
func (s *Server) Fault() FaultMode { return s.fault.Load().(FaultMode) }

// Runners returns the engines' runners, engine i at index i.
func (s *Server) Runners() []*emulator.Runner { return s.runners }

// Start runs the engines until ctx is done. Serve calls it; tests that mount
// Handler on their own server call it themselves.
func (s *Server) Start(ctx context.Context) {
	for _, r := range s.runners {
		go r.Run(ctx)
	}
	go func() {
		<-ctx.Done()
		s.stopOnce.Do(func() { close(s.stopping) })
	}()
}

// Serve starts the engines and serves HTTP on ln until ctx is done, then shuts
// down gracefully within cfg.ShutdownTimeout.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.Start(ctx)
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	klog.InfoS("Serving emulated vLLM engines", "address", ln.Addr().String(), "model", s.cfg.ModelName,
		"engines", s.cfg.Engines, "metricNames", s.cfg.MetricNames, "fault", s.Fault())
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	klog.InfoS("Stopped")
	return nil
}

// Handler returns the server's HTTP routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /metrics", s.handleMetrics)
	if s.cfg.EnableAdmin {
		mux.HandleFunc("POST /admin/fault", s.handleSetFault)
		mux.HandleFunc("GET /admin/fault", s.handleGetFault)
	}
	return mux
}

// malformedMetrics is served in FaultMetricsMalformed: a valid start, then a
// series with an unterminated label set and a non-numeric value.
const malformedMetrics = `# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m" 3.0
vllm:kv_cache_usage_perc{engine="0"} not-a-number
`

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	switch s.Fault() {
	case FaultMetrics500:
		http.Error(w, "injected fault: metrics-500", http.StatusInternalServerError)
	case FaultMetricsHang:
		select {
		case <-r.Context().Done():
		case <-s.stopping:
		}
	case FaultMetricsMalformed:
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write([]byte(malformedMetrics))
	default:
		s.metrics.ServeHTTP(w, r)
	}
}

func (s *Server) handleSetFault(w http.ResponseWriter, r *http.Request) {
	m, err := ParseFaultMode(r.URL.Query().Get("mode"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.SetFault(m)
	klog.InfoS("Fault mode set", "mode", m)
	s.handleGetFault(w, r)
}

func (s *Server) handleGetFault(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"mode": string(s.Fault())})
}

// submit queues req on the engine with the lowest waiting×4 + running, vLLM's
// data-parallel load-balancing score (DPLBAsyncMPClient), the first on ties. It
// returns the engine's index and runner and the request's stream.
func (s *Server) submit(req emulator.Request) (int, *emulator.Runner, *emulator.Stream, error) {
	s.dispatch.Lock()
	defer s.dispatch.Unlock()
	i, r := s.pick()
	stream, err := r.Submit(req)
	return i, r, stream, err
}

// pick returns the least loaded engine; see submit.
func (s *Server) pick() (int, *emulator.Runner) {
	best, bestScore := 0, -1
	for i, r := range s.runners {
		snap := r.Snapshot()
		if score := snap.Waiting*4 + snap.Running; bestScore < 0 || score < bestScore {
			best, bestScore = i, score
		}
	}
	return best, s.runners[best]
}

func (s *Server) newID() string { return "cmpl-" + strconv.FormatUint(s.nextID.Add(1), 10) }
