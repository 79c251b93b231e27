package layering

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/saturation-adapter/saturation-adapter/"

// allowed lists, for each package, the project packages it may depend on
// (directly or not). A package missing from the map may depend on nothing of
// the project.
var allowed = map[string][]string{
	"pkg/signals":   {},
	"pkg/trace":     {},
	"pkg/emulator":  {"pkg/trace"},
	"pkg/scrape":    {"pkg/signals", "internal/excerpt"},
	"pkg/podselect": {"pkg/scrape", "pkg/signals", "internal/excerpt"},
	"pkg/provider":  {"pkg/podselect", "pkg/scrape", "pkg/signals", "internal/excerpt"},
	// A source beside pkg/scrape: it reads Prometheus, never the provider.
	"pkg/prometheus": {"pkg/podselect", "pkg/scrape", "pkg/signals", "internal/excerpt"},
	"pkg/hpa":        {},
	"pkg/simulate":   {"pkg/emulator", "pkg/hpa", "pkg/signals", "pkg/trace"},
}

func TestNoPackageReachesBackwards(t *testing.T) {
	for pkg, ok := range allowed {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			rel, ours := strings.CutPrefix(dep, module)
			if !ours || rel == pkg {
				continue
			}
			if !slices.Contains(ok, rel) {
				t.Errorf("%s depends on %s, which it must not (allowed: %v)", pkg, rel, ok)
			}
		}
	}
}

// pkg/signals is what a signal is: bytes in, numbers out, no Kubernetes.
func TestSignalsHasNoKubernetes(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+"pkg/signals").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "k8s.io/") || strings.HasPrefix(dep, "sigs.k8s.io/") {
			t.Errorf("pkg/signals depends on %s", dep)
		}
	}
}
