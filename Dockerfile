# saturation-adapter image: `make image IMAGE=<registry>/saturation-adapter:<tag>`.
#
# Builder pinned to a patch release (the toolchain `make test` runs here); keep it at
# or above the go line of go.mod. It runs on the build host's platform and
# cross-compiles, so `docker buildx build --platform linux/amd64,linux/arm64` needs no
# emulation.
FROM --platform=$BUILDPLATFORM golang:1.26.8-bookworm AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
# Modules first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
# Then only the sources the binary is built from (see .dockerignore).
COPY cmd/ cmd/
COPY pkg/ pkg/
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags='-s -w' -o /out/adapter ./cmd/adapter

# Static, shell-less, non-root base: CA certificates, tzdata and /etc/passwd only.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/adapter /adapter
# distroless's nonroot user; the Deployment runs it as 65534 instead, which works too
# since the binary is world-executable and the adapter writes only to --cert-dir.
USER 65532:65532
ENTRYPOINT ["/adapter"]
