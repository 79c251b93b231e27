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
	$(GO) build -trimpath -o $(BIN)/emulator ./cmd/emulator

test: test-unit test-e2e

test-unit:
	$(GO) test -race -count=1 ./...

# --- e2e (test/e2e is its own Go module; see test/e2e/README.md) ---------------------------
E2E_K8S_VERSION := v1.37.2
E2E_ETCD_VERSION := v3.7.0
E2E_SIM_VERSION := v0.10.2
E2E_TOOLS := $(CACHE)/e2e-tools/k8s-$(E2E_K8S_VERSION)_etcd-$(E2E_ETCD_VERSION)_sim-$(E2E_SIM_VERSION)
E2E_K8S_LDFLAGS := -s -w -X k8s.io/component-base/version.gitVersion=$(E2E_K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 \
	-X k8s.io/client-go/pkg/version.gitVersion=$(E2E_K8S_VERSION) \
	-X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=37
E2E_TEST_FLAGS ?= -count=1 -timeout 40m

# Control-plane binaries, etcd and llm-d-inference-sim, built once per version set; a stamp
# per group skips the (slow) build while the versions match.
e2e-tools: $(E2E_TOOLS)/.stamp-k8s $(E2E_TOOLS)/.stamp-sim

$(E2E_TOOLS)/.stamp-k8s:
	@mkdir -p $(E2E_TOOLS)
	cd test/e2e && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(E2E_K8S_LDFLAGS)' -o $(E2E_TOOLS)/ \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kubectl ./cmd/etcd
	@touch $@

$(E2E_TOOLS)/.stamp-sim: $(E2E_TOOLS)/.stamp-k8s
	cd test/e2e && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(E2E_TOOLS)/ \
		github.com/llm-d/llm-d-inference-sim/cmd/llm-d-inference-sim
	@touch $@

# The engine emulator binary the node agent starts per pod.
e2e-bins: build
	$(GO) build -trimpath -o $(BIN)/emulator ./cmd/emulator

test-e2e: e2e-tools e2e-bins
	cd test/e2e && E2E_TOOLS_DIR=$(E2E_TOOLS) E2E_BIN_DIR=$(CURDIR)/$(BIN) \
		$(GO) test $(E2E_TEST_FLAGS) ./...

demo: e2e-tools e2e-bins
	cd test/e2e && E2E_TOOLS_DIR=$(E2E_TOOLS) E2E_BIN_DIR=$(CURDIR)/$(BIN) \
		$(GO) run ./cmd/demo $(DEMO_FLAGS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...

verify:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...

clean:
	rm -rf $(BIN)
