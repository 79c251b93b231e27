package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"
)

const chartDir = "../../charts/saturation-adapter"

var testDigest = "sha256:" + strings.Repeat("ab", 32)

func testChartSettings() ChartSettings {
	return ChartSettings{
		Version: "v1.2.3",
		Values: map[string]string{
			"image.repository": "registry.example.com/sa", "image.digest": testDigest,
			"drain.image.repository": "registry.example.com/sa-drain", "drain.image.digest": testDigest,
		},
		Annotations: map[string]string{"artifacthub.io/images": `[{"name":"x","image":"y"}]`, "artifacthub.io/prerelease": "false"},
	}
}

// tgzFiles returns the files of a .tgz by name, and checks every header is
// reproducible (root, 0644, the commit's time).
func tgzFiles(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("gzip header: name %q mtime %s, want neither", zr.Name, zr.ModTime)
	}
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Mode != 0o644 || h.Uid != 0 || !h.ModTime.Equal(testProvenance.Created) {
			t.Errorf("%s: mode %o uid %d mtime %s", h.Name, h.Mode, h.Uid, h.ModTime)
		}
		files[h.Name], err = io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestPackageChart: the chart packages to the same bytes twice; the version, the
// pinned images and the annotations are written in, comments kept; .helmignore'd files
// stay out.
func TestPackageChart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "saturation-adapter")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "values.yaml.orig"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := PackageChart(dir, testChartSettings(), testProvenance.Created)
	if err != nil {
		t.Fatal(err)
	}
	b, err := PackageChart(dir, testChartSettings(), testProvenance.Created)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Archive, b.Archive) {
		t.Error("two packages of one chart differ")
	}
	if a.FileName != "saturation-adapter-1.2.3.tgz" || a.Version != "1.2.3" {
		t.Errorf("packaged %s version %s", a.FileName, a.Version)
	}
	files := tgzFiles(t, a.Archive)
	if _, ok := files["saturation-adapter/values.yaml.orig"]; ok {
		t.Error("values.yaml.orig is packaged although .helmignore lists *.orig")
	}
	for _, f := range []string{"Chart.yaml", "values.yaml", "values.schema.json", "README.md", "templates/NOTES.txt", "templates/deployment.yaml"} {
		if _, ok := files["saturation-adapter/"+f]; !ok {
			t.Errorf("%s is not packaged", f)
		}
	}
	var chart struct {
		Version, AppVersion, KubeVersion, Icon string
		Maintainers                            []map[string]string
		Annotations                            map[string]string
	}
	if err := yaml.Unmarshal(files["saturation-adapter/Chart.yaml"], &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != "1.2.3" || chart.AppVersion != "v1.2.3" || chart.KubeVersion == "" || chart.Icon == "" || len(chart.Maintainers) == 0 {
		t.Errorf("Chart.yaml %+v: want version 1.2.3, appVersion v1.2.3, kubeVersion, icon, maintainers", chart)
	}
	if chart.Annotations["artifacthub.io/images"] != `[{"name":"x","image":"y"}]` || chart.Annotations["artifacthub.io/license"] != "Apache-2.0" {
		t.Errorf("Artifact Hub annotations %v", chart.Annotations)
	}
	var values struct {
		Image struct{ Repository, Digest string }
		Drain struct {
			Image struct{ Repository, Digest string }
		}
	}
	if err := yaml.Unmarshal(files["saturation-adapter/values.yaml"], &values); err != nil {
		t.Fatal(err)
	}
	if values.Image.Repository != "registry.example.com/sa" || values.Image.Digest != testDigest ||
		values.Drain.Image.Repository != "registry.example.com/sa-drain" || values.Drain.Image.Digest != testDigest {
		t.Errorf("values %+v: want both images pinned", values)
	}
	if !bytes.Contains(files["saturation-adapter/values.yaml"], []byte("# The drain helper's image")) {
		t.Error("values.yaml lost its comments")
	}

	s := testChartSettings()
	s.Values["image.nosuchkey"] = "x"
	if _, err := PackageChart(dir, s, testProvenance.Created); err == nil || !strings.Contains(err.Error(), "image.nosuchkey: no such key") {
		t.Errorf("an unknown values path: err %v", err)
	}
	s = testChartSettings()
	s.Version = "1.2.3"
	if _, err := PackageChart(dir, s, testProvenance.Created); err == nil {
		t.Error("version without v: no error")
	}
}

// TestSetScalar: the scalar at a key path is replaced and nothing else; a path naming no
// scalar, or two, is an error.
func TestSetScalar(t *testing.T) {
	src := "# top\nimage:\n  # the repo\n  repository: old # note\n  tag: \"\"\ndrain:\n  image:\n    repository: d\nlist:\n- image: x\nscalar: 1\n"
	for _, tc := range []struct {
		name, path, want, err string
	}{
		{"nested", "image.repository", "# top\nimage:\n  # the repo\n  repository: \"new\"\n  tag: \"\"\ndrain:\n  image:\n    repository: d\nlist:\n- image: x\nscalar: 1\n", ""},
		{"deeper", "drain.image.repository", "# top\nimage:\n  # the repo\n  repository: old # note\n  tag: \"\"\ndrain:\n  image:\n    repository: \"new\"\nlist:\n- image: x\nscalar: 1\n", ""},
		{"missing", "image.digest", "", "image.digest: no such key"},
		{"mapping", "drain.image", "", "a mapping, not a scalar"},
		{"through a scalar", "scalar.x", "", "scalar is a scalar, not a mapping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := setScalar([]byte(src), strings.Split(tc.path, "."), "new")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, err := setScalar([]byte("a: 1\nb:\n  c: 2\na: 3\n"), []string{"a"}, "x"); err == nil || !strings.Contains(err.Error(), "lines 1 and 4") {
		t.Errorf("a key set twice: err %v", err)
	}
}

// TestPushAndHelmInstall: the image and chart layouts pushed to a registry on loopback
// are served under their tags with the layouts' digests, and Helm installs the chart
// from there (helm template oci://…), rendering the image pinned by digest.
func TestPushAndHelmInstall(t *testing.T) {
	helm := os.Getenv("SATURATION_ADAPTER_HELM")
	if helm == "" {
		t.Fatal("SATURATION_ADAPTER_HELM is not set: run the tests with `make test-unit`, which builds helm into .cache/bin and sets it")
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")

	out := t.TempDir()
	idx, err := BuildIndex(probeSpec(t), testProvenance)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteIndexLayout(filepath.Join(out, "image"), idx, "v1.2.3"); err != nil {
		t.Fatal(err)
	}
	imgDigest, _ := idx.Digest()
	s := testChartSettings()
	s.Values["image.repository"] = host + "/sa"
	s.Values["image.digest"] = imgDigest.String()
	c, err := PackageChart(chartDir, s, testProvenance.Created)
	if err != nil {
		t.Fatal(err)
	}
	manifest, blobs, err := ChartArtifact(c, "desc", testProvenance)
	if err != nil {
		t.Fatal(err)
	}
	chartDigest, err := WriteArtifactLayout(filepath.Join(out, "chart"), manifest, blobs, c.Version)
	if err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	for _, p := range []struct{ dir, ref, want string }{
		{"image", host + "/sa:v1.2.3", host + "/sa@" + imgDigest.String()},
		{"chart", host + "/charts/saturation-adapter:1.2.3", host + "/charts/saturation-adapter@" + chartDigest.String()},
	} {
		got, err := Push(ctx, filepath.Join(out, p.dir), p.ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if got != p.want {
			t.Errorf("pushed %s as %s, want %s", p.dir, got, p.want)
		}
	}
	// A platform image of the index is there by digest too.
	ref, _ := name.ParseReference(host+"/sa:v1.2.3", name.Insecure)
	desc, err := remote.Get(ref)
	if err != nil {
		t.Fatal(err)
	}
	ii, err := desc.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, _ := ii.IndexManifest()
	if len(im.Manifests) != 2 {
		t.Errorf("pushed index has %d manifests", len(im.Manifests))
	}
	if _, err := Push(ctx, filepath.Join(out, "image"), host+"/sa", name.Insecure); err == nil {
		t.Error("push without a tag: no error")
	}

	cmd := exec.Command(helm, "template", "sa", "oci://"+host+"/charts/saturation-adapter", "--version", "1.2.3", "--plain-http")
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_CACHE_HOME="+t.TempDir())
	rendered, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm template oci://: %v\n%s", err, rendered)
	}
	if want := `image: "` + host + "/sa@" + imgDigest.String() + `"`; !strings.Contains(string(rendered), want) {
		t.Errorf("the chart from the registry does not render %s", want)
	}
	var meta map[string]any
	if err := json.Unmarshal(c.Metadata, &meta); err != nil || meta["version"] != "1.2.3" || meta["appVersion"] != "v1.2.3" {
		t.Errorf("chart config blob %s: %v", c.Metadata, err)
	}
}
