package main

import (
	"archive/tar"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var (
	probeMu   sync.Mutex
	probeDir  string
	probeBins = map[string]string{}
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "release-probe")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	probeDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// probeBinary returns testdata/probe built static for linux/arch (built once a run).
func probeBinary(t *testing.T, arch string) string {
	t.Helper()
	probeMu.Lock()
	defer probeMu.Unlock()
	if b, ok := probeBins[arch]; ok {
		return b
	}
	out := filepath.Join(probeDir, arch, "probe")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./testdata/probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the probe for %s: %v\n%s", arch, err, b)
	}
	probeBins[arch] = out
	return out
}

var testProvenance = Provenance{
	Version: "v1.2.3", Revision: "0123456789abcdef0123456789abcdef01234567",
	Source: "https://example.com/src", Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Licenses: "Apache-2.0",
}

func probeSpec(t *testing.T) ImageSpec {
	return ImageSpec{
		Name: "probe", Title: "probe", Description: "test image", Entrypoint: "probe",
		Platforms: []Platform{
			{OS: "linux", Architecture: "amd64", Binary: probeBinary(t, "amd64")},
			{OS: "linux", Architecture: "arm64", Variant: "v8", Binary: probeBinary(t, "arm64")},
		},
	}
}

func digestOf(t *testing.T, spec ImageSpec, p Provenance) v1.Hash {
	t.Helper()
	idx, err := BuildIndex(spec, p)
	if err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestBuildIndexReproducible: the same binaries and provenance give the same index
// digest, on disk too; any input that should show in the image changes it.
func TestBuildIndexReproducible(t *testing.T) {
	spec := probeSpec(t)
	first := digestOf(t, spec, testProvenance)
	if again := digestOf(t, spec, testProvenance); again != first {
		t.Errorf("two builds of the same inputs: %s and %s", first, again)
	}
	idx, err := BuildIndex(spec, testProvenance)
	if err != nil {
		t.Fatal(err)
	}
	dirs := []string{t.TempDir(), t.TempDir()}
	for _, d := range dirs {
		if err := WriteIndexLayout(d, idx, "v1.2.3"); err != nil {
			t.Fatal(err)
		}
		desc, err := LayoutEntry(d)
		if err != nil {
			t.Fatal(err)
		}
		if desc.Digest != first || desc.Annotations[refNameAnnotation] != "v1.2.3" {
			t.Errorf("layout %s: entry %s tagged %q, want %s tagged v1.2.3", d, desc.Digest, desc.Annotations[refNameAnnotation], first)
		}
	}
	if a, b := treeHash(t, dirs[0]), treeHash(t, dirs[1]); a != b {
		t.Errorf("two layouts of one index differ:\n%s\n%s", a, b)
	}

	later := testProvenance
	later.Created = later.Created.Add(time.Second)
	otherVersion := testProvenance
	otherVersion.Version = "v1.2.4"
	swapped := probeSpec(t)
	swapped.Platforms[0].Binary, swapped.Platforms[1].Binary = swapped.Platforms[1].Binary, swapped.Platforms[0].Binary
	for name, d := range map[string]v1.Hash{
		"created": digestOf(t, spec, later),
		"version": digestOf(t, spec, otherVersion),
		"entry":   digestOf(t, ImageSpec{Name: spec.Name, Title: spec.Title, Entrypoint: "other", Platforms: spec.Platforms}, testProvenance),
		"platform": func() v1.Hash {
			s := probeSpec(t)
			s.Platforms = s.Platforms[:1]
			return digestOf(t, s, testProvenance)
		}(),
	} {
		if d == first {
			t.Errorf("changing the %s left the digest %s", name, d)
		}
	}
	if _, err := BuildIndex(swapped, testProvenance); err == nil || !strings.Contains(err.Error(), "built for") {
		t.Errorf("an arm64 binary in the amd64 image: err %v, want a wrong-architecture error", err)
	}
}

// treeHash lists every file of dir with its contents, for comparing two trees.
func treeHash(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%s %x\n", rel, data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestImageContents: what each platform image holds and says about itself.
func TestImageContents(t *testing.T) {
	spec := probeSpec(t)
	idx, err := BuildIndex(spec, testProvenance)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	wantAnn := map[string]string{
		"org.opencontainers.image.title":       "probe",
		"org.opencontainers.image.description": "test image",
		"org.opencontainers.image.source":      "https://example.com/src",
		"org.opencontainers.image.url":         "https://example.com/src",
		"org.opencontainers.image.version":     "v1.2.3",
		"org.opencontainers.image.revision":    "0123456789abcdef0123456789abcdef01234567",
		"org.opencontainers.image.created":     "2026-01-02T03:04:05Z",
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s, want %s", im.MediaType, types.OCIImageIndex)
	}
	if diff := cmp.Diff(wantAnn, im.Annotations); diff != "" {
		t.Errorf("index annotations (-want +got):\n%s", diff)
	}
	var platforms []string
	var baseDigests []v1.Hash
	for _, m := range im.Manifests {
		platforms = append(platforms, m.Platform.String())
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		mf, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if mf.MediaType != types.OCIManifestSchema1 || mf.Config.MediaType != types.OCIConfigJSON {
			t.Errorf("%s: manifest %s config %s, want OCI media types", m.Platform, mf.MediaType, mf.Config.MediaType)
		}
		if diff := cmp.Diff(wantAnn, mf.Annotations); diff != "" {
			t.Errorf("%s manifest annotations (-want +got):\n%s", m.Platform, diff)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Architecture != m.Platform.Architecture || cfg.OS != "linux" || cfg.Variant != m.Platform.Variant {
			t.Errorf("%s: config says %s/%s/%s", m.Platform, cfg.OS, cfg.Architecture, cfg.Variant)
		}
		if cfg.Config.User != "65534:65534" || !cmp.Equal(cfg.Config.Entrypoint, []string{"/probe"}) || !cfg.Created.Equal(testProvenance.Created) {
			t.Errorf("%s: user %q entrypoint %q created %s, want 65534:65534, [/probe], the commit time", m.Platform, cfg.Config.User, cfg.Config.Entrypoint, cfg.Created)
		}
		if diff := cmp.Diff(wantAnn, cfg.Config.Labels); diff != "" {
			t.Errorf("%s labels (-want +got):\n%s", m.Platform, diff)
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		if len(layers) != 2 {
			t.Fatalf("%s: %d layers, want the base and the binary", m.Platform, len(layers))
		}
		d, _ := layers[0].Digest()
		baseDigests = append(baseDigests, d)
		files := layerFiles(t, layers[0])
		if !strings.Contains(string(files["etc/passwd"].data), "nobody:x:65534:65534:") || !strings.Contains(string(files["etc/group"].data), "nobody:x:65534:") {
			t.Errorf("%s: /etc/passwd %q /etc/group %q: want nobody as 65534", m.Platform, files["etc/passwd"].data, files["etc/group"].data)
		}
		if n := countCerts(t, files[CACertsPath].data); n < 100 {
			t.Errorf("%s: %s holds %d certificates, want the NSS roots (over 100)", m.Platform, CACertsPath, n)
		}
		if files["tmp/"].mode != 0o1777 {
			t.Errorf("%s: /tmp mode %o, want 1777", m.Platform, files["tmp/"].mode)
		}
		bin := layerFiles(t, layers[1])
		if len(bin) != 1 || bin["probe"].mode != 0o755 {
			t.Errorf("%s: binary layer %v, want probe alone, mode 755", m.Platform, keys(bin))
		}
	}
	if !cmp.Equal(platforms, []string{"linux/amd64", "linux/arm64/v8"}) {
		t.Errorf("platforms %q", platforms)
	}
	if baseDigests[0] != baseDigests[1] {
		t.Errorf("base layers differ between platforms: %s, %s", baseDigests[0], baseDigests[1])
	}
}

type fileEntry struct {
	mode int64
	data []byte
}

// layerFiles returns a layer's entries by name, checking that each is owned by root and
// dated at the commit.
func layerFiles(t *testing.T, l v1.Layer) map[string]fileEntry {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	out := map[string]fileEntry{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(testProvenance.Created) {
			t.Errorf("%s: uid %d gid %d mtime %s, want root and the commit time", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		out[h.Name] = fileEntry{mode: h.Mode, data: b}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func countCerts(t *testing.T, data []byte) int {
	t.Helper()
	n := 0
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return n
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			t.Errorf("certificate %d: %v", n, err)
		}
		n++
	}
}

// TestImageRunsAsNobody: the host's platform image, written to an OCI layout and read
// back, unpacked and run as a runtime would (chroot, its user): the program is uid and
// gid 65534, the user database names it, Go finds the CA bundle, /tmp is writable.
func TestImageRunsAsNobody(t *testing.T) {
	idx, err := BuildIndex(probeSpec(t), testProvenance)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteIndexLayout(dir, idx, "v1.2.3"); err != nil {
		t.Fatal(err)
	}
	out, err := runImage(t, hostImage(t, dir), nil, "a", "b")
	if err != nil {
		t.Fatalf("running the %s image: %v\n%s", runtime.GOARCH, err, out)
	}
	var uid, gid, roots int
	var user, tmp, args string
	if _, err := fmt.Sscanf(out, "uid=%d gid=%d user=%s roots=%d tmp=%s args=%s", &uid, &gid, &user, &roots, &tmp, &args); err != nil {
		t.Fatalf("probe output %q: %v", out, err)
	}
	if uid != 65534 || gid != 65534 || user != "nobody" || roots < 100 || tmp != "true" || args != "a,b" {
		t.Errorf("probe in the image: %q, want uid and gid 65534, user nobody, the NSS roots, /tmp writable, args a,b", out)
	}
}

// TestCheckStatic: binaries that cannot run on the empty base, or on the image's
// platform, are refused.
func TestCheckStatic(t *testing.T) {
	amd64, err := os.ReadFile(probeBinary(t, "amd64"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		bin  []byte
		pl   Platform
		want string
	}{
		{"ok", amd64, Platform{OS: "linux", Architecture: "amd64"}, ""},
		{"wrong arch", amd64, Platform{OS: "linux", Architecture: "arm64"}, "built for EM_X86_64, want EM_AARCH64"},
		{"unknown arch", amd64, Platform{OS: "linux", Architecture: "s390x"}, `architecture "s390x"`},
		{"not ELF", []byte("#!/bin/sh\n"), Platform{OS: "linux", Architecture: "amd64"}, "not an ELF binary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkStatic(tc.bin, tc.pl)
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("checkStatic: %v, want %q", err, tc.want)
			}
		})
	}
}
