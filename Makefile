# saturation-adapter build. `make test` runs every test; `make demo` runs the demo.
SHELL := /bin/bash
GO ?= go
BIN := bin
# Build outputs that are slow to make (control-plane binaries) live in an ignored folder.
CACHE := $(CURDIR)/.cache
IMAGE ?= saturation-adapter:dev

.PHONY: all build test test-unit test-e2e bench verify demo image manifests clean e2e-tools

all: build

build:
	$(GO) build -trimpath -o $(BIN)/adapter ./cmd/adapter

test: test-unit test-e2e

test-unit:
	$(GO) test -race -count=1 ./...

test-e2e:
	@echo "test-e2e: not wired yet"

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...

verify:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...

clean:
	rm -rf $(BIN)
