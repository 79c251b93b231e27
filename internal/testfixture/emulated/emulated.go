// Package emulated starts emulated vLLM engines (lab/emulator, fault switches on) on loopback for
// tests of other packages: drain, the adapter's scrape path. Only tests import
// it; it is apart from testfixture so that tests needing only captured files do
// not build the emulator.
package emulated

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
	emulatorserver "github.com/saturation-adapter/saturation-adapter/lab/emulator/server"
)

// FastEngine is an emulated engine that steps in about a millisecond, so that
// tests on the real clock finish quickly: lab/emulator's default shape with an
// 8,192-token context and a 1 ms step base.
func FastEngine() emulator.Config {
	c := emulator.DefaultConfig()
	c.MaxModelLen = 8192
	c.StepTime = emulator.StepTimeModel{Base: time.Millisecond, PerSeq: 10 * time.Microsecond, PerPrefillToken: time.Microsecond}
	return c
}

// StartEmulator serves one emulated vLLM V1 engine of shape engine, model name
// "test-model", on the real clock over httptest, until the test ends. It returns
// the server and its base URL (no trailing slash).
func StartEmulator(t testing.TB, engine emulator.Config) (*emulatorserver.Server, string) {
	t.Helper()
	return Serve(t, emulatorserver.Config{
		Engine: engine, Engines: 1, ModelName: "test-model", MetricNames: emulator.NamesV1,
		CharsPerToken: 4, Fault: emulatorserver.FaultNone, EnableAdmin: true, ShutdownTimeout: time.Second, Clock: clock.RealClock{},
	})
}

// Serve serves the emulator of cfg over httptest until the test ends. It
// returns the server and its base URL (no trailing slash).
func Serve(t testing.TB, cfg emulatorserver.Config) (*emulatorserver.Server, string) {
	t.Helper()
	srv, err := emulatorserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv.Start(ctx)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { cancel(); hs.Close() })
	return srv, hs.URL
}

// InFlight sends n streaming completions of 200 prompt and 400 output tokens
// (hundreds of engine steps each) to the emulator at url and waits until its
// first engine holds work. It returns a counter of the responses fully received
// with status 200, and a wait for all of them.
func InFlight(t testing.TB, srv *emulatorserver.Server, url string, n int) (*atomic.Int32, func()) {
	t.Helper()
	var finished atomic.Int32
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := http.Post(url+"/v1/completions", "application/json",
				strings.NewReader(`{"model":"test-model","prompt_tokens":200,"max_tokens":400,"stream":true}`))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != 200 || !bytes.Contains(body, []byte("[DONE]")) {
				t.Errorf("completion: %d, %v, ends %q", resp.StatusCode, err, body[max(0, len(body)-40):])
				return
			}
			finished.Add(1)
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for s := srv.Runners()[0].Snapshot(); s.Running+s.Waiting == 0; s = srv.Runners()[0].Snapshot() {
		if time.Now().After(deadline) {
			t.Fatal("the engine never started the requests")
		}
		time.Sleep(time.Millisecond)
	}
	return &finished, wg.Wait
}
