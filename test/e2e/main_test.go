// Package e2e holds the end-to-end tests: a real kube-apiserver and
// kube-controller-manager on loopback, the adapter binary registered as the external
// metrics API, engine emulators run as pods by a node agent, and a native HPA scaling them.
// Run through `make test-e2e`, which builds the binaries and sets E2E_TOOLS_DIR and
// E2E_BIN_DIR.
package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/nodeagent"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// stubImage runs this test binary as a minimal engine (TestMain below): /health and an idle
// vLLM /metrics, enough to test the harness without the emulator.
const stubImage = "e2e/stub-engine"

func TestMain(m *testing.M) {
	for _, a := range os.Args[1:] {
		if addr, ok := strings.CutPrefix(a, "stub-engine-addr="); ok {
			os.Exit(serveStub(addr))
		}
	}
	os.Exit(m.Run())
}

func serveStub(addr string) int {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"stub\",engine=\"0\"} 0\n"+
			"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"stub\",engine=\"0\"} 0\n"+
			"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"stub\",engine=\"0\"} 0\n")
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// stubEngine is the node-agent engine for stubImage.
func stubEngine(t *testing.T) nodeagent.Engine {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return nodeagent.Engine{Binary: self, Args: []string{"stub-engine-addr=$(POD_IP):$(PORT)"}}
}

// startStack starts the stack for one test and tears it down when the test ends, printing
// the component logs if it failed.
func startStack(t *testing.T, o stack.Options) *stack.Stack {
	t.Helper()
	tools, bin, err := stack.DirsFromEnv()
	if err != nil {
		t.Skip(err)
	}
	o.ToolsDir, o.BinDir = tools, bin
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if o.Namespace == "" {
		o.Namespace = "e2e"
	}
	if o.HPASyncPeriod == 0 {
		o.HPASyncPeriod = 3 * time.Second
	}
	if o.Logf == nil {
		o.Logf = func(f string, args ...any) { t.Logf(time.Now().Format("15:04:05.000 ")+f, args...) }
	}
	if o.ExtraEngines == nil {
		o.ExtraEngines = map[string]nodeagent.Engine{}
	}
	o.ExtraEngines[stubImage] = stubEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, o)
	if err != nil {
		t.Fatalf("starting stack: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("component logs (dir %s):\n%s", o.Dir, s.Logs(6000))
		}
		s.Stop()
	})
	return s
}
