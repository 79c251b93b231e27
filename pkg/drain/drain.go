// Package drain lets an LLM engine finish its requests before its pod stops: it
// polls the engine's own /metrics until nothing is running or waiting. It is
// the job of the drain binary (cmd/drain), the engine container's preStop hook.
package drain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// drainSettle is how long the engine must keep reporting nothing running or
// waiting before it counts as drained: its gauges drop at the start of the
// engine step that finishes the last request, while the end of that response
// still travels to the client, so one zero reading is not enough (seen in the
// end-to-end tests: a single zero reading cut the last stream short).
const drainSettle = time.Second

// drainRequestTimeout bounds one GET of the engine's /metrics.
const drainRequestTimeout = 5 * time.Second

// Options are the settings of a drain: the drain binary's flags.
type Options struct {
	// URL is the engine's metrics endpoint.
	URL string
	// Interval is the time between two readings.
	Interval time.Duration
	// Timeout is the deadline, from the start; it must stay below the pod's
	// terminationGracePeriodSeconds, which covers the preStop hook and the
	// engine's own shutdown after it.
	Timeout time.Duration
	// MinWait is the least time drain takes before it reports drained, so that
	// the pod's removal from Service endpoints (and from gateways' endpoint
	// lists) reaches every client and no new request arrives afterwards.
	MinWait time.Duration
}

// NewOptions returns the defaults: the vLLM server's own /metrics on its
// default port, a reading a second, a 10-minute deadline and 10 s for endpoint
// removal to propagate.
func NewOptions() Options {
	return Options{URL: "http://127.0.0.1:8000/metrics", Interval: time.Second, Timeout: 10 * time.Minute, MinWait: 10 * time.Second}
}

// Validate returns one error per bad flag, naming it and its value.
func (o Options) Validate() []error {
	var errs []error
	if u, err := url.Parse(o.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("--url=%q: must be an http or https URL such as http://127.0.0.1:8000/metrics", o.URL))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout=%s: must be > 0", o.Timeout))
	}
	if o.Interval <= 0 || o.Interval > o.Timeout {
		errs = append(errs, fmt.Errorf("--interval=%s: must be > 0 and at most --timeout (%s)", o.Interval, o.Timeout))
	}
	if o.MinWait < 0 || o.MinWait >= o.Timeout {
		errs = append(errs, fmt.Errorf("--min-wait=%s: must be >= 0 and below --timeout (%s)", o.MinWait, o.Timeout))
	}
	return errs
}

// InstallBinary copies the running executable (os.Executable) to dir/name with
// mode 0755, writing a temporary file in dir and renaming it so that a reader
// never sees half a binary. It returns the path and the bytes written. dir must
// exist.
func InstallBinary(dir, name string) (string, int64, error) {
	src, err := os.Executable()
	if err != nil {
		return "", 0, fmt.Errorf("finding this binary: %w", err)
	}
	in, err := os.Open(src)
	if err != nil {
		return "", 0, fmt.Errorf("reading this binary: %w", err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(dir, "."+name+"-*")
	if err != nil {
		return "", 0, fmt.Errorf("installing into %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename this finds nothing
	n, err := io.Copy(tmp, in)
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	dst := filepath.Join(dir, name)
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return "", 0, fmt.Errorf("installing %s: %w", dst, err)
	}
	return dst, n, nil
}

// reading is one poll of the engine: either counts, or why there are none.
type reading struct {
	running, waiting float64
	err              error
	refused          bool
}

// Drain polls o.URL every o.Interval until the engine has reported nothing
// running and nothing waiting for at least 1s (two consecutive zero readings
// that far apart) and o.MinWait has passed, or until it has refused
// connections for 1s (nothing listens, so nothing can be in flight). It writes
// progress lines to out and returns nil when drained.
//
// At o.Timeout it returns an error naming the running and waiting counts of
// the last reading, or, when the engine could not be read, for how long and
// why. Readings the engine's metrics cannot give (a body without running or
// waiting gauges, HTTP errors, timeouts) never count as drained. It returns
// ctx's error when ctx ends first.
func Drain(ctx context.Context, o Options, client *http.Client, clk clock.Clock, out io.Writer) error {
	e := signals.NewExtractor()
	start := clk.Now()
	deadline := start.Add(o.Timeout)
	var zeroSince, refusedSince, failingSince time.Time
	var last reading
	lastLine := ""
	for {
		now := clk.Now()
		last = poll(ctx, client, o.URL, e)
		line := ""
		switch {
		case last.refused:
			zeroSince, failingSince = time.Time{}, time.Time{}
			if refusedSince.IsZero() {
				refusedSince = now
			} else if now.Sub(refusedSince) >= drainSettle {
				fmt.Fprintf(out, "drained: nothing listens at %s any more (connection refused for %s)\n", o.URL, now.Sub(refusedSince).Round(time.Millisecond))
				return nil
			}
			line = fmt.Sprintf("connection refused at %s", o.URL)
		case last.err != nil:
			zeroSince, refusedSince = time.Time{}, time.Time{}
			if failingSince.IsZero() {
				failingSince = now
			}
			line = fmt.Sprintf("cannot read %s: %v", o.URL, last.err)
		case last.running == 0 && last.waiting == 0:
			refusedSince, failingSince = time.Time{}, time.Time{}
			if zeroSince.IsZero() {
				zeroSince = now
			} else if now.Sub(zeroSince) >= drainSettle && now.Sub(start) >= o.MinWait {
				fmt.Fprintf(out, "drained: nothing running or waiting at %s for %s (after %s)\n",
					o.URL, now.Sub(zeroSince).Round(time.Millisecond), now.Sub(start).Round(time.Millisecond))
				return nil
			}
			line = "0 running, 0 waiting"
		default:
			zeroSince, refusedSince, failingSince = time.Time{}, time.Time{}, time.Time{}
			line = fmt.Sprintf("%g running, %g waiting", last.running, last.waiting)
		}
		if line != lastLine {
			fmt.Fprintf(out, "%s: %s\n", clk.Since(start).Round(time.Millisecond), line)
			lastLine = line
		}

		if !clk.Now().Before(deadline) {
			switch {
			case last.err != nil:
				return fmt.Errorf("not drained after %s (--timeout): the engine at %s could not be read for the last %s: %w",
					o.Timeout, o.URL, clk.Since(failingSince).Round(time.Millisecond), last.err)
			case last.refused:
				return fmt.Errorf("not drained after %s (--timeout): the engine at %s started refusing connections just now", o.Timeout, o.URL)
			case last.running == 0 && last.waiting == 0:
				return fmt.Errorf("not drained after %s (--timeout): the engine at %s became idle only %s ago (%s needed)",
					o.Timeout, o.URL, clk.Since(zeroSince).Round(time.Millisecond), drainSettle)
			default:
				return fmt.Errorf("not drained after %s (--timeout): %g running and %g waiting requests at %s; stopping the engine now cuts them off",
					o.Timeout, last.running, last.waiting, o.URL)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("draining %s: %w", o.URL, ctx.Err())
		case <-clk.After(min(o.Interval, deadline.Sub(clk.Now()))):
		}
	}
}

// poll reads the engine's running and waiting counts once.
func poll(ctx context.Context, client *http.Client, u string, e *signals.Extractor) reading {
	ctx, cancel := context.WithTimeout(ctx, drainRequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return reading{err: err}
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return reading{err: err, refused: errors.Is(err, syscall.ECONNREFUSED)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return reading{err: fmt.Errorf("HTTP %s", resp.Status)}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return reading{err: fmt.Errorf("reading the body: %w", err)}
	}
	r, err := e.Extract(body)
	if err != nil {
		return reading{err: err}
	}
	running, waiting := r.Ptr(signals.Running), r.Ptr(signals.QueueDepth)
	if running == nil || waiting == nil {
		return reading{err: fmt.Errorf("the %s metrics have no valid running and waiting counts (running %v, waiting %v)",
			r.Dialect, deref(running), deref(waiting))}
	}
	// Deferred waits (vLLM's waiting_by_reason) are requests the engine holds too.
	deferred, _ := r.Value(signals.QueueDeferred)
	return reading{running: *running, waiting: *waiting + deferred}
}

func deref(p *float64) any {
	if p == nil {
		return "absent"
	}
	return *p
}
