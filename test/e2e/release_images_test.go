package e2e

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/nodeagent"
)

// releaseImages stands in for a kubelet's image pulls of released images: an image
// reference by digest resolves to the binary its entrypoint names, unpacked from the
// image for the host's platform. The image comes from the OCI registry the reference
// names when it is one of registries (a loopback registry the test pushed to), else
// from the OCI layouts of a make release (dist/images.json maps repositories to
// layouts). Each binary is unpacked once.
type releaseImages struct {
	// dist returns the dist/ directory of the checkout make release ran in.
	dist func() string
	// registries are the loopback registries (host:port) the test serves.
	registries []string
	// args are the engine's arguments (the agent's --bind-address).
	args []string

	mu       sync.Mutex
	dir      string
	unpacked map[string]string // image reference -> binary
	logf     func(string, ...any)
}

// resolve is a nodeagent.Options.Resolve.
func (r *releaseImages) resolve(image string) (nodeagent.Engine, bool) {
	bin, err := r.binary(image)
	if err != nil {
		r.logf("resolving image %s: %v", image, err)
		return nodeagent.Engine{}, false
	}
	return nodeagent.Engine{Binary: bin, Args: r.args, InCluster: true}, true
}

func (r *releaseImages) binary(image string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.unpacked[image]; ok {
		return b, nil
	}
	ref, err := name.NewDigest(image)
	if err != nil {
		return "", fmt.Errorf("not an image reference by digest: %w", err)
	}
	var idx v1.ImageIndex
	if registry := ref.Context().RegistryStr(); contains(r.registries, registry) {
		idx, err = remote.Index(ref)
	} else {
		idx, err = r.fromDist(ref)
	}
	if err != nil {
		return "", err
	}
	got, err := idx.Digest()
	if err != nil {
		return "", err
	}
	if got.String() != ref.DigestStr() {
		return "", fmt.Errorf("index digest %s, want %s", got, ref.DigestStr())
	}
	img, err := hostPlatformImage(idx)
	if err != nil {
		return "", err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	if len(cfg.Config.Entrypoint) != 1 {
		return "", fmt.Errorf("entrypoint %q: want one binary", cfg.Config.Entrypoint)
	}
	if cfg.Config.User != "65534:65534" {
		return "", fmt.Errorf("image user %q, want 65534:65534", cfg.Config.User)
	}
	entry := strings.TrimPrefix(path.Clean(cfg.Config.Entrypoint[0]), "/")
	data, err := fileOf(img, entry)
	if err != nil {
		return "", err
	}
	if r.dir == "" {
		// Not under the test's TempDir: its 0700 parents would keep the pods' user out.
		if r.dir, err = os.MkdirTemp("", "e2e-images"); err != nil {
			return "", err
		}
		if err := os.Chmod(r.dir, 0o755); err != nil {
			return "", err
		}
	}
	dir := filepath.Join(r.dir, fmt.Sprint(len(r.unpacked)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, path.Base(entry))
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		return "", err
	}
	if r.unpacked == nil {
		r.unpacked = map[string]string{}
	}
	r.unpacked[image] = bin
	r.logf("image %s: unpacked /%s (%d bytes) for linux/%s", image, entry, len(data), runtime.GOARCH)
	return bin, nil
}

// close removes the unpacked binaries.
func (r *releaseImages) close() {
	if r.dir != "" {
		os.RemoveAll(r.dir)
	}
}

// fromDist returns the index ref names from the OCI layout make release wrote for its
// repository.
func (r *releaseImages) fromDist(ref name.Digest) (v1.ImageIndex, error) {
	dist := r.dist()
	b, err := os.ReadFile(filepath.Join(dist, "images.json"))
	if err != nil {
		return nil, err
	}
	var records []struct{ Repository, Layout, Digest string }
	if err := json.Unmarshal(b, &records); err != nil {
		return nil, err
	}
	for _, rec := range records {
		if rec.Repository != ref.Context().Name() {
			continue
		}
		if rec.Digest != ref.DigestStr() {
			return nil, fmt.Errorf("make release built %s@%s, not %s", rec.Repository, rec.Digest, ref.DigestStr())
		}
		p, err := layout.FromPath(filepath.Join(dist, rec.Layout))
		if err != nil {
			return nil, err
		}
		outer, err := p.ImageIndex()
		if err != nil {
			return nil, err
		}
		h, err := v1.NewHash(rec.Digest)
		if err != nil {
			return nil, err
		}
		return outer.ImageIndex(h)
	}
	return nil, fmt.Errorf("%s/images.json has no repository %s", dist, ref.Context().Name())
}

// hostPlatformImage returns the linux/<GOARCH> image of idx.
func hostPlatformImage(idx v1.ImageIndex) (v1.Image, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, m := range im.Manifests {
		if m.Platform != nil && m.Platform.OS == "linux" && m.Platform.Architecture == runtime.GOARCH {
			return idx.Image(m.Digest)
		}
	}
	return nil, fmt.Errorf("no linux/%s image in the index", runtime.GOARCH)
}

// fileOf returns the contents of file name (no leading /) of img's filesystem.
func fileOf(img v1.Image, name string) ([]byte, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("the image has no /%s", name)
		}
		if err != nil {
			return nil, err
		}
		if path.Clean(h.Name) == name && h.Typeflag == tar.TypeReg {
			if h.Mode&0o111 == 0 {
				return nil, fmt.Errorf("/%s is not executable (mode %o)", name, h.Mode)
			}
			return io.ReadAll(tr)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// releasedImage returns the adapter image reference, by digest, that the make release
// of dist wrote into its install.
func releasedImage(t *testing.T, dist string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dist, "images.json"))
	if err != nil {
		t.Fatal(err)
	}
	var records []struct{ Name, Repository, Digest string }
	if err := json.Unmarshal(b, &records); err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		if r.Name == "saturation-adapter" {
			return r.Repository + "@" + r.Digest
		}
	}
	t.Fatalf("%s/images.json names no saturation-adapter image", dist)
	return ""
}
