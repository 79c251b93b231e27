package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// TestDist checks what `make release` wrote into $SATURATION_ADAPTER_DIST (make
// test-unit runs it after hack's TestRelease has run make release): images.json agrees
// with the OCI layouts, the SBOMs describe the platform images they name, SHA256SUMS
// holds, the YAML and the chart pin the images by digest, the chart's OCI artifact
// carries the .tgz, and each image's entrypoint for the host's architecture, unpacked
// and run as its user (65534), prints the release's version.
func TestDist(t *testing.T) {
	dist := os.Getenv("SATURATION_ADAPTER_DIST")
	if dist == "" {
		t.Fatal("SATURATION_ADAPTER_DIST is not set: run the tests with `make test-unit`, which runs make release first and sets it")
	}
	b, err := os.ReadFile(filepath.Join(dist, "images.json"))
	if err != nil {
		t.Fatal(err)
	}
	var records []ImageRecord
	if err := json.Unmarshal(b, &records); err != nil {
		t.Fatal(err)
	}
	if len(records) != len(Images) {
		t.Fatalf("images.json lists %d images, want %d", len(records), len(Images))
	}
	var version string
	for i, r := range records {
		if r.Name != Images[i].Name {
			t.Errorf("image %d is %s, want %s", i, r.Name, Images[i].Name)
		}
		dir := filepath.Join(dist, r.Layout)
		desc, _, im := layoutIndex(t, dir)
		if desc.Digest.String() != r.Digest {
			t.Errorf("%s: images.json says %s, the layout holds %s", r.Name, r.Digest, desc.Digest)
		}
		version = im.Annotations["org.opencontainers.image.version"]
		if desc.Annotations[refNameAnnotation] != version || !versionRE.MatchString(version) {
			t.Errorf("%s: tagged %q, version %q", r.Name, desc.Annotations[refNameAnnotation], version)
		}
		if len(im.Manifests) != len(r.Platforms) || len(r.Platforms) != len(Architectures) {
			t.Fatalf("%s: %d manifests, %d platforms in images.json", r.Name, len(im.Manifests), len(r.Platforms))
		}
		for j, m := range im.Manifests {
			pr := r.Platforms[j]
			if m.Digest.String() != pr.Digest || m.Platform.String() != pr.Platform {
				t.Errorf("%s: manifest %d is %s %s, images.json says %s %s", r.Name, j, m.Platform, m.Digest, pr.Platform, pr.Digest)
			}
			checkSBOM(t, filepath.Join(dist, pr.SBOM), r, pr, version)
		}

		out, err := runImage(t, hostImage(t, dir), nil, "--version")
		if err != nil {
			t.Fatalf("%s (%s) --version as its user: %v\n%s", r.Name, runtime.GOARCH, err, out)
		}
		if !strings.Contains(out, " "+version+" ") && !strings.Contains(out, version+"\n") && !strings.Contains(out, `"`+version+`"`) {
			t.Errorf("%s --version printed %q, want version %s", r.Name, out, version)
		}
		if r.Name == "saturation-adapter" {
			checkTimeZones(t, hostImage(t, dir))
		}
	}

	// SHA256SUMS: the YAML, the chart and every SBOM, each as written.
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	chartVersion := strings.TrimPrefix(version, "v")
	listed := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(sums))
	for sc.Scan() {
		sum, file, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", sc.Text())
		}
		data, err := os.ReadFile(filepath.Join(dist, file))
		if err != nil {
			t.Fatal(err)
		}
		if h := sha256.Sum256(data); hex.EncodeToString(h[:]) != sum {
			t.Errorf("SHA256SUMS: %s does not match", file)
		}
		listed[file] = true
	}
	wantListed := []string{"saturation-adapter-" + version + ".yaml", "saturation-adapter-" + chartVersion + ".tgz"}
	for _, r := range records {
		for _, p := range r.Platforms {
			wantListed = append(wantListed, p.SBOM)
		}
	}
	for _, f := range wantListed {
		if !listed[f] {
			t.Errorf("SHA256SUMS does not list %s", f)
		}
	}
	if len(listed) != len(wantListed) {
		t.Errorf("SHA256SUMS lists %d files, want %d", len(listed), len(wantListed))
	}

	// The YAML pins the adapter by digest; the chart both images.
	yml, err := os.ReadFile(filepath.Join(dist, "saturation-adapter-"+version+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "image: " + records[0].Repository + "@" + records[0].Digest + "\n"; !bytes.Contains(yml, []byte(want)) {
		t.Errorf("the release YAML has no %q", want)
	}
	tgz, err := os.ReadFile(filepath.Join(dist, "saturation-adapter-"+chartVersion+".tgz"))
	if err != nil {
		t.Fatal(err)
	}
	values := string(chartFile(t, tgz, "saturation-adapter/values.yaml"))
	for _, r := range records {
		if !strings.Contains(values, `repository: "`+r.Repository+`"`) || !strings.Contains(values, `digest: "`+r.Digest+`"`) {
			t.Errorf("the chart's values do not pin %s@%s", r.Repository, r.Digest)
		}
	}
	chartLayout := filepath.Join(dist, "oci", "charts", "saturation-adapter")
	desc, err := LayoutEntry(chartLayout)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := layout.FromPath(chartLayout)
	idx, _ := p.ImageIndex()
	img, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(tgz)
	if desc.Annotations[refNameAnnotation] != chartVersion || m.Config.MediaType != ChartConfigMediaType ||
		len(m.Layers) != 1 || m.Layers[0].MediaType != ChartLayerMediaType || m.Layers[0].Digest.Hex != hex.EncodeToString(h[:]) {
		t.Errorf("chart artifact: tag %q manifest %+v, want tag %s and the .tgz as its one layer", desc.Annotations[refNameAnnotation], m, chartVersion)
	}
	notes, err := os.ReadFile(filepath.Join(dist, "release-notes.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Install\n", "--version " + chartVersion + " ", "/releases/download/" + version + "/saturation-adapter-" + version + ".yaml",
		records[0].Repository + "@" + records[0].Digest, records[1].Repository + "@" + records[1].Digest} {
		if !bytes.Contains(notes, []byte(want)) {
			t.Errorf("release-notes.md lacks %q:\n%s", want, notes)
		}
	}
}

// checkSBOM checks that a CycloneDX SBOM describes the platform image pr of r: the
// main module at the release's version, the image and its digest, the modules.
func checkSBOM(t *testing.T, file string, r ImageRecord, pr PlatformRecord, version string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var bom struct {
		BOMFormat    string `json:"bomFormat"`
		SerialNumber string `json:"serialNumber"`
		Metadata     struct {
			Component  struct{ Name, Version string }
			Properties []struct{ Name, Value string }
		}
		Components []struct{ Name, Version string }
	}
	if err := json.Unmarshal(b, &bom); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	props := map[string]string{}
	for _, p := range bom.Metadata.Properties {
		props[p.Name] = p.Value
	}
	arch := strings.Split(pr.Platform, "/")[1]
	if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Name != "github.com/saturation-adapter/saturation-adapter" ||
		bom.Metadata.Component.Version != version || props["saturation-adapter:image:digest"] != pr.Digest ||
		props["saturation-adapter:image"] != r.Repository || props["cdx:gomod:build:env:GOARCH"] != arch ||
		props["cdx:gomod:build:env:CGO_ENABLED"] != "0" || !strings.HasPrefix(bom.SerialNumber, "urn:uuid:") {
		t.Errorf("%s: format %q component %+v properties %v serial %q", file, bom.BOMFormat, bom.Metadata.Component, props, bom.SerialNumber)
	}
	var hasStdlib bool
	for _, c := range bom.Components {
		hasStdlib = hasStdlib || c.Name == "std"
	}
	if len(bom.Components) < 3 || !hasStdlib {
		t.Errorf("%s: %d components (std listed: %v), want the binary's modules and the standard library", file, len(bom.Components), hasStdlib)
	}
}

func chartFile(t *testing.T, tgz []byte, name string) []byte {
	t.Helper()
	zr, err := gzipReader(tgz)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := zr[name]
	if !ok {
		t.Fatalf("the chart has no %s", name)
	}
	return f
}

// gzipReader returns the files of a .tgz by name.
func gzipReader(tgz []byte) (map[string][]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			return nil, err
		}
	}
}

// checkTimeZones runs the adapter image's explain on a policy whose scheduled
// minimum names an IANA time zone: the image has no zoneinfo of its own, so
// the binary must carry the database (a policy file with timeZone was once
// refused by the released image: "unknown time zone").
func checkTimeZones(t *testing.T, img v1.Image) {
	t.Helper()
	files := map[string]string{
		"/config/policies.yaml": `apiVersion: saturation-adapter.io/v1alpha1
kind: PolicyConfig
policies:
- name: chat-ahead
  kind: mean
  terms:
  - {kind: queueDepth, setPoint: 3}
  minimums:
  - {schedule: "0 8 * * 1-5", duration: 4h, timeZone: Europe/Berlin, demand: 6}
  - {schedule: "0 9 * * *", duration: 1h, timeZone: America/Santiago, demand: 2}
`,
		"/config/a.prom": "vllm:num_requests_waiting{engine=\"0\"} 3\nvllm:num_requests_running{engine=\"0\"} 1\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.2\n",
	}
	out, err := runImage(t, img, files, "explain", "--config", "/config/policies.yaml", "--policy", "chat-ahead", "/config/a.prom")
	if err != nil || !strings.Contains(out, "chat-ahead") {
		t.Errorf("adapter explain of a policy with time zones in the image: %v\n%s", err, out)
	}
}
