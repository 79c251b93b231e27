package e2e

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// publishedRelease installs a release as docs/install.md says, from what the release
// workflow publishes, with loopback stand-ins for ghcr.io and GitHub's release
// downloads: `make release` for the stand-in registry (the workflow's build), the
// workflow's own push step (its run script, with its environment) into a loopback OCI
// registry (go-containerregistry's pkg/registry), the release files served under
// GitHub's download path. Then, as written but for the hosts: the doc's checksum
// verification, its kubectl line, the wait, its uninstall; its Helm line from oci://
// (with --plain-http added: the stand-in speaks HTTP), the NOTES naming the image, and
// the uninstall. The adapter's pods run the binary unpacked from the image the node
// agent pulls from the registry by the digest the YAML and the chart pin.
// (cosign verify needs Sigstore: not here.)
func (e *installEnv) publishedRelease(t *testing.T) {
	e.requireClean(t)
	const version, chartVersion = "v0.1.0", "0.1.0"
	imageRepo := e.registry + "/saturation-adapter/saturation-adapter"
	chartRepo := e.registry + "/saturation-adapter/charts"
	e.run(t, "make -s release VERSION="+version+" IMAGE_REPO="+imageRepo+" CHART_REPO="+chartRepo, nil)
	dist := filepath.Join(e.repo, "dist")
	adapterRef := releasedImage(t, dist)
	if !strings.HasPrefix(adapterRef, imageRepo+"@sha256:") {
		t.Fatalf("make release pinned %s, want %s@sha256:…", adapterRef, imageRepo)
	}

	env := "export VERSION=" + version + " CHART_VERSION=" + chartVersion + " IMAGE_REPO=" + imageRepo + " CHART_REPO=" + chartRepo + "\n"
	pushed := string(e.runBlock(t, env+workflowStep(t, e.repo, "Push the images and the chart"), nil))
	if !strings.Contains(pushed, adapterRef) {
		t.Errorf("the push printed %q, want %s among the references pushed", pushed, adapterRef)
	}

	mux := http.NewServeMux()
	downloads := "/saturation-adapter/saturation-adapter/releases/download/" + version + "/"
	mux.Handle(downloads, http.StripPrefix(downloads, http.FileServer(http.Dir(dist))))
	github := httptest.NewServer(mux)
	defer github.Close()
	subst := map[string]string{
		"https://github.com/saturation-adapter/saturation-adapter/releases/download": github.URL + "/saturation-adapter/saturation-adapter/releases/download",
		"oci://ghcr.io/saturation-adapter/charts":                                    "oci://" + chartRepo,
		"vX.Y.Z": version,
		"X.Y.Z":  chartVersion,
	}
	setVersion := docBlock(t, verifyVersionBlock)
	e.runBlock(t, setVersion+docBlock(t, verifyChecksumsBlock), subst)

	e.runBlock(t, docBlock(t, readmeApplyBlock), subst)
	e.runBlock(t, docBlock(t, readmeWaitBlock), subst)
	e.checkInstalled(t, adapterRef, tlsWant{secret: servingCertSecret})
	e.runBlock(t, setVersion+docBlock(t, uninstallBlock), subst)
	e.checkUninstalled(t)

	// The stand-in registry speaks plain HTTP.
	subst["--create-namespace"] = "--create-namespace --plain-http"
	notes := string(e.runBlock(t, docBlock(t, readmeHelmBlock), subst))
	if !strings.Contains(notes, "Image: "+adapterRef) {
		t.Errorf("helm install's NOTES do not name the image %s:\n%s", adapterRef, notes)
	}
	e.runBlock(t, docBlock(t, readmeWaitBlock), subst)
	e.checkInstalled(t, adapterRef, tlsWant{secret: servingCertSecret})
	e.runBlock(t, docBlock(t, helmUninstallBlock), nil)
	e.checkUninstalled(t)
	if _, err := os.Stat(filepath.Join(e.repo, "saturation-adapter-"+version+".yaml")); err != nil {
		t.Errorf("the doc's download: %v", err)
	}
}

// workflowStep returns the run script of the release workflow's step named name.
func workflowStep(t *testing.T, repo, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, ".github", "workflows", "release.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Jobs map[string]struct {
			Steps []struct{ Name, Run string }
		}
	}
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatal(err)
	}
	for _, st := range wf.Jobs["release"].Steps {
		if st.Name == name && st.Run != "" {
			return st.Run
		}
	}
	t.Fatalf("the release workflow has no step %q with a run script", name)
	return ""
}

// TestKubectlKustomize: `kubectl kustomize` (the kustomize built into the kubectl the
// tests run) renders every kustomization a user may apply with `kubectl apply -k` as
// the kustomize that renders manifests/rendered/ and the release YAML does.
func TestKubectlKustomize(t *testing.T) {
	t.Parallel()
	tools, _, err := stack.DirsFromEnv()
	if err != nil {
		t.Skip(err)
	}
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	body := func(b []byte) string { // without the rendering's header comments
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(l, "#") {
				lines = append(lines, l)
			}
		}
		return strings.Join(lines, "\n")
	}
	for dir, rendered := range map[string]string{
		"manifests":                "saturation-adapter.yaml",
		"manifests/custom-metrics": "custom-metrics.yaml",
		"manifests/cert-manager":   "saturation-adapter-cert-manager.yaml",
		"manifests/insecure":       "saturation-adapter-insecure.yaml",
		"manifests/monitoring":     "monitoring.yaml",
	} {
		t.Run(dir, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(tools, "kubectl"), "kustomize", filepath.Join(root, dir))
			got, err := cmd.Output()
			if err != nil {
				t.Fatalf("kubectl kustomize %s: %v", dir, err)
			}
			want, err := os.ReadFile(filepath.Join(root, "manifests", "rendered", rendered))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(body(want), body(got)); diff != "" {
				t.Errorf("kubectl kustomize %s vs manifests/rendered/%s (-rendered +kubectl):\n%s", dir, rendered, diff)
			}
		})
	}
}
