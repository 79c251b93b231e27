package layering

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/saturation-adapter/saturation-adapter/"

// The two wings. The server wing turns engines' /metrics (or Prometheus series)
// into External metric values; the lab wing simulates fleets, calibrates engines
// and emulates vLLM. The core they share is what a signal is: pkg/signals
// (bytes → readings), pkg/history (readings over time → windows and engine
// facts) and pkg/policy (the metric catalog, per-pod evaluation and pooling),
// with internal/excerpt, which makes what a pod sent safe to put in a message.
// Neither wing imports the other.
var (
	core = []string{"pkg/signals", "pkg/history", "pkg/policy", "internal/excerpt"}
	// The policy file is the users' catalog: the server serves it, the lab
	// replays it. It validates label selectors, so it is beside the core, not in it.
	policyFile = []string{"pkg/config"}
	server     = []string{"pkg/hpaindex", "pkg/scrape", "pkg/podselect", "pkg/prometheus", "pkg/provider",
		"pkg/advisor", "pkg/apiservice", "pkg/servingcert"}
	lab = []string{"lab/trace", "lab/hpa", "lab/chart", "lab/emulator", "lab/emulator/server", "lab/simulate", "lab/calibrate", "lab/scoreboard"}
)

func join(sets ...[]string) []string { return slices.Concat(sets...) }

// allowed lists, for every package of the module, the project packages it may
// depend on, directly or not. The server wing is in the order of the data flow,
// pods → scrape or Prometheus → signals → pool → provider → HPA: a package may
// depend only on what comes before it. A package missing from this map fails
// TestEveryPackageHasALayer: adding one means deciding where it sits.
var allowed = map[string][]string{
	// Core: bytes in, numbers out, in the order of the data flow.
	"pkg/signals": {"internal/excerpt"},
	"pkg/history": {"pkg/signals", "internal/excerpt"},
	"pkg/policy":  {"pkg/signals", "pkg/history", "internal/excerpt"},

	// Server wing.
	"pkg/apiservice":  {},
	"pkg/servingcert": {"pkg/apiservice"},
	"pkg/config":      core,
	"pkg/scrape":      {"pkg/signals", "pkg/history", "internal/excerpt"},
	// The one index of HPAs (what they ask of External metrics), from the
	// informer's events; it knows nothing of the adapter's metrics.
	"pkg/hpaindex":  {},
	"pkg/podselect": {"pkg/hpaindex", "pkg/scrape", "pkg/signals", "pkg/history", "internal/excerpt"},
	// A source beside pkg/scrape: it reads Prometheus, never the provider.
	"pkg/prometheus": join(core, []string{"pkg/hpaindex", "pkg/podselect", "pkg/scrape", "internal/excerpt"}),
	"pkg/provider":   join(core, []string{"pkg/hpaindex", "pkg/podselect", "pkg/scrape", "internal/excerpt"}),
	// Watches HPAs beside the provider; it reads policies and the HPA index,
	// never the provider.
	"pkg/advisor": join(core, []string{"pkg/hpaindex"}),

	// The drain binary's package: the engine's own /metrics, read as signals.
	"pkg/drain": {"pkg/signals", "internal/excerpt"},

	// Lab wing.
	"lab/trace":           {},
	"lab/hpa":             {},
	"lab/emulator":        {"lab/trace"},
	"lab/emulator/server": {"lab/emulator", "lab/trace"},
	"lab/chart":           {},
	"lab/simulate":        join(core, []string{"lab/emulator", "lab/hpa", "lab/trace", "lab/chart"}),
	"lab/calibrate":       join(core, []string{"lab/emulator", "lab/hpa", "lab/simulate", "lab/trace", "lab/chart"}),
	"lab/scoreboard":      join(core, []string{"lab/emulator", "lab/hpa", "lab/simulate", "lab/trace", "lab/chart"}),

	// Commands: each binary takes its own wing. The adapter keeps the drain
	// command as a deprecated alias for one release (cmd/drain/app).
	"cmd/internal/setpoints": core,
	"cmd/internal/help":      {},
	"cmd/drain/app":          {"pkg/drain", "pkg/signals", "internal/excerpt"},
	"cmd/drain":              {"cmd/drain/app", "pkg/drain", "pkg/signals", "internal/excerpt"},
	"cmd/adapter/app":        join(core, policyFile, server, []string{"internal/excerpt", "cmd/internal/setpoints", "cmd/internal/help", "cmd/drain/app", "pkg/drain"}),
	"cmd/adapter":            join(core, policyFile, server, []string{"internal/excerpt", "cmd/internal/setpoints", "cmd/internal/help", "cmd/drain/app", "pkg/drain", "cmd/adapter/app"}),
	"cmd/lab/app":            join(core, policyFile, lab, []string{"cmd/internal/setpoints", "cmd/internal/help"}),
	"cmd/lab":                join(core, policyFile, lab, []string{"cmd/internal/setpoints", "cmd/internal/help", "cmd/lab/app"}),

	// Support: helpers with no project dependency, test-only packages, tools.
	"internal/excerpt":              {},
	"internal/shdoc":                {},
	"internal/logstyle":             {},
	"internal/metricdocs":           {},
	"internal/layering":             {},
	"internal/doctest":              {"internal/shdoc"},
	"internal/testfixture":          {},
	"internal/testfixture/emulated": {"lab/emulator", "lab/emulator/server", "lab/trace"},
	"hack":                          {},
	"hack/benchscale": join(core, policyFile, server, []string{"internal/excerpt", "cmd/internal/setpoints", "cmd/internal/help", "cmd/drain/app", "pkg/drain",
		"cmd/adapter/app"}),
	"manifests": {},
}

// wings are the groups that must never depend on each other, with the reason
// a violation is reported under.
var wings = []struct {
	name    string
	members func(pkg string) bool
	forbid  []string
	reason  string
}{
	{"server wing", func(p string) bool { return slices.Contains(server, p) || strings.HasPrefix(p, "cmd/adapter") },
		lab, "the server wing must not import the lab wing"},
	{"lab wing", func(p string) bool { return strings.HasPrefix(p, "lab/") || strings.HasPrefix(p, "cmd/lab") },
		server, "the lab wing must not import the server wing"},
	{"drain binary", func(p string) bool { return strings.HasPrefix(p, "cmd/drain") || p == "pkg/drain" },
		join(server, policyFile, lab), "the drain binary is copied into every engine pod: it takes pkg/signals and nothing else"},
}

// graph maps each package of the module (relative to the module path) to the
// module's packages it depends on, directly or not.
type graph map[string][]string

// loadGraph runs go list on patterns (from the module's root) with an optional
// overlay file and returns the dependency graph of the packages it lists.
func loadGraph(t *testing.T, overlay string, patterns ...string) graph {
	t.Helper()
	args := []string{"list", "-e", "-json=ImportPath,Deps,Error"}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	cmd := exec.Command("go", append(args, patterns...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	g := graph{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath string
			Deps       []string
			Error      *struct{ Err string }
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		rel, ours := strings.CutPrefix(p.ImportPath, module)
		if !ours {
			continue
		}
		var deps []string
		for _, d := range p.Deps {
			if r, ok := strings.CutPrefix(d, module); ok {
				deps = append(deps, r)
			}
		}
		g[rel] = deps
	}
	return g
}

// violations returns every edge of g that its rules forbid, and every package
// that has no rule, one line each, sorted.
func violations(g graph) []string {
	var out []string
	for pkg, deps := range g {
		ok, known := allowed[pkg]
		if !known {
			out = append(out, fmt.Sprintf("%s has no layer: add it to allowed in internal/layering with what it may depend on", pkg))
			continue
		}
		for _, dep := range deps {
			if !slices.Contains(ok, dep) {
				out = append(out, fmt.Sprintf("%s depends on %s, which it must not (allowed: %v)", pkg, dep, ok))
			}
		}
		for _, w := range wings {
			if !w.members(pkg) {
				continue
			}
			for _, dep := range deps {
				if slices.Contains(w.forbid, dep) {
					out = append(out, fmt.Sprintf("%s depends on %s: %s", pkg, dep, w.reason))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestNoPackageReachesBackwards checks every package of the module, found by go
// list (not a list kept by hand), against its layer and the wings rule.
func TestNoPackageReachesBackwards(t *testing.T) {
	g := loadGraph(t, "", "./...")
	if len(g) < len(allowed)/2 {
		t.Fatalf("go list found %d packages, fewer than half of the %d with a layer", len(g), len(allowed))
	}
	for _, v := range violations(g) {
		t.Error(v)
	}
	for pkg := range allowed {
		if _, ok := g[pkg]; !ok {
			t.Errorf("allowed names %s, which is no package of the module any more", pkg)
		}
	}
}

// TestCatchesBackwardImports adds imports that break the layering to the real
// tree through go list's -overlay (no file of the checkout changes) and expects
// each to be reported: a server package reaching up the data flow, a lab package
// reaching into the server wing, the drain binary growing a server dependency,
// and a new package nobody placed.
func TestCatchesBackwardImports(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, file, pkg, imports, want string
	}{
		{"server reaches up the flow", "pkg/advisor/zz_backward.go", "advisor", "pkg/provider",
			"advisor depends on pkg/provider, which it must not"},
		{"lab reaches into the server", "lab/simulate/zz_backward.go", "simulate", "pkg/scrape",
			"lab/simulate depends on pkg/scrape: the lab wing must not import the server wing"},
		{"server reaches into the lab", "pkg/provider/zz_backward.go", "provider", "lab/hpa",
			"pkg/provider depends on lab/hpa: the server wing must not import the lab wing"},
		{"drain grows", "pkg/drain/zz_backward.go", "drain", "pkg/config",
			"pkg/drain depends on pkg/config: the drain binary is copied into every engine pod"},
		{"scrape reaches up to policy", "pkg/scrape/zz_backward.go", "scrape", "pkg/policy",
			"pkg/scrape depends on pkg/policy, which it must not"},
		{"a package nobody placed", "pkg/newthing/x.go", "newthing", "pkg/signals",
			"pkg/newthing has no layer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "x.go")
			code := fmt.Sprintf("package %s\n\nimport _ %q\n", tc.pkg, module+tc.imports)
			if err := os.WriteFile(src, []byte(code), 0o600); err != nil {
				t.Fatal(err)
			}
			overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(root, tc.file): src}})
			ov := filepath.Join(dir, "overlay.json")
			if err := os.WriteFile(ov, overlay, 0o600); err != nil {
				t.Fatal(err)
			}
			g := loadGraph(t, ov, "./...", "./"+filepath.Dir(tc.file))
			got := violations(g)
			found := slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, tc.want) })
			if !found {
				t.Errorf("violations = %q\nwant one containing %q", got, tc.want)
			}
		})
	}
}

// The core is what a signal is: bytes in, numbers out, no Kubernetes.
func TestCoreHasNoKubernetes(t *testing.T) {
	for _, pkg := range core {
		noKubernetes(t, module+pkg)
	}
}

// The drain binary is copied into every engine pod: no Kubernetes client or API
// server code may creep in (they are what makes the adapter binary ~80 MB).
func TestDrainHasNoKubernetesClient(t *testing.T) {
	for _, dep := range deps(t, module+"cmd/drain") {
		for _, heavy := range []string{"k8s.io/client-go/", "k8s.io/apiserver/", "sigs.k8s.io/custom-metrics-apiserver/", "k8s.io/api/"} {
			if strings.HasPrefix(dep, heavy) {
				t.Errorf("cmd/drain depends on %s", dep)
			}
		}
	}
}

func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

func noKubernetes(t *testing.T, pkg string) {
	t.Helper()
	for _, dep := range deps(t, pkg) {
		if strings.HasPrefix(dep, "k8s.io/") || strings.HasPrefix(dep, "sigs.k8s.io/") {
			t.Errorf("%s depends on %s", strings.TrimPrefix(pkg, module), dep)
		}
	}
}
