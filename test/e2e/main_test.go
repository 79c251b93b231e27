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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/flowgate"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/nodeagent"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// stubImage runs this test binary as a minimal engine (TestMain below): /health and a vLLM
// /metrics whose values the test sets, enough to test the harness and the adapter's
// missing-data rules without the emulator's dynamics.
const stubImage = "e2e/stub-engine"

func TestMain(m *testing.M) {
	addr, waiting := "", "0"
	for _, a := range os.Args[1:] {
		if v, ok := strings.CutPrefix(a, "stub-engine-addr="); ok {
			addr = v
		}
		if v, ok := strings.CutPrefix(a, "stub-waiting="); ok {
			waiting = v
		}
	}
	if addr != "" {
		os.Exit(serveStub(addr, waiting))
	}
	if gw, ok, err := flowgate.PodArgs(os.Args[1:]); ok || err != nil {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		gw.Model = stack.Model
		os.Exit(serveGateway(gw))
	}
	os.Exit(m.Run())
}

// gatewayImage runs this test binary as a flow-controlled gateway (flowgate) in front of
// the Ready pods of a selector, as the inference extension's endpoint picker runs.
const gatewayImage = "e2e/flow-gateway"

// serveGateway runs the flow-controlled gateway of the pod mode (flowgate.RunPod).
func serveGateway(o flowgate.PodOptions) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := flowgate.RunPod(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// serveStub serves a one-engine vLLM /metrics with `waiting` requests waiting (container
// arg stub-waiting=N), nothing running and no KV in use. POST /admin/set?waiting=N changes
// the queue; POST /admin/fault?mode=metrics-500|none makes /metrics fail or recover, as
// the emulator's switch does.
func serveStub(addr, waiting string) int {
	var mu sync.Mutex
	failing := false
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		fail, q := failing, waiting
		mu.Unlock()
		if fail {
			http.Error(w, "stub fault", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"stub\",engine=\"0\"} 0\n"+
			"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"stub\",engine=\"0\"} "+q+"\n"+
			"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"stub\",engine=\"0\"} 0\n")
	})
	mux.HandleFunc("POST /admin/set", func(w http.ResponseWriter, r *http.Request) {
		v := r.URL.Query().Get("waiting")
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			http.Error(w, "waiting must be a number", http.StatusBadRequest)
			return
		}
		mu.Lock()
		waiting = v
		mu.Unlock()
	})
	mux.HandleFunc("POST /admin/fault", func(w http.ResponseWriter, r *http.Request) {
		mode := r.URL.Query().Get("mode")
		if mode != "none" && mode != "metrics-500" {
			http.Error(w, "mode must be none or metrics-500", http.StatusBadRequest)
			return
		}
		mu.Lock()
		failing = mode == "metrics-500"
		mu.Unlock()
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

// gatewayEngine is the node-agent engine for gatewayImage: the container's args choose the
// cluster (gateway-kubeconfig=…), the pods (gateway-selector=…), the pool label and the
// per-engine limit.
func gatewayEngine(t *testing.T) nodeagent.Engine {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return nodeagent.Engine{Binary: self, Args: []string{"gateway-addr=$(POD_IP):$(PORT)", "gateway-namespace=$(POD_NAMESPACE)"}}
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
	o.ExtraEngines[gatewayImage] = gatewayEngine(t)
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
