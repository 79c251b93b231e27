package flowgate

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// TestGateHoldsThenDispatches: with no engine every request waits in the gate and the
// queue gauge says how many; an engine appearing takes at most MaxOutstanding at once,
// first come first served; every held request is answered.
func TestGateHoldsThenDispatches(t *testing.T) {
	release := make(chan struct{})
	var inEngine, maxInEngine atomic.Int32
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := inEngine.Add(1)
		for {
			m := maxInEngine.Load()
			if n <= m || maxInEngine.CompareAndSwap(m, n) {
				break
			}
		}
		<-release
		inEngine.Add(-1)
		io.WriteString(w, "data: ok\n\n")
	}))
	defer engine.Close()
	var mu sync.Mutex
	var eps []string
	g := New(Options{Endpoints: func() []string { mu.Lock(); defer mu.Unlock(); return eps }, MaxOutstanding: 2, Pool: "pool-a", Model: "m", Recheck: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go g.Run(ctx)
	gw := httptest.NewServer(g)
	defer gw.Close()

	const n = 5
	var wg sync.WaitGroup
	var answered atomic.Int32
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(gw.URL+"/v1/completions", "application/json", strings.NewReader(`{}`))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			if b, _ := io.ReadAll(resp.Body); resp.StatusCode == http.StatusOK && strings.Contains(string(b), "ok") {
				answered.Add(1)
			}
		}()
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	poll("all 5 held", func() bool { return g.Held() == n })

	// The adapter reads the queue as it reads the real endpoint picker's.
	resp, err := http.Get(gw.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r, err := signals.NewExtractorWith(signals.ExtractOptions{GatewayMetrics: []string{signals.DefaultGatewayQueueMetric}}).Extract(body)
	if err != nil {
		t.Fatal(err)
	}
	in := policy.GatewayInput{Metric: signals.DefaultGatewayQueueMetric, Match: map[string]string{"inference_pool": "pool-a"}}
	if q, err := in.Queue(&r); err != nil || q != n {
		t.Fatalf("queue read by the adapter = %g %v, want %d\n%s", q, err, n, body)
	}

	mu.Lock()
	eps = []string{engine.URL}
	mu.Unlock()
	poll("2 dispatched, 3 held", func() bool { return inEngine.Load() == 2 && g.Held() == 3 })
	close(release)
	wg.Wait()
	// The gate books a request once its proxy returns, which can be just after the
	// client has read the whole answer.
	poll("every request booked", func() bool { served, errs := g.Served(); return served+errs == n })
	if answered.Load() != n || maxInEngine.Load() != 2 || g.Held() != 0 {
		t.Errorf("answered %d, at most %d in the engine at once, %d still held; want %d, 2, 0", answered.Load(), maxInEngine.Load(), g.Held(), n)
	}
	if served, errs := g.Served(); served != n || errs != 0 {
		t.Errorf("served %d errors %d", served, errs)
	}
}

// A client that gives up while held leaves the queue.
func TestGateCancelledWhileHeld(t *testing.T) {
	g := New(Options{Endpoints: func() []string { return nil }, MaxOutstanding: 1})
	gw := httptest.NewServer(g)
	defer gw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/completions", strings.NewReader(`{}`))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) { return g.Held() == 1, nil }); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) { return g.Held() == 0, nil }); err != nil {
		t.Fatalf("a cancelled request stayed held: %v", err)
	}
}

// TestGateReleasesAbandonedStreams: a client that stops reading mid-stream and hangs up
// (as a streaming client does at "data: [DONE]") makes the reverse proxy abort its
// handler; the engine's slot is released all the same, so the next request is
// dispatched instead of being held forever.
func TestGateReleasesAbandonedStreams(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := w.(http.Flusher)
		io.WriteString(w, "data: first\n\n")
		f.Flush()
		for i := 0; r.Context().Err() == nil && i < 200; i++ { // a long tail the client never reads
			io.WriteString(w, "data: "+strings.Repeat("x", 4096)+"\n\n")
			f.Flush()
			time.Sleep(5 * time.Millisecond)
		}
	}))
	defer engine.Close()
	g := New(Options{Endpoints: func() []string { return []string{engine.URL} }, MaxOutstanding: 1, Pool: "p", Model: "m", Recheck: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go g.Run(ctx)
	gw := httptest.NewServer(g)
	defer gw.Close()
	for i := range 3 {
		reqCtx, reqCancel := context.WithTimeout(ctx, 20*time.Second)
		req, _ := http.NewRequestWithContext(reqCtx, http.MethodPost, gw.URL+"/v1/completions", strings.NewReader(`{}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			reqCancel()
			t.Fatalf("request %d: %v (held forever: the first one's slot was never released)", i, err)
		}
		buf := make([]byte, 16)
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		reqCancel() // hang up mid-stream
		resp.Body.Close()
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.outstanding[engine.URL] == 0, nil
	}); err != nil {
		t.Errorf("outstanding = %d after every client hung up, want 0", g.outstanding[engine.URL])
	}
}
