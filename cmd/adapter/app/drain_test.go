package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-base/cli"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/yaml"

	emulatorapp "github.com/saturation-adapter/saturation-adapter/cmd/emulator/app"
	"github.com/saturation-adapter/saturation-adapter/pkg/emulator"
)

// runAsAdapter makes this test binary behave as the adapter binary (main.go)
// when set in its environment: `drain install` copies the running executable,
// and the tests run that copy as a preStop hook would.
const runAsAdapter = "SATURATION_ADAPTER_TEST_RUN_AS_ADAPTER"

func TestMain(m *testing.M) {
	if os.Getenv(runAsAdapter) == "1" {
		// As cmd/adapter/main.go does.
		if err := cli.RunNoErrOutput(NewCommand(context.Background())); err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Real /metrics bodies: the idle vLLM V1 dump (0 running, 0 waiting) and
// llm-d-inference-sim under load (2 running, 4 waiting).
func sampleBody(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(samples, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// scripted serves one response per GET from script, repeating the last.
type scripted struct {
	mu     sync.Mutex
	script []response
	gets   int
}

type response struct {
	status int
	body   []byte
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	r := s.script[min(s.gets, len(s.script)-1)]
	s.gets++
	s.mu.Unlock()
	w.WriteHeader(r.status)
	w.Write(r.body)
}

func (s *scripted) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets
}

// runDrain runs Drain on a fake clock, stepping it by the interval whenever
// Drain waits, and returns its output, the fake time it took and its error.
func runDrain(t *testing.T, o DrainOptions) (string, time.Duration, error) {
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
	idle := response{200, sampleBody(t, "vllm_v1-0.10-nvcr25.09_single-engine.prom")}
	busy := response{200, sampleBody(t, "llm-d-inference-sim_v0.10.2_load.prom")}
	failing := response{500, []byte("engine error")}
	noEngine := response{200, []byte("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12\n")}
	tests := []struct {
		name     string
		script   []response
		minWait  time.Duration
		timeout  time.Duration
		wantErr  string
		wantGets int
		wantOut  string
	}{
		{"busy, then idle twice", []response{busy, busy, idle, idle}, 0, time.Minute, "", 4, "drained: nothing running or waiting"},
		{"one zero reading is not enough", []response{busy, idle, busy, idle, idle}, 0, time.Minute, "", 5, "2 running, 4 waiting"},
		{"idle at once, but not before --min-wait", []response{idle}, 5 * time.Second, time.Minute, "", 6, "drained"},
		{"errors do not count, then recovers", []response{failing, idle, failing, idle, idle}, 0, time.Minute, "", 5, "cannot read"},
		{"still busy at the deadline", []response{busy}, 0, 5 * time.Second,
			"not drained after 5s (--timeout): 2 running and 4 waiting requests at ", 6, ""},
		{"HTTP errors until the deadline", []response{busy, failing}, 0, 5 * time.Second,
			"the engine at URL could not be read for the last 4s: HTTP 500 Internal Server Error", 6, ""},
		{"not an engine", []response{noEngine}, 0, 3 * time.Second, "no LLM engine saturation metrics found", 4, ""},
		{"idle only at the deadline", []response{busy, busy, idle}, 0, 2 * time.Second, "became idle only 0s ago (1s needed)", 3, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &scripted{script: tt.script}
			srv := httptest.NewServer(s)
			defer srv.Close()
			o := DrainOptions{URL: srv.URL + "/metrics", Interval: time.Second, Timeout: tt.timeout, MinWait: tt.minWait}
			out, _, err := runDrain(t, o)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Drain() = %v\noutput:\n%s", err, out)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), strings.ReplaceAll(tt.wantErr, "URL", o.URL))):
				t.Fatalf("Drain() = %v, want an error containing %q\noutput:\n%s", err, tt.wantErr, out)
			}
			if got := s.count(); got != tt.wantGets {
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
	out, took, err := runDrain(t, DrainOptions{URL: "http://" + addr + "/metrics", Interval: time.Second, Timeout: time.Minute, MinWait: 10 * time.Second})
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
		mutate func(*DrainOptions)
		want   []string
	}{
		{"defaults", func(*DrainOptions) {}, nil},
		{"relative URL", func(o *DrainOptions) { o.URL = "/metrics" }, []string{`--url="/metrics"`}},
		{"interval above timeout, min-wait too long", func(o *DrainOptions) { o.Interval = time.Hour; o.MinWait = time.Hour },
			[]string{"--interval=1h0m0s: must be > 0 and at most --timeout (10m0s)", "--min-wait=1h0m0s"}},
		{"no timeout", func(o *DrainOptions) { o.Timeout = 0; o.MinWait = 0 }, []string{"--timeout=0s", "--interval=1s", "--min-wait=0s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewDrainOptions()
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

// startEmulator serves an emulated vLLM engine that steps in about a
// millisecond, on the real clock.
func startEmulator(t *testing.T) (*emulatorapp.Server, string) {
	t.Helper()
	cfg := emulator.DefaultConfig()
	cfg.MaxModelLen = 8192
	cfg.StepTime = emulator.StepTimeModel{Base: time.Millisecond, PerSeq: 10 * time.Microsecond, PerPrefillToken: time.Microsecond}
	srv, err := emulatorapp.NewServer(emulatorapp.Config{
		Engine: cfg, Engines: 1, ModelName: "test-model", Dialect: emulator.DialectV1,
		CharsPerToken: 4, Fault: emulatorapp.FaultNone, ShutdownTimeout: time.Second, Clock: clock.RealClock{},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv.Start(ctx)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { cancel(); hs.Close() })
	return srv, hs.URL
}

// inFlight sends n completions that each take hundreds of engine steps and
// returns a counter of the responses fully received with status 200, and a
// wait for all of them.
func inFlight(t *testing.T, srv *emulatorapp.Server, url string, n int) (*atomic.Int32, func()) {
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
	// Drain starts only once the engine has work.
	deadline := time.Now().Add(30 * time.Second)
	for s := srv.Runners()[0].Snapshot(); s.Running+s.Waiting == 0; s = srv.Runners()[0].Snapshot() {
		if time.Now().After(deadline) {
			t.Fatal("the engine never started the requests")
		}
		time.Sleep(time.Millisecond)
	}
	return &finished, wg.Wait
}

// Against the emulated vLLM engine with requests in flight, drain returns only
// once every response has reached its client.
func TestDrainEmulatorWaitsForInFlightRequests(t *testing.T) {
	srv, url := startEmulator(t)
	const n = 8
	finished, wait := inFlight(t, srv, url, n)
	defer wait()
	var out bytes.Buffer
	o := DrainOptions{URL: url + "/metrics", Interval: 100 * time.Millisecond, Timeout: 2 * time.Minute}
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

// vllmExample reads manifests/examples/vllm-deployment.yaml.
func vllmExample(t *testing.T) *appsv1.Deployment {
	t.Helper()
	b, err := os.ReadFile("../../../manifests/examples/vllm-deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(b, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// The example's pattern, run as written: an initContainer running the adapter
// image's `drain install DIR` into an emptyDir, and the engine container's
// preStop running DIR/adapter drain with a deadline inside the grace period.
func TestVLLMExampleDrainPattern(t *testing.T) {
	d := vllmExample(t)
	spec := d.Spec.Template.Spec
	if len(spec.InitContainers) != 1 || len(spec.Containers) != 1 {
		t.Fatalf("want one initContainer and one container, got %d and %d", len(spec.InitContainers), len(spec.Containers))
	}
	initC, engine := spec.InitContainers[0], spec.Containers[0]
	if len(initC.Args) != 3 || initC.Args[0] != "drain" || initC.Args[1] != "install" {
		t.Fatalf("initContainer args %q, want [drain install DIR]", initC.Args)
	}
	dir := initC.Args[2]
	mountOf := func(c corev1.Container) string {
		for _, m := range c.VolumeMounts {
			for _, v := range spec.Volumes {
				if v.Name == m.Name && v.EmptyDir != nil {
					return m.Name + ":" + m.MountPath
				}
			}
		}
		return ""
	}
	if got, want := mountOf(initC), mountOf(engine); got == "" || got != want || !strings.HasSuffix(got, ":"+dir) {
		t.Errorf("emptyDir mounts: initContainer %q, engine %q; want the same emptyDir at %s in both", got, want, dir)
	}
	if engine.Lifecycle == nil || engine.Lifecycle.PreStop == nil || engine.Lifecycle.PreStop.Exec == nil {
		t.Fatal("engine container has no exec preStop")
	}
	preStop := engine.Lifecycle.PreStop.Exec.Command
	if len(preStop) < 2 || preStop[0] != filepath.Join(dir, InstalledBinaryName) || preStop[1] != "drain" {
		t.Fatalf("preStop %q, want [%s drain ...]", preStop, filepath.Join(dir, InstalledBinaryName))
	}
	drain := newDrainCommand()
	if err := drain.ParseFlags(preStop[2:]); err != nil {
		t.Fatalf("preStop flags %q: %v", preStop[2:], err)
	}
	timeout, _ := drain.Flags().GetDuration("timeout")
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	if timeout+30*time.Second > grace {
		t.Errorf("preStop --timeout=%s leaves less than 30s of terminationGracePeriodSeconds (%s) for vLLM's own shutdown", timeout, grace)
	}

	// Run both as the kubelet would, with the engine's URL pointed at the emulator.
	tmp := t.TempDir()
	installed := runAdapter(t, "", append(initC.Args[:2:2], tmp)...)
	if want := "installed " + filepath.Join(tmp, InstalledBinaryName); !strings.HasPrefix(installed.stdout, want) || installed.err != nil {
		t.Fatalf("drain install: %v\nstdout %q, want it to start with %q\nstderr %s", installed.err, installed.stdout, want, installed.stderr)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	assertSameFile(t, self, filepath.Join(tmp, InstalledBinaryName))

	srv, url := startEmulator(t)
	finished, wait := inFlight(t, srv, url, 4)
	defer wait()
	args := append(append([]string{}, preStop[1:]...), "--url="+url+"/metrics")
	res := runAdapter(t, filepath.Join(tmp, InstalledBinaryName), args...)
	if res.err != nil || !strings.Contains(res.stdout, "drained: nothing running or waiting") {
		t.Fatalf("preStop %q: %v\nstdout:\n%s\nstderr:\n%s", args, res.err, res.stdout, res.stderr)
	}
	if got := finished.Load(); got != 4 {
		t.Errorf("preStop returned with %d of 4 responses complete", got)
	}
}

// At the deadline the installed binary exits 1, naming what is still in flight.
func TestInstalledDrainFailsAtDeadline(t *testing.T) {
	tmp := t.TempDir()
	if res := runAdapter(t, "", "drain", "install", tmp); res.err != nil {
		t.Fatalf("drain install: %v: %s", res.err, res.stderr)
	}
	busy := &scripted{script: []response{{200, sampleBody(t, "llm-d-inference-sim_v0.10.2_load.prom")}}}
	srv := httptest.NewServer(busy)
	defer srv.Close()
	res := runAdapter(t, filepath.Join(tmp, InstalledBinaryName), "drain", "--url="+srv.URL+"/metrics",
		"--interval=100ms", "--timeout=1s", "--min-wait=0s")
	var exit *exec.ExitError
	if !errors.As(res.err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1\nstderr:\n%s", res.err, res.stderr)
	}
	want := "error: not drained after 1s (--timeout): 2 running and 4 waiting requests at " + srv.URL + "/metrics"
	// (A -race build logs a line of its own first.)
	if !strings.Contains(res.stderr, "\n"+want) && !strings.HasPrefix(res.stderr, want) {
		t.Errorf("stderr %q\nwant a line starting with %q", res.stderr, want)
	}
}

func TestDrainInstallErrors(t *testing.T) {
	res := runAdapter(t, "", "drain", "install", filepath.Join(t.TempDir(), "missing"))
	if res.err == nil || !strings.Contains(res.stderr, "error: installing into ") {
		t.Errorf("install into a missing directory: %v, stderr %q", res.err, res.stderr)
	}
	res = runAdapter(t, "", "drain", "install")
	if res.err == nil || !strings.Contains(res.stderr, "accepts 1 arg(s), received 0") {
		t.Errorf("install without DIR: %v, stderr %q", res.err, res.stderr)
	}
}

type result struct {
	stdout, stderr string
	err            error
}

// runAdapter runs binary (default: this test binary) as the adapter command
// with args, as a separate process.
func runAdapter(t *testing.T, binary string, args ...string) result {
	t.Helper()
	if binary == "" {
		var err error
		if binary, err = os.Executable(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), runAsAdapter+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return result{stdout.String(), stderr.String(), err}
}

func assertSameFile(t *testing.T, want, got string) {
	t.Helper()
	a, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) || fi.Mode().Perm() != 0o755 {
		t.Errorf("%s: %d bytes, mode %v; want a copy of %s (%d bytes), mode 0755", got, len(b), fi.Mode().Perm(), want, len(a))
	}
	entries, err := os.ReadDir(filepath.Dir(got))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{InstalledBinaryName}, names); diff != "" {
		t.Errorf("install left other files (-want +got):\n%s", diff)
	}
}

// The README's drain flag table lists every flag with its real default.
func TestDrainFlagsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## `adapter drain`")
	if !ok {
		t.Fatal("README has no adapter drain section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	documented := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		if cells := strings.Split(line, "|"); len(cells) > 3 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`--") {
			documented[strings.Trim(strings.TrimSpace(cells[1]), "`-")] = strings.Trim(strings.TrimSpace(cells[2]), "`")
		}
	}
	got := map[string]string{}
	newDrainCommand().Flags().VisitAll(func(f *pflag.Flag) {
		got[f.Name] = f.DefValue
		// Durations compare by value: the README says 10m where the flag says 10m0s.
		if want, err := time.ParseDuration(documented[f.Name]); err == nil {
			if d, err := time.ParseDuration(f.DefValue); err == nil && d == want {
				got[f.Name] = documented[f.Name]
			}
		}
	})
	if diff := cmp.Diff(documented, got); diff != "" {
		t.Errorf("README drain flags (-README +command):\n%s", diff)
	}
}
