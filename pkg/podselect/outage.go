package podselect

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// OutageRepeat is how often an API server outage that goes on is logged again.
const OutageRepeat = time.Minute

// OutageReporter is an http.RoundTripper for the client the informers list and
// watch with: it logs at the default level when requests to the API server
// start failing, at most every OutageRepeat while they keep failing, and when
// they work again. client-go's reflectors retry a refused watch at -v=4 only,
// so without it an API server outage (during which the pod and HPA caches go
// stale) is silent in the adapter's log.
//
// A request fails when the transport returns an error other than the caller's
// cancellation, or an answer of 502, 503 or 504 (an API server shutting down or
// behind a load balancer without a backend).
type OutageReporter struct {
	next   http.RoundTripper
	clock  clock.PassiveClock
	logger klog.Logger

	mu         sync.Mutex
	downSince  time.Time // zero while the API server answers
	lastLogged time.Time
	failures   int
}

// NewOutageReporter wraps next; logger receives the reports (klog.Background()
// in the adapter).
func NewOutageReporter(next http.RoundTripper, clk clock.PassiveClock, logger klog.Logger) *OutageReporter {
	return &OutageReporter{next: next, clock: clk, logger: logger}
}

// RoundTrip sends the request with the wrapped transport and records whether
// the API server answered.
func (o *OutageReporter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := o.next.RoundTrip(req)
	switch {
	case err != nil && req.Context().Err() != nil && errors.Is(err, context.Canceled):
		// The caller gave up (a watch closed at shutdown): says nothing.
	case err != nil:
		o.failed(req, err)
	case resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout:
		o.failed(req, errors.New(resp.Status))
	default:
		o.answered(req)
	}
	return resp, err
}

func (o *OutageReporter) failed(req *http.Request, err error) {
	now := o.clock.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failures++
	switch {
	case o.downSince.IsZero():
		o.downSince, o.lastLogged = now, now
		o.logger.Error(err, "Kubernetes API server unreachable: pod and HPA caches are not updated until it answers again", "host", req.URL.Host)
	case now.Sub(o.lastLogged) >= OutageRepeat:
		o.lastLogged = now
		o.logger.Error(err, "Kubernetes API server still unreachable", "host", req.URL.Host, "since", o.downSince, "failures", o.failures)
	}
}

func (o *OutageReporter) answered(req *http.Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.downSince.IsZero() {
		return
	}
	o.logger.Info("Kubernetes API server answers again", "host", req.URL.Host, "downFor", o.clock.Since(o.downSince).Round(time.Millisecond), "failures", o.failures)
	o.downSince, o.failures = time.Time{}, 0
}
