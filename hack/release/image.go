package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRootUser is the uid and gid every image runs as: nobody (65534), as the manifests'
// and the chart's securityContext set it.
const NonRootUser = "65534:65534"

// CACertsPath is where the images carry their CA bundle: the first file Go's crypto/x509
// reads on Linux (and Debian's path), so TLS to Prometheus or https engines verifies
// without SSL_CERT_FILE.
const CACertsPath = "etc/ssl/certs/ca-certificates.crt"

// Provenance is what every artifact of one release says about where it comes from; the
// OCI labels and annotations carry it (org.opencontainers.image.*).
type Provenance struct {
	// Version is the release, vMAJOR.MINOR.PATCH[-PRERELEASE].
	Version string
	// Revision is the git commit the artifacts are built from.
	Revision string
	// Source is the repository's URL.
	Source string
	// Created is the commit's time: the only time any artifact records, so that two
	// builds of one commit are byte-identical.
	Created time.Time
	// Licenses is an SPDX expression.
	Licenses string
}

// Platform is one OS/architecture of an image and the binary built for it.
type Platform struct {
	OS, Architecture, Variant string
	// Binary is the path of the statically linked (CGO_ENABLED=0) binary.
	Binary string
}

// String returns os/arch[/variant].
func (p Platform) String() string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// ImageSpec describes one image: a single binary as /<Entrypoint> on the base layer.
type ImageSpec struct {
	// Name is the image's name without registry: saturation-adapter.
	Name string
	// Title and Description become org.opencontainers.image.title and .description.
	Title, Description string
	// Entrypoint is the binary's name in the image's root: adapter runs as /adapter.
	Entrypoint string
	Platforms  []Platform
}

// annotations returns the OCI annotations (and labels) of an image built from spec.
func (spec ImageSpec) annotations(p Provenance) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       spec.Title,
		"org.opencontainers.image.description": spec.Description,
		"org.opencontainers.image.source":      p.Source,
		"org.opencontainers.image.url":         p.Source,
		"org.opencontainers.image.version":     p.Version,
		"org.opencontainers.image.revision":    p.Revision,
		"org.opencontainers.image.created":     p.Created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.licenses":    p.Licenses,
	}
}

// BuildIndex returns the OCI image index of spec: one image per platform, each the base
// layer (BaseLayer) and a layer holding the platform's binary, run as NonRootUser.
// Nothing is pulled: the base is built here.
func BuildIndex(spec ImageSpec, p Provenance) (v1.ImageIndex, error) {
	if len(spec.Platforms) == 0 {
		return nil, fmt.Errorf("image %s: no platforms", spec.Name)
	}
	base, err := BaseLayer(p.Created)
	if err != nil {
		return nil, err
	}
	ann := spec.annotations(p)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, pl := range spec.Platforms {
		img, err := buildImage(spec, pl, base, p)
		if err != nil {
			return nil, fmt.Errorf("image %s %s: %w", spec.Name, pl, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				Platform: &v1.Platform{OS: pl.OS, Architecture: pl.Architecture, Variant: pl.Variant},
			},
		})
	}
	return mutate.Annotations(idx, ann).(v1.ImageIndex), nil
}

// buildImage returns the image of spec for one platform.
func buildImage(spec ImageSpec, pl Platform, base v1.Layer, p Provenance) (v1.Image, error) {
	bin, err := os.ReadFile(pl.Binary)
	if err != nil {
		return nil, err
	}
	if err := checkStatic(bin, pl); err != nil {
		return nil, fmt.Errorf("%s: %w", pl.Binary, err)
	}
	binLayer, err := layerOf([]tarEntry{{name: spec.Entrypoint, mode: 0o755, data: bin}}, p.Created)
	if err != nil {
		return nil, err
	}
	labels := spec.annotations(p)
	cfg := &v1.ConfigFile{
		Architecture: pl.Architecture,
		OS:           pl.OS,
		Variant:      pl.Variant,
		Created:      v1.Time{Time: p.Created.UTC()},
		Config: v1.Config{
			User:       NonRootUser,
			Entrypoint: []string{"/" + spec.Entrypoint},
			Env:        []string{"PATH=/", "SSL_CERT_FILE=/" + CACertsPath},
			WorkingDir: "/",
			Labels:     labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: p.Created.UTC()}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "hack/release: /etc/passwd, /etc/group, /tmp and " + CACertsPath + " (" + caSource + ")",
			Comment: "base built in code, nothing pulled",
		}},
		mutate.Addendum{Layer: binLayer, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "hack/release: /" + spec.Entrypoint + " (CGO_ENABLED=0 go build -trimpath)",
		}},
	)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	return mutate.Annotations(img, labels).(v1.Image), nil
}

// tarEntry is a file (data set) or directory (name ending in /) of a layer.
type tarEntry struct {
	name string
	mode int64
	data []byte
}

// layerOf returns a gzip-compressed OCI layer holding entries, sorted by name, owned by
// root, every time set to mtime: the same entries always give the same digest.
func layerOf(entries []tarEntry, mtime time.Time) (v1.Layer, error) {
	entries = append([]tarEntry(nil), entries...)
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			ModTime: mtime.UTC().Truncate(time.Second),
			Format:  tar.FormatPAX,
		}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// BaseLayer returns the layer every image starts from, in place of a distroless base:
// /etc/passwd and /etc/group naming root and nobody (65534), /tmp (1777) and the CA
// bundle (CACertsPath). Its digest depends only on mtime and the pinned CA module, so
// the adapter and drain images share it.
func BaseLayer(mtime time.Time) (v1.Layer, error) {
	certs, err := caBundle()
	if err != nil {
		return nil, err
	}
	var entries []tarEntry
	for _, d := range []string{"etc/", "etc/ssl/", "etc/ssl/certs/"} {
		entries = append(entries, tarEntry{name: d, mode: 0o755})
	}
	entries = append(entries,
		tarEntry{name: "tmp/", mode: 0o1777},
		tarEntry{name: "etc/passwd", mode: 0o644, data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n")},
		tarEntry{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnobody:x:65534:\n")},
		tarEntry{name: CACertsPath, mode: 0o644, data: certs},
		tarEntry{name: "etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
	)
	for _, e := range entries {
		if d := path.Dir(strings.TrimSuffix(e.name, "/")); d != "." && !hasEntry(entries, d+"/") {
			return nil, fmt.Errorf("base layer: %s has no parent directory entry", e.name)
		}
	}
	return layerOf(entries, mtime)
}

func hasEntry(entries []tarEntry, name string) bool {
	for _, e := range entries {
		if e.name == name {
			return true
		}
	}
	return false
}
