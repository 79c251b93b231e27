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
// reference by digest resolves to its filesystem for the host's platform, unpacked,
// and the entrypoint the pod runs chrooted there (nodeagent.Engine.RootFS), so the
// pod sees the image's files and nothing of this machine's (its zoneinfo, its CA
// certificates). The image comes from the OCI registry the reference names when it is
// one of registries (a loopback registry the test pushed to), else from the OCI
// layouts of a make release (dist/images.json maps repositories to layouts). Each
// image is unpacked once.
type releaseImages struct {
	// dist returns the dist/ directory of the checkout make release ran in.
	dist func() string
	// registries are the loopback registries (host:port) the test serves.
	registries []string
	// args are the engine's arguments (the agent's --bind-address).
	args []string

	mu       sync.Mutex
	dir      string
	unpacked map[string]unpackedImage // by image reference
	logf     func(string, ...any)
}

// unpackedImage is an image's filesystem and its entrypoint there.
type unpackedImage struct {
	root, entrypoint string
}

// resolve is a nodeagent.Options.Resolve.
func (r *releaseImages) resolve(image string) (nodeagent.Engine, bool) {
	u, err := r.unpack(image)
	if err != nil {
		r.logf("resolving image %s: %v", image, err)
		return nodeagent.Engine{}, false
	}
	return nodeagent.Engine{Binary: u.entrypoint, RootFS: u.root, Args: r.args, InCluster: true}, true
}

func (r *releaseImages) unpack(image string) (unpackedImage, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if u, ok := r.unpacked[image]; ok {
		return u, nil
	}
	ref, err := name.NewDigest(image)
	if err != nil {
		return unpackedImage{}, fmt.Errorf("not an image reference by digest: %w", err)
	}
	var idx v1.ImageIndex
	if registry := ref.Context().RegistryStr(); contains(r.registries, registry) {
		idx, err = remote.Index(ref)
	} else {
		idx, err = r.fromDist(ref)
	}
	if err != nil {
		return unpackedImage{}, err
	}
	got, err := idx.Digest()
	if err != nil {
		return unpackedImage{}, err
	}
	if got.String() != ref.DigestStr() {
		return unpackedImage{}, fmt.Errorf("index digest %s, want %s", got, ref.DigestStr())
	}
	img, err := hostPlatformImage(idx)
	if err != nil {
		return unpackedImage{}, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return unpackedImage{}, err
	}
	if len(cfg.Config.Entrypoint) != 1 {
		return unpackedImage{}, fmt.Errorf("entrypoint %q: want one binary", cfg.Config.Entrypoint)
	}
	if cfg.Config.User != "65534:65534" {
		return unpackedImage{}, fmt.Errorf("image user %q, want 65534:65534", cfg.Config.User)
	}
	entry := path.Clean(cfg.Config.Entrypoint[0])
	if !path.IsAbs(entry) {
		return unpackedImage{}, fmt.Errorf("entrypoint %q: want an absolute path", entry)
	}
	if r.dir == "" {
		// Not under the test's TempDir: its 0700 parents would keep the pods' user out.
		if r.dir, err = os.MkdirTemp("", "e2e-images"); err != nil {
			return unpackedImage{}, err
		}
		if err := os.Chmod(r.dir, 0o755); err != nil {
			return unpackedImage{}, err
		}
	}
	root := filepath.Join(r.dir, fmt.Sprint(len(r.unpacked)))
	if err := unpackFS(img, root); err != nil {
		return unpackedImage{}, err
	}
	st, err := os.Stat(filepath.Join(root, filepath.FromSlash(entry)))
	if err != nil {
		return unpackedImage{}, fmt.Errorf("the image's entrypoint %s: %w", entry, err)
	}
	if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return unpackedImage{}, fmt.Errorf("the image's entrypoint %s is not an executable file (mode %s)", entry, st.Mode())
	}
	if r.unpacked == nil {
		r.unpacked = map[string]unpackedImage{}
	}
	u := unpackedImage{root: root, entrypoint: entry}
	r.unpacked[image] = u
	r.logf("image %s: unpacked for linux/%s into %s (entrypoint %s, %d bytes)", image, runtime.GOARCH, root, entry, st.Size())
	return u, nil
}

// close removes the unpacked filesystems.
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

// unpackFS writes img's filesystem (its layers flattened) under root: directories,
// regular files with their modes, symbolic and hard links. A name or link that would
// leave root is an error.
func unpackFS(img v1.Image, root string) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "/"))
		if name == "." {
			continue
		}
		if !filepath.IsLocal(name) {
			return fmt.Errorf("image file %q leaves the root", h.Name)
		}
		target := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(h.Mode) & os.ModePerm
		if h.Mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr) //nolint:gosec // our own release's image, size-bounded by its layout
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, target); err != nil {
				return err
			}
			continue
		case tar.TypeLink:
			old := path.Clean(strings.TrimPrefix(h.Linkname, "/"))
			if !filepath.IsLocal(old) {
				return fmt.Errorf("image link %q -> %q leaves the root", h.Name, h.Linkname)
			}
			if err := os.Link(filepath.Join(root, filepath.FromSlash(old)), target); err != nil {
				return err
			}
			continue
		default:
			return fmt.Errorf("image file %q: unexpected tar entry type %c", h.Name, h.Typeflag)
		}
		if err := os.Chmod(target, mode); err != nil {
			return err
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
