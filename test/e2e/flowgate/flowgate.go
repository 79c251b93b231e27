// Package flowgate is the end-to-end tests' flow-controlled gateway: a stand-in for the
// Gateway API inference extension's endpoint picker with flow control on. It accepts
// completions, holds them in a FIFO queue while no engine is Ready or every engine has its
// maximum of requests outstanding (at its set point), dispatches the queue head to the
// Ready engine with the fewest outstanding requests, streams the engine's answer back, and
// exposes its queue at /metrics as inference_extension_flow_control_queue_size with the
// extension's labels (kubernetes-sigs/gateway-api-inference-extension PR #1714: fairness_id,
// priority, inference_pool, model names), so the adapter scrapes it as it would the real one.
package flowgate

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"
)

// QueueMetric is the gauge the endpoint picker exposes for its flow-control queue.
const QueueMetric = "inference_extension_flow_control_queue_size"

// Options configure a Gate.
type Options struct {
	// Endpoints returns the base URLs of the Ready engines (http://ip:port); called on
	// every dispatch attempt.
	Endpoints func() []string
	// MaxOutstanding is the most requests one engine is given at once; past it on every
	// engine, requests wait in the gate. At least 1.
	MaxOutstanding int
	// Pool and Model label the queue series (inference_pool, model_name, target_model_name).
	Pool, Model string
	// Recheck is how often held requests retry when nothing signals a change (engines
	// becoming Ready); default 100 ms.
	Recheck time.Duration
}

// Gate is the gateway. Safe for concurrent use.
type Gate struct {
	o Options

	mu          sync.Mutex
	queue       []*waiter
	outstanding map[string]int
	served      int
	errors      int
}

type waiter struct {
	ready chan string // receives the endpoint when dispatched
}

// New returns a Gate.
func New(o Options) *Gate {
	if o.MaxOutstanding < 1 {
		o.MaxOutstanding = 1
	}
	if o.Recheck <= 0 {
		o.Recheck = 100 * time.Millisecond
	}
	return &Gate{o: o, outstanding: map[string]int{}}
}

// Run dispatches held requests every Recheck until ctx ends (engines that became Ready
// since the last completion).
func (g *Gate) Run(ctx context.Context) {
	t := time.NewTicker(g.o.Recheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.dispatch()
		}
	}
}

// Held returns the number of requests waiting in the gate.
func (g *Gate) Held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// Served and Errors return the requests answered by an engine and those that failed.
func (g *Gate) Served() (served, errors int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.served, g.errors
}

// dispatch hands queue heads to engines with room, first come first served.
func (g *Gate) dispatch() {
	eps := g.o.Endpoints()
	g.mu.Lock()
	defer g.mu.Unlock()
	for len(g.queue) > 0 {
		best := ""
		for _, ep := range eps {
			if n := g.outstanding[ep]; n < g.o.MaxOutstanding && (best == "" || n < g.outstanding[best]) {
				best = ep
			}
		}
		if best == "" {
			return
		}
		w := g.queue[0]
		g.queue = g.queue[1:]
		g.outstanding[best]++
		w.ready <- best
	}
}

func (g *Gate) release(ep string, ok bool) {
	g.mu.Lock()
	g.outstanding[ep]--
	if ok {
		g.served++
	} else {
		g.errors++
	}
	g.mu.Unlock()
	g.dispatch()
}

// ServeHTTP serves POST /v1/completions (held, then proxied with streaming), GET
// /metrics and GET /health.
func (g *Gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/metrics":
		g.serveMetrics(w)
	case r.URL.Path == "/health":
		fmt.Fprintln(w, "ok")
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/"):
		g.serveCompletion(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (g *Gate) serveMetrics(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	fmt.Fprintf(w, "# HELP %s Current number of requests actively managed by the EPP flow control layer.\n# TYPE %s gauge\n", QueueMetric, QueueMetric)
	fmt.Fprintf(w, "%s{fairness_id=\"default\",inference_pool=%q,model_name=%q,priority=\"0\",target_model_name=%q} %d\n",
		QueueMetric, g.o.Pool, g.o.Model, g.o.Model, g.Held())
}

func (g *Gate) serveCompletion(w http.ResponseWriter, r *http.Request) {
	// Read the (small) body first: the server notices a client that gives up only
	// once the request body has been read, and a held request must leave the queue then.
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	wt := &waiter{ready: make(chan string, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, wt)
	g.mu.Unlock()
	g.dispatch()
	var ep string
	select {
	case ep = <-wt.ready:
	case <-r.Context().Done():
		g.mu.Lock()
		for i, x := range g.queue {
			if x == wt {
				g.queue = append(g.queue[:i], g.queue[i+1:]...)
				break
			}
		}
		g.mu.Unlock()
		select {
		case ep = <-wt.ready: // dispatched meanwhile
			g.release(ep, false)
		default:
		}
		return
	}
	target, err := url.Parse(ep)
	if err != nil {
		g.release(ep, false)
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	ok := true
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1 // stream tokens as the engine sends them
	proxy.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
		ok = false
		http.Error(w, "engine: "+err.Error(), http.StatusBadGateway)
	}
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.StatusCode/100 != 2 {
			ok = false
		}
		return nil
	}
	// ReverseProxy panics with http.ErrAbortHandler when the client goes away mid-stream
	// (a client that stops reading at "data: [DONE]"); the engine's slot is released
	// then too, or the gate would think it full forever.
	released := false
	defer func() {
		if !released {
			g.release(ep, false)
		}
	}()
	proxy.ServeHTTP(w, r)
	released = true
	g.release(ep, ok)
}
