package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// hostImage returns the image of the host's architecture from the index of the OCI
// layout in dir, read back from disk as a registry client would.
func hostImage(t *testing.T, dir string) v1.Image {
	t.Helper()
	_, ii, im := layoutIndex(t, dir)
	for _, m := range im.Manifests {
		if m.Platform != nil && m.Platform.OS == "linux" && m.Platform.Architecture == runtime.GOARCH {
			img, err := ii.Image(m.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	t.Fatalf("%s: no linux/%s image", dir, runtime.GOARCH)
	return nil
}

// layoutIndex reads the OCI layout in dir back from disk as a registry client
// would: its tagged entry, the image index that entry names and that index's
// manifest.
func layoutIndex(t *testing.T, dir string) (v1.Descriptor, v1.ImageIndex, *v1.IndexManifest) {
	t.Helper()
	desc, err := LayoutEntry(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	ii, err := idx.ImageIndex(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	return desc, ii, im
}

// unpack writes img's flattened filesystem into a new directory and returns it.
func unpack(t *testing.T, img v1.Image) string {
	t.Helper()
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil { // it becomes /: nobody must traverse it
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return root
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(root, filepath.Clean("/"+h.Name))
		mode := os.FileMode(h.Mode & 0o777)
		if h.Mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(target, b, 0o600); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: unexpected tar entry type %c", h.Name, h.Typeflag)
		}
		if err := os.Chmod(target, mode); err != nil {
			t.Fatal(err)
		}
	}
}

// runImage runs img's entrypoint with args as a container runtime would on its
// unpacked filesystem: chrooted there, as the config's user (no supplementary groups),
// in its working directory, with its environment. files are written into the
// filesystem first (absolute path → content, readable by all), as a ConfigMap
// would mount them. It returns standard output and error. It needs root (to
// chroot and change user).
func runImage(t *testing.T, img v1.Image, files map[string]string, args ...string) (string, error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("running an image's entrypoint as its user needs root (chroot, setuid)")
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	uid, gid, err := parseUser(cfg.Config.User)
	if err != nil {
		t.Fatal(err)
	}
	root := unpack(t, img)
	for name, content := range files {
		target := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(target, []byte(content), 0o644); err != nil { //nolint:gosec // read by the image's user, as a mounted ConfigMap is
			t.Fatal(err)
		}
	}
	argv := append(append(append([]string(nil), cfg.Config.Entrypoint...), cfg.Config.Cmd...), args...)
	if len(argv) == 0 || !strings.HasPrefix(argv[0], "/") {
		t.Fatalf("entrypoint %q: want an absolute path", argv)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = cfg.Config.WorkingDir
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	cmd.Env = cfg.Config.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     root,
		Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}},
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// parseUser parses a numeric uid:gid; a name or a missing gid is refused (the image
// must not depend on the runtime resolving names).
func parseUser(s string) (uint32, uint32, error) {
	u, g, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, errors.New("user " + strconv.Quote(s) + ": want uid:gid")
	}
	uid, err := strconv.ParseUint(u, 10, 32)
	if err != nil {
		return 0, 0, err
	}
	gid, err := strconv.ParseUint(g, 10, 32)
	return uint32(uid), uint32(gid), err
}
