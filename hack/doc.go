// Package hack holds the build's own tools and their checks: hack/tools and hack/helm are
// separate Go modules that build kustomize and helm into .cache/bin, and this package's
// tests check what the Makefile and the Dockerfile promise (version stamping, a pinned,
// labelled, non-root image, `make release`). It has no code of its own.
package hack
