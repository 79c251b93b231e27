package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// refNameAnnotation tags a manifest of an OCI layout's index.json (the tag it is pushed
// as).
const refNameAnnotation = "org.opencontainers.image.ref.name"

// newLayout replaces dir by an empty OCI image layout.
func newLayout(dir string) (layout.Path, error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	return layout.Write(dir, empty.Index)
}

// WriteIndexLayout writes idx as the one entry of a new OCI layout in dir, tagged tag.
func WriteIndexLayout(dir string, idx v1.ImageIndex, tag string) error {
	p, err := newLayout(dir)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{refNameAnnotation: tag}))
}

// WriteArtifactLayout writes a manifest and its blobs as the one entry of a new OCI
// layout in dir, tagged tag.
func WriteArtifactLayout(dir string, manifest []byte, blobs map[v1.Hash][]byte, tag string) (v1.Hash, error) {
	p, err := newLayout(dir)
	if err != nil {
		return v1.Hash{}, err
	}
	for h, b := range blobs {
		if err := p.WriteBlob(h, io.NopCloser(bytes.NewReader(b))); err != nil {
			return v1.Hash{}, err
		}
	}
	h, _, err := v1.SHA256(bytes.NewReader(manifest))
	if err != nil {
		return v1.Hash{}, err
	}
	if err := p.WriteBlob(h, io.NopCloser(bytes.NewReader(manifest))); err != nil {
		return v1.Hash{}, err
	}
	var m struct {
		MediaType types.MediaType `json:"mediaType"`
	}
	if err := json.Unmarshal(manifest, &m); err != nil {
		return v1.Hash{}, err
	}
	return h, p.AppendDescriptor(v1.Descriptor{
		MediaType: m.MediaType, Size: int64(len(manifest)), Digest: h,
		Annotations: map[string]string{refNameAnnotation: tag},
	})
}

// LayoutEntry returns the one descriptor of the OCI layout in dir and its tag.
func LayoutEntry(dir string) (v1.Descriptor, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return v1.Descriptor{}, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	if len(im.Manifests) != 1 {
		return v1.Descriptor{}, fmt.Errorf("OCI layout %s holds %d entries, want 1", dir, len(im.Manifests))
	}
	return im.Manifests[0], nil
}
