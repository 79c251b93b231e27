package main

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Push pushes the one entry of the OCI layout in dir (an image index, or a single
// manifest such as a chart) to ref, a repository:tag, with the credentials of the Docker
// config (`docker login`, docker/login-action), and returns the reference by digest.
// What the registry then serves under the tag must be the layout's digest: the digest
// the release YAML and the chart pin, and the one the workflow signs.
func Push(ctx context.Context, dir, ref string, opts ...name.Option) (string, error) {
	tag, err := name.NewTag(ref, append([]name.Option{name.StrictValidation}, opts...)...)
	if err != nil {
		return "", fmt.Errorf("push %s: want registry/repository:tag: %w", ref, err)
	}
	desc, err := LayoutEntry(dir)
	if err != nil {
		return "", err
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return "", err
	}
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	switch {
	case desc.MediaType.IsIndex():
		ii, err := idx.ImageIndex(desc.Digest)
		if err != nil {
			return "", err
		}
		err = remote.WriteIndex(tag, ii, ropts...)
		if err != nil {
			return "", fmt.Errorf("push %s: %w", ref, err)
		}
	case desc.MediaType.IsImage():
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return "", err
		}
		if err := remote.Write(tag, img, ropts...); err != nil {
			return "", fmt.Errorf("push %s: %w", ref, err)
		}
	default:
		return "", fmt.Errorf("%s: entry of media type %s is neither an index nor a manifest", dir, desc.MediaType)
	}
	got, err := remote.Head(tag, ropts...)
	if err != nil {
		return "", fmt.Errorf("push %s: reading it back: %w", ref, err)
	}
	if got.Digest != desc.Digest {
		return "", fmt.Errorf("push %s: the registry serves %s, the layout holds %s", ref, got.Digest, desc.Digest)
	}
	return tag.Context().Name() + "@" + desc.Digest.String(), nil
}
