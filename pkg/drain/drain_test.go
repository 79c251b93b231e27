package drain

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/saturation-adapter/saturation-adapter/internal/testfixture"
	"github.com/saturation-adapter/saturation-adapter/internal/testfixture/emulated"
)

// runDrain runs Drain on a fake clock, stepping it by the interval whenever
// Drain waits, and returns its output, the fake time it took and its error.
func runDrain(t *testing.T, o Options) (string, time.Duration, error) {
	t.Helper()
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- Drain(context.Background(), o, http.DefaultClient, clk, &out) }()
	for {
		select {
		case err := <-done:
			return out.String(), clk.Since(start), err
		default:
		}
		if clk.HasWaiters() {
			clk.Step(o.Interval)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func TestDrain(t *testing.T) {
	idle := testfixture.Response{Status: 200, Body: testfixture.Sample(t, "vllm_v1-0.10-nvcr25.09_single-engine.prom")}
	busy := testfixture.Response{Status: 200, Body: testfixture.Sample(t, "llm-d-inference-sim_v0.10.2_load.prom")}
	failing := testfixture.Response{Status: 500, Body: []byte("engine error")}
	noEngine := testfixture.Response{Status: 200, Body: []byte("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12\n")}
	tests := []struct {
		name     string
		script   []testfixture.Response
		minWait  time.Duration
		timeout  time.Duration
		wantErr  string
		wantGets int
		wantOut  string
	}{
		{"busy, then idle twice", []testfixture.Response{busy, busy, idle, idle}, 0, time.Minute, "", 4, "drained: nothing running or waiting"},
		{"one zero reading is not enough", []testfixture.Response{busy, idle, busy, idle, idle}, 0, time.Minute, "", 5, "2 running, 4 waiting"},
		{"idle at once, but not before --min-wait", []testfixture.Response{idle}, 5 * time.Second, time.Minute, "", 6, "drained"},
		{"errors do not count, then recovers", []testfixture.Response{failing, idle, failing, idle, idle}, 0, time.Minute, "", 5, "cannot read"},
		{"still busy at the deadline", []testfixture.Response{busy}, 0, 5 * time.Second,
			"not drained after 5s (--timeout): 2 running and 4 waiting requests at ", 6, ""},
		{"HTTP errors until the deadline", []testfixture.Response{busy, failing}, 0, 5 * time.Second,
			"the engine at URL could not be read for the last 4s: HTTP 500 Internal Server Error", 6, ""},
		{"not an engine", []testfixture.Response{noEngine}, 0, 3 * time.Second, "no LLM engine saturation metrics found", 4, ""},
		{"idle only at the deadline", []testfixture.Response{busy, busy, idle}, 0, 2 * time.Second, "became idle only 0s ago (1s needed)", 3, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &testfixture.Scripted{Script: tt.script}
			srv := httptest.NewServer(s)
			defer srv.Close()
			o := Options{URL: srv.URL + "/metrics", Interval: time.Second, Timeout: tt.timeout, MinWait: tt.minWait}
			out, _, err := runDrain(t, o)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Drain() = %v\noutput:\n%s", err, out)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), strings.ReplaceAll(tt.wantErr, "URL", o.URL))):
				t.Fatalf("Drain() = %v, want an error containing %q\noutput:\n%s", err, tt.wantErr, out)
			}
			if got := s.Count(); got != tt.wantGets {
				t.Errorf("%d readings, want %d\noutput:\n%s", got, tt.wantGets, out)
			}
			if !strings.Contains(out, tt.wantOut) {
				t.Errorf("output lacks %q:\n%s", tt.wantOut, out)
			}
		})
	}
}

// An engine that is gone (nothing listens) has nothing in flight: drained after
// two refused connections a second apart.
func TestDrainEngineGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	out, took, err := runDrain(t, Options{URL: "http://" + addr + "/metrics", Interval: time.Second, Timeout: time.Minute, MinWait: 10 * time.Second})
	if err != nil || !strings.Contains(out, "drained: nothing listens at http://"+addr) {
		t.Errorf("Drain() = %v, output:\n%s\nwant drained (nothing listens)", err, out)
	}
	if took != time.Second {
		t.Errorf("took %s, want 1s (two refusals, --min-wait does not apply)", took)
	}
}

func TestDrainValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Options)
		want   []string
	}{
		{"defaults", func(*Options) {}, nil},
		{"relative URL", func(o *Options) { o.URL = "/metrics" }, []string{`--url="/metrics"`}},
		{"interval above timeout, min-wait too long", func(o *Options) { o.Interval = time.Hour; o.MinWait = time.Hour },
			[]string{"--interval=1h0m0s: must be > 0 and at most --timeout (10m0s)", "--min-wait=1h0m0s"}},
		{"no timeout", func(o *Options) { o.Timeout = 0; o.MinWait = 0 }, []string{"--timeout=0s", "--interval=1s", "--min-wait=0s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			tt.mutate(&o)
			errs := o.Validate()
			if len(errs) != len(tt.want) {
				t.Fatalf("Validate() = %v, want %d errors naming %q", errs, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want it to name %q", i, errs[i], w)
				}
			}
		})
	}
}

// Against the emulated vLLM engine with requests in flight, drain returns only
// once every response has reached its client.
func TestDrainEmulatorWaitsForInFlightRequests(t *testing.T) {
	srv, url := emulated.StartEmulator(t, emulated.FastEngine())
	const n = 8
	finished, wait := emulated.InFlight(t, srv, url, n)
	defer wait()
	var out bytes.Buffer
	o := Options{URL: url + "/metrics", Interval: 100 * time.Millisecond, Timeout: 2 * time.Minute}
	if err := Drain(context.Background(), o, http.DefaultClient, clock.RealClock{}, &out); err != nil {
		t.Fatalf("Drain() = %v\noutput:\n%s", err, out.String())
	}
	if got := finished.Load(); got != n {
		t.Errorf("drain returned with %d of %d responses complete\noutput:\n%s", got, n, out.String())
	}
	if !strings.Contains(out.String(), " running, ") || !strings.Contains(out.String(), "drained: nothing running or waiting") {
		t.Errorf("output does not show the requests, then drained:\n%s", out.String())
	}
}
