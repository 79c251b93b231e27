package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/saturation-adapter/saturation-adapter/internal/doctest"
	"github.com/saturation-adapter/saturation-adapter/internal/testfixture"
	"github.com/saturation-adapter/saturation-adapter/internal/testfixture/emulated"
)

// runAsDrain makes this test binary behave as the drain binary (main.go) when
// set in its environment: `drain install` copies the running executable, and the
// tests run that copy as a preStop hook would.
const runAsDrain = "SATURATION_ADAPTER_TEST_RUN_AS_DRAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runAsDrain) == "1" {
		// As cmd/drain/main.go does.
		if err := NewCommand(BinaryName).Execute(); err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
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

// The example's pattern, run as written: an initContainer running the drain
// image's `drain install DIR` into an emptyDir, and the engine container's
// preStop running DIR/drain with a deadline inside the grace period.
func TestVLLMExampleDrainPattern(t *testing.T) {
	d := vllmExample(t)
	spec := d.Spec.Template.Spec
	if len(spec.InitContainers) != 1 || len(spec.Containers) != 1 {
		t.Fatalf("want one initContainer and one container, got %d and %d", len(spec.InitContainers), len(spec.Containers))
	}
	initC, engine := spec.InitContainers[0], spec.Containers[0]
	if len(initC.Args) != 2 || initC.Args[0] != "install" {
		t.Fatalf("initContainer args %q, want [install DIR]", initC.Args)
	}
	dir := initC.Args[1]
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
	if len(preStop) < 1 || preStop[0] != filepath.Join(dir, BinaryName) {
		t.Fatalf("preStop %q, want [%s ...]", preStop, filepath.Join(dir, BinaryName))
	}
	drain := NewCommand(BinaryName)
	if err := drain.ParseFlags(preStop[1:]); err != nil {
		t.Fatalf("preStop flags %q: %v", preStop[1:], err)
	}
	timeout, _ := drain.Flags().GetDuration("timeout")
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	if timeout+30*time.Second > grace {
		t.Errorf("preStop --timeout=%s leaves less than 30s of terminationGracePeriodSeconds (%s) for vLLM's own shutdown", timeout, grace)
	}

	// Run both as the kubelet would, with the engine's URL pointed at the emulator.
	tmp := t.TempDir()
	installed := runDrain(t, "", append(initC.Args[:1:1], tmp)...)
	if want := "installed " + filepath.Join(tmp, BinaryName); !strings.HasPrefix(installed.stdout, want) || installed.err != nil {
		t.Fatalf("drain install: %v\nstdout %q, want it to start with %q\nstderr %s", installed.err, installed.stdout, want, installed.stderr)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	assertSameFile(t, self, filepath.Join(tmp, BinaryName))

	srv, url := emulated.StartEmulator(t, emulated.FastEngine())
	finished, wait := emulated.InFlight(t, srv, url, 4)
	defer wait()
	args := append(append([]string{}, preStop[1:]...), "--url="+url+"/metrics")
	res := runDrain(t, filepath.Join(tmp, BinaryName), args...)
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
	if res := runDrain(t, "", "install", tmp); res.err != nil {
		t.Fatalf("drain install: %v: %s", res.err, res.stderr)
	}
	busy := &testfixture.Scripted{Script: []testfixture.Response{{Status: 200, Body: testfixture.Sample(t, "llm-d-inference-sim_v0.10.2_load.prom")}}}
	srv := httptest.NewServer(busy)
	defer srv.Close()
	res := runDrain(t, filepath.Join(tmp, BinaryName), "--url="+srv.URL+"/metrics",
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
	res := runDrain(t, "", "install", filepath.Join(t.TempDir(), "missing"))
	if res.err == nil || !strings.Contains(res.stderr, "error: installing into ") {
		t.Errorf("install into a missing directory: %v, stderr %q", res.err, res.stderr)
	}
	res = runDrain(t, "", "install")
	if res.err == nil || !strings.Contains(res.stderr, "accepts 1 arg(s), received 0") {
		t.Errorf("install without DIR: %v, stderr %q", res.err, res.stderr)
	}
}

type result struct {
	stdout, stderr string
	err            error
}

// runDrain runs binary (default: this test binary) as the adapter command
// with args, as a separate process.
func runDrain(t *testing.T, binary string, args ...string) result {
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
	cmd.Env = append(os.Environ(), runAsDrain+"=1")
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
	if diff := cmp.Diff([]string{BinaryName}, names); diff != "" {
		t.Errorf("install left other files (-want +got):\n%s", diff)
	}
}

// drainDoc is the drain helper's page, relative to the repository's root.
const drainDoc = "docs/drain.md"

// drainDocText returns drainDoc.
func drainDocText(t *testing.T) string {
	t.Helper()
	return doctest.Read(t, "../../..", drainDoc)
}

// The drain page's flag table lists every flag with its real default.
func TestDrainFlagsDocumented(t *testing.T) {
	section := drainDocText(t)
	documented := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		if cells := strings.Split(line, "|"); len(cells) > 3 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`--") {
			documented[strings.Trim(strings.TrimSpace(cells[1]), "`-")] = strings.Trim(strings.TrimSpace(cells[2]), "`")
		}
	}
	got := map[string]string{}
	NewCommand(BinaryName).Flags().VisitAll(func(f *pflag.Flag) {
		got[f.Name] = f.DefValue
		// Durations compare by value: the page says 10m where the flag says 10m0s.
		if want, err := time.ParseDuration(documented[f.Name]); err == nil {
			if d, err := time.ParseDuration(f.DefValue); err == nil && d == want {
				got[f.Name] = documented[f.Name]
			}
		}
	})
	if diff := cmp.Diff(documented, got); diff != "" {
		t.Errorf("%s's drain flags (-documented +command):\n%s", drainDoc, diff)
	}
}

// TestDrainDocCommands runs the `drain` commands of the drain page's ```sh blocks
// as written, through the root command: --help names every flag and both
// commands a pod runs, --version prints the binary's name and version.
func TestDrainDocCommands(t *testing.T) {
	cmds := doctest.Commands(t, drainDoc, drainDocText(t), "`drain`: let vLLM finish before a scale-down stops it", BinaryName)
	ran := map[string]bool{}
	for _, c := range cmds {
		cmd := NewCommand(BinaryName)
		var out bytes.Buffer
		cmd.SetArgs(c.Args)
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("%s: %v\n%s", c.Line, err, out.String())
		}
		var want []string
		switch {
		case slices.Contains(c.Args, "--help"):
			want = []string{"drain install DIR", "/drain/drain --timeout=4m30s"}
			cmd.Flags().VisitAll(func(f *pflag.Flag) { want = append(want, "--"+f.Name) })
		case slices.Contains(c.Args, "--version"):
			want = []string{BinaryName + " "}
		default:
			t.Errorf("%s line %d: %s: no check for this command", drainDoc, c.Block.Line, c.Line)
		}
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s prints no %q:\n%s", c.Line, w, out.String())
			}
		}
		ran[c.Args[0]] = true
	}
	if !ran["--help"] || !ran["--version"] {
		t.Errorf("%s: ran %v, want drain --help and drain --version", drainDoc, ran)
	}
}
