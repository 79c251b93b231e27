// Package soak runs the adapter for a long time against a fleet of stand-in engines whose
// values it knows, under a schedule of faults (engines restarting, hanging, serving
// garbage; Prometheus down; the policy file reloaded; the API server restarted), and checks
// that no value served is wrong, that the adapter's memory stays bounded and flat and that
// its goroutines do not grow. `make soak` runs it for an hour (cmd/soak); TestSoak runs a
// short version.
package soak

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Mode is what a stand-in engine does with a scrape.
type Mode int

// The modes of a stand-in engine.
const (
	// ModeOK serves the engine's true values.
	ModeOK Mode = iota
	// ModeDown resets every connection (a restarting engine: its counters start again
	// from 0). The port stays bound, as a pod keeps its IP while its container restarts:
	// on a shared loopback another program could take a port let go, and serve
	// something else there (it did: another test's idle engines, read as 0).
	ModeDown
	// ModeHang accepts the scrape and never answers (until the scraper gives up).
	ModeHang
	// ModeGarbage answers 200 with a body that is not exposition text.
	ModeGarbage
	// ModeNaN serves a NaN queue depth beside the true KV-cache usage: the queue term
	// drops out and the pod's saturation is its KV term alone.
	ModeNaN
	// ModeHuge serves the true values in 19,999 agreeing duplicate series (1.3 MB):
	// read as the truth, or refused by the adapter's memory bounds.
	ModeHuge
	// ModeSlow answers after 800 ms: read, or timed out under load.
	ModeSlow
)

var modeNames = []string{"ok", "down", "hang", "garbage", "nan", "huge", "slow"}

func (m Mode) String() string { return modeNames[m] }

// Truth is the stand-ins' known values: every engine's queue depth and KV-cache usage are
// constant within an epoch and change at each epoch's start, from the engine's index and
// the epoch's number.
type Truth struct {
	// Start is the first epoch's start; Epoch its length.
	Start time.Time
	Epoch time.Duration
}

// EpochAt returns the number of the epoch that holds t.
func (tr Truth) EpochAt(t time.Time) int64 { return int64(t.Sub(tr.Start) / tr.Epoch) }

// Values returns engine i's queue depth (1 to 10 waiting) and KV-cache usage (0.10 to
// 0.89) in epoch e. Neither is ever 0, so that a value read as 0 is always wrong.
func (tr Truth) Values(i int, e int64) (queue, kv float64) {
	queue = float64((int64(i)*7+e*3)%10 + 1)
	kv = float64((int64(i)*13+e*5)%80+10) / 100
	return queue, kv
}

// Saturation is engine i's saturation in epoch e under the built-in llm_saturation
// (queue / 5, KV / 0.8; the higher), and under ModeNaN (the KV term alone).
func (tr Truth) Saturation(i int, e int64) (sat, nan float64) {
	q, kv := tr.Values(i, e)
	return max(q/5, kv/0.8), kv / 0.8
}

// Engine is one stand-in: a vLLM V1 /metrics on its own loopback port.
type Engine struct {
	Index     int
	Namespace string
	Pod       string
	Port      int

	truth Truth

	mu      sync.Mutex
	ln      net.Listener
	srv     *http.Server
	mode    Mode
	started time.Time
	// history is every mode change: the checker's view of when the engine misbehaved.
	history []modeChange
}

type modeChange struct {
	at   time.Time
	mode Mode
}

// StartEngine starts engine i of the fleet on a free loopback port.
func StartEngine(i int, namespace, pod string, truth Truth) (*Engine, error) {
	e := &Engine{Index: i, Namespace: namespace, Pod: pod, truth: truth, started: time.Now(),
		history: []modeChange{{at: time.Now(), mode: ModeOK}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e.Port = ln.Addr().(*net.TCPAddr).Port
	e.serve(ln)
	return e, nil
}

func (e *Engine) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(e.handle), ReadHeaderTimeout: 5 * time.Second}
	e.ln, e.srv = ln, srv
	go func() { _ = srv.Serve(ln) }()
}

// SetMode switches the engine's behaviour. Leaving ModeDown starts its counters again,
// as a restarted engine's.
func (e *Engine) SetMode(m Mode) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if m == e.mode {
		return nil
	}
	now := time.Now()
	if e.mode == ModeDown {
		e.started = now
	}
	e.mode = m
	e.history = append(e.history, modeChange{at: now, mode: m})
	if len(e.history) > 64 {
		e.history = e.history[len(e.history)-64:]
	}
	return nil
}

// Mode returns the current mode.
func (e *Engine) Mode() Mode {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mode
}

// modesDuring returns the modes the engine was in at any time in [from, to].
func (e *Engine) modesDuring(from, to time.Time) map[Mode]bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[Mode]bool{}
	for i, c := range e.history {
		end := to
		if i+1 < len(e.history) {
			end = e.history[i+1].at
		}
		if !c.at.After(to) && !end.Before(from) {
			out[c.mode] = true
		}
	}
	return out
}

// Stop closes the engine.
func (e *Engine) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.srv != nil {
		_ = e.srv.Close()
	}
}

func (e *Engine) handle(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	mode, started := e.mode, e.started
	e.mu.Unlock()
	now := time.Now()
	q, kv := e.truth.Values(e.Index, e.truth.EpochAt(now))
	switch mode {
	case ModeDown:
		// Reset the connection: the scraper sees it refused or cut.
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				if tc, ok := conn.(*net.TCPConn); ok {
					_ = tc.SetLinger(0)
				}
				_ = conn.Close()
				return
			}
		}
		http.Error(w, "restarting", http.StatusServiceUnavailable)
		return
	case ModeHang:
		<-r.Context().Done()
		return
	case ModeGarbage:
		_, _ = w.Write([]byte("<html><body>502 Bad Gateway</body></html>\n"))
		return
	case ModeSlow:
		select {
		case <-r.Context().Done():
			return
		case <-time.After(800 * time.Millisecond):
		}
		// The values of when the request came.
	}
	queue := strconv.FormatFloat(q, 'g', -1, 64)
	if mode == ModeNaN {
		queue = "NaN"
	}
	// Counters move by 20 tokens a second since the (re)start: an engine at work, never
	// judged wedged.
	up := now.Sub(started).Seconds()
	var b bytes.Buffer
	fmt.Fprintf(&b, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\",model_name=\"soak\"} %s\n", queue)
	fmt.Fprintf(&b, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"soak\"} 4\n")
	fmt.Fprintf(&b, "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\",model_name=\"soak\"} %g\n", kv)
	fmt.Fprintf(&b, "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{engine=\"0\",model_name=\"soak\"} %d\n", int64(up*20))
	fmt.Fprintf(&b, "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{engine=\"0\",model_name=\"soak\"} %d\n", int64(up*80))
	fmt.Fprintf(&b, "# TYPE vllm:request_success_total counter\nvllm:request_success_total{engine=\"0\",model_name=\"soak\",finished_reason=\"stop\"} %d\n", int64(up))
	fmt.Fprintf(&b, "# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{engine=\"0\",model_name=\"soak\"} 0\n")
	if mode == ModeHuge {
		for j := 0; j < 19999; j++ {
			fmt.Fprintf(&b, "vllm:num_requests_waiting{engine=\"0\",model_name=\"soak\",replica=\"%05d\"} %s\n", j, queue)
		}
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = w.Write(b.Bytes())
}

// Fleet is every stand-in.
type Fleet struct {
	Engines []*Engine
	Truth   Truth
}

// StartFleet starts n engines, poolSize per pool, ten pools per namespace (soak-00,
// soak-01, ...); engine i is pod pool-PPP-III of namespace soak-NN.
func StartFleet(n, poolSize int, truth Truth) (*Fleet, error) {
	f := &Fleet{Truth: truth}
	for i := range n {
		p := i / poolSize
		e, err := StartEngine(i, NamespaceOf(p), fmt.Sprintf("%s-%03d", PoolName(p), i%poolSize), truth)
		if err != nil {
			f.Stop()
			return nil, err
		}
		f.Engines = append(f.Engines, e)
	}
	return f, nil
}

// NamespaceOf returns pool p's namespace; PoolName its app label.
func NamespaceOf(p int) string { return fmt.Sprintf("soak-%02d", p/10) }

// PoolName returns pool p's app label and HPA name.
func PoolName(p int) string { return fmt.Sprintf("pool-%03d", p) }

// Stop stops every engine.
func (f *Fleet) Stop() {
	for _, e := range f.Engines {
		e.Stop()
	}
}

// Pool returns pool p's engines.
func (f *Fleet) Pool(p, poolSize int) []*Engine {
	return f.Engines[p*poolSize : min((p+1)*poolSize, len(f.Engines))]
}

// waitCtx sleeps for d or until ctx ends.
func waitCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
