package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/lab/trace"
)

// The trace ships in the repository's data/ (test/e2e/loadgen → ../../..).
var convTrace = filepath.Join("..", "..", "..", "data", "azure-llm-trace-2023", "AzureLLMInferenceTrace_conv.csv")

func TestFromTrace(t *testing.T) {
	tr, err := trace.ReadFile(convTrace)
	if err != nil {
		t.Fatal(err)
	}
	reqs := FromTrace(tr)
	// 19,366 requests over about 58 minutes (the data set's README).
	if len(reqs) != 19366 {
		t.Errorf("got %d requests, want 19366", len(reqs))
	}
	first, last := reqs[0], reqs[len(reqs)-1]
	if first.At != 0 || first.PromptTokens != 374 || first.OutputTokens != 44 {
		t.Errorf("first request = %+v, want {0 374 44}", first)
	}
	if last.At < 55*time.Minute || last.At > 60*time.Minute {
		t.Errorf("last request at %s, want about 58 min", last.At)
	}
	w := Window(reqs, 20*time.Minute, time.Minute)
	if len(w) == 0 || w[0].At < 0 || w[len(w)-1].At >= time.Minute {
		t.Errorf("window of %d requests spans %s..%s, want within [0, 1m)", len(w), w[0].At, w[len(w)-1].At)
	}
	c := Compress(w, 4)
	if c[len(c)-1].At != w[len(w)-1].At/4 {
		t.Errorf("compressed last offset %s, want %s", c[len(c)-1].At, w[len(w)-1].At/4)
	}
}

func TestStep(t *testing.T) {
	s := Step(time.Second, 4, 2*time.Second, 10, 20)
	if len(s) != 8 || s[0].At != time.Second || s[1].At != 1250*time.Millisecond || s[7].PromptTokens != 10 || s[7].OutputTokens != 20 {
		t.Errorf("Step = %+v", s)
	}
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5}, {0.95, 10}, {0.1, 1}, {0, 1}, {1, 10}} {
		if got := Percentile(ds, tc.q); got != tc.want {
			t.Errorf("Percentile(%g) = %d, want %d", tc.q, got, tc.want)
		}
	}
	if Percentile(nil, 0.5) != 0 {
		t.Error("Percentile of nothing is not 0")
	}
}

// fakeEngine streams n SSE chunks per request, one every tick, and counts requests.
type fakeEngine struct {
	mu    sync.Mutex
	count int
	srv   *httptest.Server
}

func newFakeEngine(t *testing.T, tick time.Duration) *fakeEngine {
	e := &fakeEngine{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.count++
		e.mu.Unlock()
		if r.URL.Path != "/v1/completions" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 3; i++ {
			time.Sleep(tick)
			fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"t%d\"}]}\n\n", i)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func TestGatewayLeastOutstanding(t *testing.T) {
	const tick = 50 * time.Millisecond
	a, b := newFakeEngine(t, tick), newFakeEngine(t, tick)
	g := New(Options{Endpoints: func() []string { return []string{a.srv.URL, b.srv.URL} }, Model: "m", PromptTokensField: "prompt_tokens"})
	// 10 requests at once: least outstanding first splits them 5/5.
	g.Run(context.Background(), Step(0, 1000, 10*time.Millisecond, 10, 3))
	res := g.Results()
	s := Summarize(res, time.Time{})
	if s.Requests != 10 || s.Errors != 0 {
		t.Fatalf("summary %s", s)
	}
	if a.count != 5 || b.count != 5 {
		t.Errorf("requests per endpoint %d/%d, want 5/5", a.count, b.count)
	}
	// Lower bounds only: the engine sleeps a tick before each of its three
	// tokens, and a busy machine can only add to what the client measures.
	for _, r := range res {
		if r.TTFT < tick || r.E2E < 3*tick || r.E2E <= r.TTFT {
			t.Errorf("TTFT %s, E2E %s: want TTFT >= one tick (%s), E2E >= three and after the first token", r.TTFT, r.E2E, tick)
		}
	}
	if g.Sent() != 10 || g.Inflight() != 0 {
		t.Errorf("sent %d inflight %d", g.Sent(), g.Inflight())
	}
}

func TestGatewayNoEndpoint(t *testing.T) {
	g := New(Options{Endpoints: func() []string { return nil }, MaxWait: 200 * time.Millisecond})
	g.Run(context.Background(), []Request{{PromptTokens: 1, OutputTokens: 1}})
	s := Summarize(g.Results(), time.Time{})
	if s.Errors != 1 || !strings.Contains(s.FirstError.Error(), "no Ready endpoint") {
		t.Errorf("summary %s, want one 'no Ready endpoint' error", s)
	}
}

// Poisson arrivals: the rate and the span they promise, repeatable for a seed.
func TestPoisson(t *testing.T) {
	a := Poisson(time.Second, 4, 500*time.Second, 100, 10, 7)
	if n := len(a); n < 1800 || n > 2200 {
		t.Errorf("%d arrivals in 500 s at 4/s, want about 2000", n)
	}
	for i, r := range a {
		if r.At < time.Second || r.At >= 501*time.Second || (i > 0 && r.At < a[i-1].At) || r.PromptTokens != 100 || r.OutputTokens != 10 {
			t.Fatalf("arrival %d = %+v out of order or range", i, r)
		}
	}
	b := Poisson(time.Second, 4, 500*time.Second, 100, 10, 7)
	if len(a) != len(b) || a[len(a)-1] != b[len(b)-1] {
		t.Error("the same seed gave different arrivals")
	}
}
