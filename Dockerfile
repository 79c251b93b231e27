# saturation-adapter images, one per binary that runs in a cluster, for users with a
# container engine. Releases are not built from this file: `make release` builds both
# images without one, reproducibly, on a base made in code (hack/release,
# docs/install.md); keep the two alike (static binaries, user 65534, OCI labels).
#
#   adapter (the default target): the API server, `docker build --target adapter`
#   drain: the engine pods' preStop helper, `docker build --target drain`
# `make image` builds both (IMAGE and DRAIN_IMAGE), passing VERSION, GIT_COMMIT,
# GIT_TREE_STATE and BUILD_DATE (the build context has no .git). The lab tool never runs
# in a cluster and has no image.
#
# Base images are pinned by digest: a tag can be re-pushed, a digest cannot, so the same
# Dockerfile builds the same image. The tag beside each digest says what it is. These
# digests were NOT pulled or verified on the machine that wrote this file (it has no
# container engine): they are the multi-platform index digests other public projects pin
# for the same tags (e.g. kubeswift-io/kubeswift-spin's Dockerfile, 2026). Verify and
# refresh them with
#   crane digest golang:1.26.8-bookworm
#   crane digest gcr.io/distroless/static-debian12:nonroot
# (or `docker buildx imagetools inspect <image>`), and bump them on purpose, in a commit.
#
# Builder pinned to a patch release (the toolchain `make test` runs here); keep it at or
# above the go line of go.mod. It runs on the build host's platform and cross-compiles,
# so `docker buildx build --platform linux/amd64,linux/arm64` needs no emulation.
FROM --platform=$BUILDPLATFORM golang:1.26.8-bookworm@sha256:a688600ca24f8a4d3ca77f95b0dd40704a9fc787c826660eb7ba0b641b8b175d AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
# Modules first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
# Then only the sources the binaries are built from (see .dockerignore; hack's
# TestDockerfileBuilds builds from exactly these paths).
COPY cmd/ cmd/
COPY pkg/ pkg/
COPY internal/ internal/
# The version, as `make build` stamps it (see VERSION_LDFLAGS in the Makefile).
ARG VERSION=v0.0.0-0-gunknown
ARG GIT_COMMIT=unknown
ARG GIT_TREE_STATE=unknown
ARG BUILD_DATE=1970-01-01T00:00:00Z
RUN major="${VERSION#v}"; major="${major%%.*}"; minor="${VERSION#v*.}"; minor="${minor%%.*}"; \
    for bin in adapter drain; do \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags="-s -w \
      -X k8s.io/component-base/version.gitVersion=${VERSION} \
      -X k8s.io/component-base/version.gitCommit=${GIT_COMMIT} \
      -X k8s.io/component-base/version.gitTreeState=${GIT_TREE_STATE} \
      -X k8s.io/component-base/version.buildDate=${BUILD_DATE} \
      -X k8s.io/component-base/version.gitMajor=${major} \
      -X k8s.io/component-base/version.gitMinor=${minor}" \
    -o /out/$bin ./cmd/$bin || exit 1; done

# The drain image: the preStop helper alone (about 10 MB), copied into engine pods by
# an initContainer running `drain install DIR`.
FROM gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab AS drain
ARG VERSION=v0.0.0-0-gunknown
ARG GIT_COMMIT=unknown
ARG BUILD_DATE=1970-01-01T00:00:00Z
ARG SOURCE=https://github.com/saturation-adapter/saturation-adapter
LABEL org.opencontainers.image.title="saturation-adapter-drain" \
      org.opencontainers.image.description="preStop helper that waits until an LLM engine has nothing running or waiting" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${GIT_COMMIT}" \
      org.opencontainers.image.created="${BUILD_DATE}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/drain /drain
# nobody, as in the released images and the manifests' securityContext.
USER 65534:65534
ENTRYPOINT ["/drain"]

# The adapter image (the default target, last). Static, shell-less, non-root base: CA
# certificates, tzdata and /etc/passwd only.
FROM gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab AS adapter
ARG VERSION=v0.0.0-0-gunknown
ARG GIT_COMMIT=unknown
ARG BUILD_DATE=1970-01-01T00:00:00Z
ARG SOURCE=https://github.com/saturation-adapter/saturation-adapter
# OCI image annotations (https://github.com/opencontainers/image-spec/blob/main/annotations.md).
LABEL org.opencontainers.image.title="saturation-adapter" \
      org.opencontainers.image.description="Kubernetes External metrics API server that autoscales LLM inference servers on queue depth and KV-cache usage" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${GIT_COMMIT}" \
      org.opencontainers.image.created="${BUILD_DATE}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/adapter /adapter
# nobody (distroless has it too), as in the released images and the Deployment's
# securityContext; the adapter writes only to --cert-dir.
USER 65534:65534
ENTRYPOINT ["/adapter"]
