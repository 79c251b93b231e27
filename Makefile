# saturation-adapter build. `make test` runs every test; `make demo` runs the demo.
SHELL := /bin/bash
GO ?= go
BIN := bin
# Build outputs that are slow to make (control-plane binaries) live in an ignored folder.
CACHE := $(CURDIR)/.cache
IMAGE ?= saturation-adapter:dev
DRAIN_IMAGE ?= saturation-adapter-drain:dev

.PHONY: all build test test-unit test-e2e bench verify demo image manifests clean e2e-tools \
	chart-lint release tools kustomize helm version-ldflags

all: build

# --- version ------------------------------------------------------------------------------
# Stamped into k8s.io/component-base/version, which `adapter --version` and the API
# server's /version report. VERSION defaults to `git describe`; without a tag that is a
# bare commit, which is not a version the API server can parse (its effective version
# comes from this gitVersion, and k8s.io/component-base/compatibility panics on a bad
# one), so it becomes v0.0.0-0-g<commit>. Override with `make build VERSION=v1.2.3`.
GIT_DESCRIBE := $(shell git describe --tags --always --dirty --match 'v[0-9]*' 2>/dev/null)
VERSION ?= $(if $(filter v%,$(GIT_DESCRIBE)),$(GIT_DESCRIBE),v0.0.0-0-g$(or $(GIT_DESCRIBE),unknown))
GIT_COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
GIT_TREE_STATE ?= $(shell test -z "$$(git status --porcelain 2>/dev/null)" && echo clean || echo dirty)
# Reproducible: the commit's time, not the wall clock, unless overridden.
BUILD_DATE ?= $(or $(shell TZ=UTC git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd 2>/dev/null),1970-01-01T00:00:00Z)
# v1.2.3-rc.1 -> major 1, minor 2.
VERSION_MAJOR = $(word 1,$(subst ., ,$(patsubst v%,%,$(VERSION))))
VERSION_MINOR = $(word 2,$(subst ., ,$(patsubst v%,%,$(VERSION))))
VERSION_PKG := k8s.io/component-base/version
VERSION_LDFLAGS = -X $(VERSION_PKG).gitVersion=$(VERSION) -X $(VERSION_PKG).gitCommit=$(GIT_COMMIT) \
	-X $(VERSION_PKG).gitTreeState=$(GIT_TREE_STATE) -X $(VERSION_PKG).buildDate=$(BUILD_DATE) \
	-X $(VERSION_PKG).gitMajor=$(VERSION_MAJOR) -X $(VERSION_PKG).gitMinor=$(VERSION_MINOR)

# Prints the ldflags (hack/version_test.go builds a program with them).
version-ldflags:
	@echo '$(VERSION_LDFLAGS)'

# The three binaries, one per job: adapter (the API server and explain), lab
# (simulate, calibrate, emulator) and drain (the engine pods' preStop hook, kept
# small because every engine pod gets a copy).
BINARIES := adapter lab drain
# Built as the images' binaries are (static, CGO_ENABLED=0, -trimpath): the e2e tests run
# the build that ships, and share its compiled packages with the e2e test binaries and the
# release's, instead of compiling every dependency once more with cgo.
build:
	@for b in $(BINARIES); do echo "CGO_ENABLED=0 $(GO) build -trimpath -ldflags '<version stamp>' -o $(BIN)/$$b ./cmd/$$b"; \
		CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(VERSION_LDFLAGS)' -o $(BIN)/$$b ./cmd/$$b || exit 1; done

test: test-unit test-e2e

# The chart and manifest tests run the helm and kustomize binaries built into .cache/bin;
# they fail (they do not skip) when these variables are missing.
TEST_TOOLS_ENV = SATURATION_ADAPTER_HELM=$(HELM) SATURATION_ADAPTER_KUSTOMIZE=$(KUSTOMIZE)

# The adapter's module, then the unit tests of the e2e module's packages (its own go.mod, so
# ./... at the root does not reach it), both with the race detector.
E2E_UNIT_PKGS := ./controlplane/... ./flowgate/... ./loadgen/... ./nodeagent/... ./stack/...
# go test's default 10 min per package is a hang guard, not a budget: hack's TestRelease
# cross-builds both images twice, which on a cold build cache and a busy 2-core machine
# takes longer than that.
UNIT_TEST_FLAGS := -race -count=1 -timeout 30m
test-unit: tools
	$(TEST_TOOLS_ENV) $(GO) test $(UNIT_TEST_FLAGS) ./...
	@# hack/release (its own module): the image builder, the chart packager and the push
	@# to a loopback registry; TestDist checks the dist/ that hack's TestRelease just
	@# wrote with make release, and runs each image's entrypoint as its user (root needed).
	cd hack/release && $(TEST_TOOLS_ENV) SATURATION_ADAPTER_DIST=$(CURDIR)/$(RELEASE_DIR) $(GO) test $(UNIT_TEST_FLAGS) ./...
	cd test/e2e && $(GO) test $(UNIT_TEST_FLAGS) $(E2E_UNIT_PKGS)
	@# docs/scoreboard.md's short scoreboard and replay, and lab's --help examples, replay
	@# minutes of traffic: too slow under -race, so without it (TestScoreboardDocFullTables,
	@# half an hour of CPU per trace, runs only with LAB_FULL_SCOREBOARD=1).
	$(GO) test -count=1 -timeout 30m -run 'TestScoreboardDoc|TestLabHelpExamples|TestCalibrateRecovers' ./cmd/lab/app ./lab/calibrate
	$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME_TEST)

# Go fuzz targets (package:target), their invariants in each fuzz_test.go. `make test`
# runs each for FUZZTIME_TEST; `make fuzz FUZZTIME=10m` longer. A failing input is saved
# under the package's testdata/fuzz and replayed by every later `go test`.
# FUZZTIME_TEST is a count of runs, not a duration: with a duration, Go 1.26's fuzz
# coordinator can report a worker still running at the deadline as a failure ("context
# deadline exceeded", no failing input; golang/go#75804, fixed in Go 1.27), which a loaded
# CI machine hits. 500 runs take 0.1-6 s per target here.
FUZZ_TARGETS := ./pkg/signals:FuzzExtract ./pkg/signals:FuzzExtractSequence ./pkg/signals:FuzzGateway ./pkg/policy:FuzzPool ./pkg/policy:FuzzAggregate ./pkg/policy:FuzzTrend \
	./pkg/signals:FuzzHistogramSince ./pkg/history:FuzzCompactHistory ./pkg/signals:FuzzSplitSeries ./pkg/provider:FuzzMilliQuantity ./pkg/provider:FuzzProviderAggregates ./pkg/config:FuzzParse \
	./pkg/prometheus:FuzzDecode ./pkg/prometheus:FuzzDecodeStream
FUZZTIME_TEST ?= 500x
FUZZTIME ?= 2m
.PHONY: fuzz
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzz $$pkg $$fn for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg; done

# --- e2e (test/e2e is its own Go module; see test/e2e/README.md) ---------------------------
E2E_K8S_VERSION := v1.37.2
E2E_ETCD_VERSION := v3.7.0
E2E_SIM_VERSION := v0.10.2
E2E_TOOLS := $(CACHE)/e2e-tools/k8s-$(E2E_K8S_VERSION)_etcd-$(E2E_ETCD_VERSION)_sim-$(E2E_SIM_VERSION)
E2E_K8S_LDFLAGS := -s -w -X k8s.io/component-base/version.gitVersion=$(E2E_K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 \
	-X k8s.io/client-go/pkg/version.gitVersion=$(E2E_K8S_VERSION) \
	-X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=37
# The e2e tests run up to 4 at once (t.Parallel; each on its own control plane and leased
# loopback subnet): they mostly wait on sync periods and cold starts, about 0.2 cores for
# one at a time, so the suite's wall time is what shrinks.
E2E_TEST_FLAGS ?= -count=1 -timeout 40m -parallel 4
# Same build settings as e2e-tools, so the test binaries reuse its compiled packages. No
# -race here: it needs cgo and would rebuild all of Kubernetes' client libraries.
# The Prometheus-source tests run a real Prometheus (Debian's prometheus package; .ci/run
# installs it): PROMETHEUS, else prometheus on PATH. They fail without it, as the chart
# tests fail without helm; E2E_SKIP_PROMETHEUS=1 skips them on a machine without it.
PROMETHEUS ?= $(shell command -v prometheus 2>/dev/null)
E2E_GO_ENV := CGO_ENABLED=0 E2E_TOOLS_DIR=$(E2E_TOOLS) E2E_BIN_DIR=$(CURDIR)/$(BIN) E2E_PROMETHEUS=$(PROMETHEUS)

# Control-plane binaries, etcd and llm-d-inference-sim, built once per version set; a stamp
# per group skips the (slow) build while the versions match.
e2e-tools: $(E2E_TOOLS)/.stamp-k8s $(E2E_TOOLS)/.stamp-sim

# The tools build from their own module (hack/e2e-tools), so that Kubernetes' and
# llm-d-inference-sim's dependencies never move the versions the tests build against.
$(E2E_TOOLS)/.stamp-k8s:
	@mkdir -p $(E2E_TOOLS)
	@echo "Building kube-apiserver, kube-controller-manager, kubectl and etcd from source once (about 15-30 min on 2 cores; cached in .cache/ afterwards)"
	cd hack/e2e-tools && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(E2E_K8S_LDFLAGS)' -o $(E2E_TOOLS)/ \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kubectl ./etcd
	@touch $@

$(E2E_TOOLS)/.stamp-sim: $(E2E_TOOLS)/.stamp-k8s
	@echo "Building llm-d-inference-sim from source once (a few minutes)"
	cd hack/e2e-tools && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(E2E_TOOLS)/ \
		github.com/llm-d/llm-d-inference-sim/cmd/llm-d-inference-sim
	@touch $@

# `build` makes bin/adapter, bin/lab and bin/drain, which the tests run as real processes.
# TestInstall runs helm too (the documented Helm install and the chart's dry-runs).
test-e2e: e2e-tools build tools
	cd test/e2e && $(E2E_GO_ENV) $(TEST_TOOLS_ENV) $(GO) test -trimpath $(E2E_TEST_FLAGS) ./...

demo: e2e-tools build
	cd test/e2e && CGO_ENABLED=0 $(GO) build -trimpath -o $(CURDIR)/$(BIN)/e2e-demo ./cmd/demo
	cd test/e2e && $(E2E_GO_ENV) $(CURDIR)/$(BIN)/e2e-demo $(DEMO_FLAGS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/... ./lab/...

# The soak test (test/e2e/soak): the adapter for an hour over 1,000 stand-in engines and
# 100 HPAs on a loopback control plane, a second adapter reading 10 of the pools through
# Prometheus, under a schedule of faults (engines restarting, hanging, serving garbage,
# NaN, huge and slow bodies; Prometheus down; the policy file reloaded, once in three with
# a bad file; kube-apiserver restarted). Fails on any value served outside what the
# stand-ins' known values allow, on memory that grew or was not bounded, on goroutines
# that grew. Not part of `make test` (TestSoak runs a two-minute version);
# SOAK_FLAGS=-h lists the knobs (-duration, -engines, -dir to keep the logs).
SOAK_FLAGS ?=
.PHONY: soak
soak: e2e-tools build
	cd test/e2e && CGO_ENABLED=0 $(GO) build -trimpath -o $(CURDIR)/$(BIN)/soak ./cmd/soak
	cd test/e2e && $(E2E_GO_ENV) $(CURDIR)/$(BIN)/soak $(SOAK_FLAGS)

# The load test (hack/benchscale): loopback engines serving the real vLLM dump,
# scraped every 2 s by the assembled adapter while 500 External metric requests per
# second arrive over HTTPS with a client certificate; one table of the adapter's CPU,
# memory, freshness and latency at each size, with the built-in policies and with
# every term kind. About 7 minutes on 2 cores; BENCH_SCALE_FLAGS=-h lists the knobs.
# Not part of `make test`, which runs its small version (TestHarness).
BENCH_SCALE_FLAGS ?=
.PHONY: bench-scale
bench-scale:
	$(GO) build -o $(BIN)/benchscale ./hack/benchscale
	$(BIN)/benchscale $(BENCH_SCALE_FLAGS)

# Side by side (hack/benchscale -sources): the same 1,000 loopback engines serving the
# real vLLM dump, read by this adapter scraping them (direct), by this adapter reading
# Prometheus (--source=prometheus) and by prometheus-adapter reading Prometheus, with
# Debian's prometheus (2.42, on PATH) scraping them at the same 2 s. One table: CPU and
# memory at 50 requests/s, Prometheus's share, freshness and the maximum request rate on
# 10/100/1,000-pod pools. About 5 minutes on 2 cores; not part of `make test`
# (TestHarnessSources runs it small). prometheus-adapter builds from its Go module at the
# version hack/prometheus-adapter pins, into .cache. BENCH_VS_FLAGS adds benchscale flags.
BENCH_VS_FLAGS ?=
PROMETHEUS_ADAPTER_VERSION := v0.12.0
PROMETHEUS_ADAPTER := $(CACHE)/prometheus-adapter-$(PROMETHEUS_ADAPTER_VERSION)/prometheus-adapter
.PHONY: bench-vs-prometheus-adapter
bench-vs-prometheus-adapter: $(PROMETHEUS_ADAPTER)
	$(GO) build -o $(BIN)/benchscale ./hack/benchscale
	$(BIN)/benchscale -engines 1000 -pool-size 100 -terms default -rate 50 -sources direct,prometheus,prometheus-adapter \
		-max-rate-pools 10,100,1000 -prometheus-adapter $(PROMETHEUS_ADAPTER) $(BENCH_VS_FLAGS)

$(PROMETHEUS_ADAPTER): hack/prometheus-adapter/go.mod hack/prometheus-adapter/go.sum
	@mkdir -p $(@D)
	cd hack/prometheus-adapter && CGO_ENABLED=0 $(GO) build -trimpath -o $@ sigs.k8s.io/prometheus-adapter/cmd/adapter

# Every Go module of the repository: the adapter, the e2e tests and the tool modules.
GO_MODULES := . test/e2e hack/tools hack/e2e-tools hack/lint hack/helm hack/release hack/prometheus-adapter

verify: verify-manifests chart-lint lint verify-workflows
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...
	@# The e2e module's build settings (test-e2e's), so vet reuses the packages it compiles.
	cd test/e2e && CGO_ENABLED=0 $(GO) vet -trimpath ./...
	@for m in $(GO_MODULES); do (cd $$m && $(GO) mod tidy -diff) || { echo "go.mod of $$m is not tidy: run go mod tidy there"; exit 1; }; done

# golangci-lint (configuration in .golangci.yml: the standard linters plus promlinter,
# loggercheck and forbidigo for structured klog calls), built from its Go module by
# hack/lint into the ignored .cache/bin like kustomize.
GOLANGCI_LINT := $(CACHE)/bin/golangci-lint
$(GOLANGCI_LINT): hack/lint/go.mod hack/lint/go.sum
	@mkdir -p $(@D)
	@echo "Building golangci-lint once (a few minutes)"
	cd hack/lint && $(GO) build -trimpath -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

# actionlint (github.com/rhysd/actionlint, a tool of hack/release's module) checks the
# GitHub Actions workflows: syntax, expressions, permissions, known actions' inputs, and
# the run: scripts through shellcheck when it is installed (Debian's shellcheck).
ACTIONLINT := $(CACHE)/bin/actionlint
ACTIONLINT_VERSION = $(shell cd hack/release && $(GO) list -m -f '{{.Version}}' github.com/rhysd/actionlint)
$(ACTIONLINT): hack/release/go.mod hack/release/go.sum
	@mkdir -p $(@D)
	cd hack/release && $(GO) build -trimpath -ldflags '-X github.com/rhysd/actionlint.version=$(ACTIONLINT_VERSION)' \
		-o $@ github.com/rhysd/actionlint/cmd/actionlint

.PHONY: verify-workflows
verify-workflows: $(ACTIONLINT)
	$(ACTIONLINT) -shellcheck='$(shell command -v shellcheck)' -pyflakes= .github/workflows/*.yaml

.PHONY: lint
lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run ./...
	cd test/e2e && CGO_ENABLED=0 $(GOLANGCI_LINT) run --config ../../.golangci.yml ./...
	cd hack/release && $(GOLANGCI_LINT) run --config ../../.golangci.yml ./...

# --- manifests, chart, image and release -------------------------------------------------
# kustomize and helm are built from the Go module proxy into the ignored .cache/bin, each
# from its own tools module so the adapter's go.mod stays lean: hack/tools (kustomize) and
# hack/helm (helm; separate because it needs newer kyaml and Kubernetes libraries than
# kustomize v5.8.1 is released with). Bumping a tools go.mod rebuilds its binary.
KUSTOMIZE := $(CACHE)/bin/kustomize
HELM := $(CACHE)/bin/helm
HELM_VERSION = $(shell cd hack/helm && $(GO) list -m -f '{{.Version}}' helm.sh/helm/v4)
CHART := charts/saturation-adapter
# $(call render-manifests,<kustomization dir>,<output file>)
render-manifests = { echo '\# Generated by `make manifests` from $(1)/kustomization.yaml; do not edit.'; \
	echo '\# The reasons behind each setting are commented in the files that kustomization lists.'; \
	$(KUSTOMIZE) build $(1); } > $(2)
# $(call render-all-manifests,<output dir>): every kustomization, one file each.
render-all-manifests = $(call render-manifests,manifests,$(1)/saturation-adapter.yaml) && \
	$(call render-manifests,manifests/custom-metrics,$(1)/custom-metrics.yaml) && \
	$(call render-manifests,manifests/cert-manager,$(1)/saturation-adapter-cert-manager.yaml) && \
	$(call render-manifests,manifests/insecure,$(1)/saturation-adapter-insecure.yaml) && \
	$(call render-manifests,manifests/monitoring,$(1)/monitoring.yaml)

.PHONY: verify-manifests

tools: $(KUSTOMIZE) $(HELM)
kustomize: $(KUSTOMIZE)
helm: $(HELM)

$(KUSTOMIZE): hack/tools/go.mod hack/tools/go.sum
	@mkdir -p $(@D)
	cd hack/tools && $(GO) build -trimpath -o $@ sigs.k8s.io/kustomize/kustomize/v5

$(HELM): hack/helm/go.mod hack/helm/go.sum
	@mkdir -p $(@D)
	cd hack/helm && $(GO) build -trimpath -ldflags '-s -w -X helm.sh/helm/v4/internal/version.version=$(HELM_VERSION)' \
		-o $@ helm.sh/helm/v4/cmd/helm

# The chart's dashboard is a copy of manifests/monitoring/dashboard.json (Helm reads only
# files inside the chart); `make manifests` refreshes it and verify-manifests checks it.
manifests: $(KUSTOMIZE)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && $(call render-all-manifests,"$$tmp") && \
		mkdir -p manifests/rendered && rm -f manifests/rendered/*.yaml && cp "$$tmp"/*.yaml manifests/rendered/
	cp manifests/monitoring/dashboard.json $(CHART)/dashboards/saturation-adapter.json

# Fails when the committed rendering differs from a fresh one (or manifests/rendered holds
# a file no kustomization renders) or the chart's dashboard copy drifted, then runs the
# manifest and chart tests: every document decodes into a known object and keeps its
# hardening, each TLS mode is consistent, the chart renders what kustomize renders, the
# rules pass Prometheus's rule checks and the dashboard's queries parse.
verify-manifests: tools
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && $(call render-all-manifests,"$$tmp") && \
		{ diff -ru manifests/rendered "$$tmp" || { echo "manifests/rendered is stale: run 'make manifests'"; exit 1; }; }
	@cmp manifests/monitoring/dashboard.json $(CHART)/dashboards/saturation-adapter.json || \
		{ echo "$(CHART)/dashboards/saturation-adapter.json is stale: run 'make manifests'"; exit 1; }
	$(TEST_TOOLS_ENV) $(GO) test -count=1 ./manifests/...

# helm lint, strict (warnings fail); manifests/chart_test.go lints each TLS mode too.
chart-lint: $(HELM)
	$(HELM) lint --strict $(CHART)

# Build args become the version ldflags and the images' OCI labels (see Dockerfile):
# the adapter as $(IMAGE), the drain helper as $(DRAIN_IMAGE).
DOCKER_BUILD_ARGS = --build-arg VERSION=$(VERSION) --build-arg GIT_COMMIT=$(GIT_COMMIT) \
	--build-arg GIT_TREE_STATE=$(GIT_TREE_STATE) --build-arg BUILD_DATE=$(BUILD_DATE)
image:
	docker build --target adapter -t $(IMAGE) $(DOCKER_BUILD_ARGS) .
	docker build --target drain -t $(DRAIN_IMAGE) $(DOCKER_BUILD_ARGS) .

# `make release VERSION=vX.Y.Z [IMAGE_REPO=…] [CHART_REPO=…]` writes, into $(RELEASE_DIR)/,
# exactly what .github/workflows/release.yaml publishes for tag vX.Y.Z (it runs this
# target, then pushes and signs what it wrote). No container engine and no Helm needed:
#   oci/images/saturation-adapter/        OCI layouts of the adapter and drain images: an
#   oci/images/saturation-adapter-drain/  index each (linux/amd64, linux/arm64), tagged vX.Y.Z
#   sbom/<image>_linux_<arch>.cdx.json    a CycloneDX SBOM per platform image
#   images.json                           repositories, index and platform digests, SBOMs
#   saturation-adapter-vX.Y.Z.yaml        the default install (manifests/), both images
#                                         pinned by digest
#   saturation-adapter-X.Y.Z.tgz          the chart, version X.Y.Z, images pinned by digest
#   oci/charts/saturation-adapter/        the chart as the OCI artifact `helm push` makes
#   release-notes.md                      the version's CHANGELOG.md section, then the
#                                         install lines (CHART_REPO) and the images
#   SHA256SUMS                            of the YAML, the chart and the SBOMs
# Every file is a function of the commit (times are the commit's): a second run writes
# the same bytes, so the digests in the YAML and the chart are those the workflow pushes.
# hack/release (its own module) builds the images with go-containerregistry on a base
# built in code, the SBOMs with cyclonedx-gomod, and packages the chart.
IMAGE_REPO ?= ghcr.io/saturation-adapter/saturation-adapter
CHART_REPO ?= ghcr.io/saturation-adapter/charts
RELEASE_SOURCE ?= https://github.com/saturation-adapter/saturation-adapter
RELEASE_DIR ?= dist
# The workflow sets it: a tag without its CHANGELOG.md section fails the release.
RELEASE_NOTES_FLAGS ?=
RELEASE_NAME = saturation-adapter-$(VERSION)
CHART_VERSION = $(patsubst v%,%,$(VERSION))
RELEASE_ARCHES := amd64 arm64
RELEASE_BINARIES := adapter drain
# Per-worktree (not the shared .cache): hack/release is this checkout's code.
RELEASE_BIN := _output/release-bin
RELEASE_TOOL := _output/tools/release
# Outside a git checkout (a source archive) the revision is "unknown" and the time 1970's.
RELEASE_PROVENANCE = -version '$(VERSION)' -revision '$(or $(GIT_COMMIT),unknown)' -created '$(BUILD_DATE)' -source '$(RELEASE_SOURCE)'
# A kustomization that must sit two levels under the repository root: kustomize accepts
# only relative paths to its bases.
RELEASE_KUSTOMIZATION := _output/release-kustomization

.PHONY: release-tool
release-tool: $(RELEASE_TOOL)
$(RELEASE_TOOL): hack/release/go.mod hack/release/go.sum $(wildcard hack/release/*.go)
	cd hack/release && $(GO) build -trimpath -o $(CURDIR)/$@ .

release: $(KUSTOMIZE) $(RELEASE_TOOL)
	@case '$(VERSION)' in v[0-9]*.[0-9]*.[0-9]*) ;; *) echo "VERSION=$(VERSION): want vMAJOR.MINOR.PATCH[-PRERELEASE]"; exit 1;; esac
	@rm -rf $(RELEASE_DIR) && mkdir -p $(RELEASE_DIR)
	@# Static (CGO_ENABLED=0), without VCS stamping (the ldflags carry the commit), so the
	@# binaries depend on nothing but the commit and the toolchain.
	@for arch in $(RELEASE_ARCHES); do for b in $(RELEASE_BINARIES); do \
		echo "build linux/$$arch $$b"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -buildvcs=false \
			-ldflags '-s -w $(VERSION_LDFLAGS)' -o $(RELEASE_BIN)/linux_$$arch/$$b ./cmd/$$b || exit 1; \
	done; done
	$(RELEASE_TOOL) images $(RELEASE_PROVENANCE) -bin-dir $(RELEASE_BIN) -image-repo '$(IMAGE_REPO)' -out $(RELEASE_DIR)
	@set -e; adapter=$$($(RELEASE_TOOL) digest $(RELEASE_DIR)/oci/images/saturation-adapter); \
		drain=$$($(RELEASE_TOOL) digest $(RELEASE_DIR)/oci/images/saturation-adapter-drain); \
		rm -rf $(RELEASE_KUSTOMIZATION) && mkdir -p $(RELEASE_KUSTOMIZATION); \
		printf 'resources:\n- ../../manifests\nimages:\n- name: saturation-adapter\n  newName: %s\n  digest: %s\n' \
			'$(IMAGE_REPO)' "$$adapter" > $(RELEASE_KUSTOMIZATION)/kustomization.yaml; \
		{ echo '# saturation-adapter $(VERSION): the default install (manifests/).'; \
		  echo "# Images: $(IMAGE_REPO)@$$adapter, drain helper for engine pods $(IMAGE_REPO)-drain@$$drain."; \
		  $(KUSTOMIZE) build $(RELEASE_KUSTOMIZATION); } > $(RELEASE_DIR)/$(RELEASE_NAME).yaml; \
		rm -rf $(RELEASE_KUSTOMIZATION)
	$(RELEASE_TOOL) chart $(RELEASE_PROVENANCE) -chart $(CHART) -images $(RELEASE_DIR)/images.json -out $(RELEASE_DIR)
	$(RELEASE_TOOL) notes -changelog CHANGELOG.md -version '$(VERSION)' $(RELEASE_NOTES_FLAGS) \
		-images $(RELEASE_DIR)/images.json -chart-repo '$(CHART_REPO)' -source '$(RELEASE_SOURCE)' > $(RELEASE_DIR)/release-notes.md
	cd $(RELEASE_DIR) && sha256sum $(RELEASE_NAME).yaml saturation-adapter-$(CHART_VERSION).tgz sbom/*.cdx.json > SHA256SUMS
	@echo "wrote $(RELEASE_DIR)/: $(RELEASE_NAME).yaml, saturation-adapter-$(CHART_VERSION).tgz, oci/, sbom/, images.json, release-notes.md, SHA256SUMS"

clean:
	rm -rf $(BIN) _output $(RELEASE_DIR)
