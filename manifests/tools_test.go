package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	chartDir = "../charts/saturation-adapter"
	// The names the kustomize install uses: `helm install saturation-adapter ... -n
	// saturation-adapter` gives the chart's objects the same ones.
	releaseName = "saturation-adapter"

	helmEnv      = "SATURATION_ADAPTER_HELM"
	kustomizeEnv = "SATURATION_ADAPTER_KUSTOMIZE"
)

// tool returns the binary named by the environment variable env. The Makefile builds
// helm and kustomize into .cache/bin and sets these; a test run without them fails
// rather than skips, so the chart can never go untested by accident.
func tool(t *testing.T, env string) string {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		t.Fatalf("%s is not set: run these tests with `make test-unit` (or `make verify-manifests`), which builds helm and kustomize into .cache/bin and sets %s and %s", env, helmEnv, kustomizeEnv)
	}
	return path
}

// run runs a tool and returns its standard output, or its error and standard error.
func run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, errors.New(strings.TrimSpace(err.Error() + ": " + stderr.String()))
	}
	return out, nil
}

// helmTemplate renders the chart as release saturation-adapter in namespace
// saturation-adapter with the given extra helm arguments (--set ...).
func helmTemplate(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	return run(tool(t, helmEnv), append([]string{"template", releaseName, chartDir, "--namespace", namespace}, args...)...)
}

// mustHelmTemplate is helmTemplate failing the test on error.
func mustHelmTemplate(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := helmTemplate(t, args...)
	if err != nil {
		t.Fatalf("helm template %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// kustomizeBuild renders a kustomization of resources (directories under manifests/)
// and components (names under manifests/components/, in order), as a user's own
// kustomization would list them.
func kustomizeBuild(t *testing.T, resources []string, components ...string) []byte {
	t.Helper()
	dir := t.TempDir()
	// kustomize accepts only relative paths to other kustomizations.
	rel := func(p string) string {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := filepath.Rel(dir, abs)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := map[string]any{"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
	var rs, cs []string
	for _, r := range resources {
		rs = append(rs, rel(r))
	}
	for _, c := range components {
		cs = append(cs, rel(filepath.Join("components", c)))
	}
	k["resources"] = rs
	if len(cs) > 0 {
		k["components"] = cs
	}
	data, err := yaml.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(tool(t, kustomizeEnv), "build", dir)
	if err != nil {
		t.Fatalf("kustomize build %v + components %v: %v", resources, components, err)
	}
	return out
}

// documents splits a multi-document YAML stream into generic objects, skipping
// documents without a kind (comments only).
func documents(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []map[string]any
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("%v in:\n%s", err, doc)
		}
		if obj["kind"] != nil {
			objs = append(objs, obj)
		}
	}
}
