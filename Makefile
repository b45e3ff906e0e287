# inferpick build, generation and test entry points. `make help` lists them.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
export GOTOOLCHAIN := local

GO ?= go
# Envoy's ext_proc messages marshal through the vtprotobuf code
# go-control-plane generates behind this tag (picker/extproc/codec.go);
# without it they fall back to reflection.
BUILD_TAGS ?= vtprotobuf
export GOFLAGS := $(strip $(GOFLAGS) -tags=$(BUILD_TAGS))
LOCALBIN ?= $(CURDIR)/bin

# Pinned tools, built from hack/tools/go.mod into bin/.
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
KUSTOMIZE ?= $(LOCALBIN)/kustomize
KUSTOMIZE_DEPS := hack/tools/kustomize/go.mod hack/tools/kustomize/go.sum
TOOLS_DEPS := hack/tools/go.mod hack/tools/go.sum

# Paths the generators write; `make verify` fails when they drift.
GENERATED_PATHS := $(wildcard api/*/zz_generated.*.go) config/crd/bases config/rbac/role.yaml

# Packages run by test-unit: everything but the suites that need a cluster.
UNIT_PKGS = $(shell $(GO) list ./... | grep -v -e /test/integration -e /test/e2e -e /test/reliability)

# The control plane (etcd, kube-apiserver, kubectl) is built once into a
# cache outside the clone; hack/controlplane.sh prints its directory.
# A failed build stops make here rather than running the suites without it.
KUBEBUILDER_ASSETS ?= $(or $(shell hack/controlplane.sh),$(error hack/controlplane.sh failed: see its output above))
# The end-to-end suite also runs kube-controller-manager, kube-scheduler and
# kwok (fake kubelets) for its rollout test; same directory, built once.
CLUSTER_ASSETS ?= $(or $(shell hack/controlplane.sh cluster),$(error hack/controlplane.sh cluster failed: see its output above))
INTEGRATION_TIMEOUT ?= 10m
INTEGRATION_FLAGS ?=

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage:\n  make \033[36m<target>\033[0m\n"} \
		/^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } \
		/^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy methods for the API types.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths="./api/..."

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD and the RBAC Role from the code markers.
	$(CONTROLLER_GEN) crd rbac:roleName=inferpick \
		paths="./api/..." paths="./controllers/..." paths="./cmd/inferpick/app/..." \
		output:crd:artifacts:config=config/crd/bases \
		output:rbac:artifacts:config=config/rbac

.PHONY: fmt
fmt: ## Format the Go code.
	$(GO) fmt ./...

.PHONY: vet
vet: ## Run go vet.
	$(GO) vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint.
	$(GOLANGCI_LINT) run --allow-serial-runners ./...

.PHONY: verify
verify: generate manifests verify-gofmt lint verify-tidy verify-shell verify-kustomize verify-chart-crds ## Regenerate and fail on drift; gofmt, golangci-lint, go mod tidy of every module, shellcheck, kustomize build, chart CRDs.
	@git diff --exit-code -- $(GENERATED_PATHS) || { \
		echo "generated files are stale: run 'make generate manifests' and commit"; exit 1; }
	@untracked=$$(git ls-files --others --exclude-standard -- $(GENERATED_PATHS)); \
		if [[ -n "$$untracked" ]]; then echo "untracked generated files:"; echo "$$untracked"; exit 1; fi

.PHONY: verify-gofmt
verify-gofmt: ## Fail when a Go file needs gofmt.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [[ -n "$$out" ]]; then \
		echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# Every module of the repository: the project and its pinned tool modules.
GO_MODULES = $(sort $(dir $(shell git ls-files '*go.mod')))

.PHONY: verify-tidy
verify-tidy: ## Fail when `go mod tidy` would change a module's go.mod or go.sum.
	@for m in $(GO_MODULES); do \
		echo "go mod tidy -diff in $$m"; \
		(cd $$m && $(GO) mod tidy -diff) || { echo "run 'go mod tidy' in $$m"; exit 1; }; \
	done

# Shell scripts: hack/ and the CI entry point.
SHELL_SCRIPTS = $(shell git ls-files hack '*.sh' | grep -E '\.sh$$') .ci/run

.PHONY: verify-shell
verify-shell: ## Run shellcheck on the scripts (Debian package shellcheck).
	@command -v shellcheck >/dev/null || { echo "shellcheck not found: apt-get install shellcheck"; exit 1; }
	shellcheck $(SHELL_SCRIPTS)

.PHONY: verify-kustomize
verify-kustomize: $(KUSTOMIZE) ## Build every kustomization under config/.
	@for k in $$(git ls-files 'config/*kustomization.yaml'); do \
		d=$$(dirname $$k); echo "kustomize build $$d"; \
		$(KUSTOMIZE) build $$d >/dev/null || exit 1; \
	done

.PHONY: verify-chart-crds
verify-chart-crds: ## Fail when the chart's CRDs differ from config/crd/bases.
	@diff -r config/crd/bases charts/inferpick/crds || { \
		echo "the chart's CRDs differ from config/crd/bases: run 'make chart-crds'"; exit 1; }

##@ Test

.PHONY: test
test: verify test-unit test-integration test-chart test-e2e test-demo test-reliability fuzz-short ## Run make verify, then every suite: unit, integration, chart, end-to-end, demo, reliability, short fuzzing.

.PHONY: test-unit
test-unit: ## Run the unit tests with the race detector.
	$(GO) test -race $(UNIT_PKGS)

.PHONY: test-integration
test-integration: ## Run the integration suites against a real kube-apiserver and etcd.
	KUBEBUILDER_ASSETS="$(KUBEBUILDER_ASSETS)" $(GO) test -race -timeout $(INTEGRATION_TIMEOUT) \
		./test/integration/... $(INTEGRATION_FLAGS)

.PHONY: controlplane
controlplane: ## Build (once) and print the directory of etcd, kube-apiserver and kubectl.
	@hack/controlplane.sh

.PHONY: cluster
cluster: ## Also build (once) kube-controller-manager, kube-scheduler and kwok into that directory.
	@hack/controlplane.sh cluster

##@ Tools

.PHONY: tools
tools: $(CONTROLLER_GEN) $(GOLANGCI_LINT) $(KUSTOMIZE) ## Build the pinned tools into bin/.

$(CONTROLLER_GEN): $(TOOLS_DEPS)
	cd hack/tools && $(GO) build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(GOLANGCI_LINT): $(TOOLS_DEPS)
	cd hack/tools && $(GO) build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

# kustomize in its own module: its Kubernetes libraries differ from ours.
$(KUSTOMIZE): $(KUSTOMIZE_DEPS)
	cd hack/tools/kustomize && $(GO) build -o $@ sigs.k8s.io/kustomize/kustomize/v5

##@ Chart and end-to-end

# helm, pinned in its own tools module (its Kubernetes libraries differ from
# ours). Without the -X settings `helm template` and `helm lint` assume
# Kubernetes 1.20.
HELM_VERSION ?= v3.19.0
HELM ?= $(LOCALBIN)/helm
HELM_DEPS := hack/tools/helm/go.mod hack/tools/helm/go.sum
HELM_KUBE_MAJOR := 1
HELM_KUBE_MINOR := 36
HELM_LDFLAGS := -s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	$(foreach p,chartutil lint/rules,-X helm.sh/helm/v3/pkg/$(p).k8sVersionMajor=$(HELM_KUBE_MAJOR) \
	-X helm.sh/helm/v3/pkg/$(p).k8sVersionMinor=$(HELM_KUBE_MINOR))
E2E_TIMEOUT ?= 20m
E2E_FLAGS ?=

.PHONY: helm
helm: $(HELM) ## Build the pinned helm into bin/.

$(HELM): $(HELM_DEPS)
	cd hack/tools/helm && $(GO) build -trimpath -ldflags '$(HELM_LDFLAGS)' -o $@ helm.sh/helm/v3/cmd/helm

.PHONY: chart-crds
chart-crds: ## Copy every generated CRD into the chart's crds/.
	cp config/crd/bases/*.yaml charts/inferpick/crds/

.PHONY: test-chart
test-chart: $(HELM) ## Lint the chart, check its schema and golden renderings (UPDATE=1 rewrites them).
	HELM="$(HELM)" $(GO) test ./test/e2e/chart/ $(if $(UPDATE),-args -update)

.PHONY: test-e2e
test-e2e: $(HELM) ## helm install into a real API server, run the picker as the chart's ServiceAccount, route requests; roll the chart out on kube-controller-manager, kube-scheduler and kwok.
	KUBEBUILDER_ASSETS="$(CLUSTER_ASSETS)" HELM="$(HELM)" $(GO) test -timeout $(E2E_TIMEOUT) \
		./test/e2e/ $(E2E_FLAGS)

##@ Image

# `make image` needs no Docker and no registry: hack/image cross-compiles
# and writes OCI layouts and archives, named as the chart expects.
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64

.PHONY: image
image: ## Build the inferpick and vllm-sim images (IMAGE_PLATFORMS) into bin/image/ as OCI layouts and .tar archives, with Go alone.
	$(GO) run ./hack/image --out $(LOCALBIN)/image --platforms $(IMAGE_PLATFORMS) \
		--revision "$$(git rev-parse HEAD)" --created "$$(git log -1 --format=%cI)"

##@ Benchmarks

BENCH_FLAGS ?=

.PHONY: bench
bench: ## Run the hot-path, ext_proc load, scrape and routing benchmarks; write BENCHMARKS.md and docs/bench/*.png.
	$(GO) run ./test/bench $(BENCH_FLAGS)

.PHONY: bench-peers
bench-peers: ## Build the upstream endpoint picker (hack/peers.sh, EPP_VERSION) and run the ext_proc load test through it and inferpick; write docs/bench/peers.md.
	$(GO) run ./test/bench -only peers -out docs/bench/peers.md $(BENCH_FLAGS)

##@ Demo

# The demo's own binary is bin/inferpick-demo; its kubeconfig and logs go
# to bin/demo/. KEEP=1, DEMO_REQUESTS=n and DEMO_POLICY=name reach it
# through the environment.
DEMO_FLAGS ?=
DEMO_TIMEOUT ?= 10m

.PHONY: demo
demo: ## Run API server, 4 simulated vLLM pods, inferpick and a gateway on this machine, send a workload, report (KEEP=1 stays up).
	$(GO) build -o $(LOCALBIN)/inferpick ./cmd/inferpick
	$(GO) build -o $(LOCALBIN)/vllm-sim ./cmd/vllm-sim
	$(GO) build -o $(LOCALBIN)/inferpick-demo ./test/demo
	$(LOCALBIN)/inferpick-demo --controlplane "$(KUBEBUILDER_ASSETS)" --bin $(LOCALBIN) \
		--workdir $(LOCALBIN)/demo $(DEMO_FLAGS)

.PHONY: test-demo
test-demo: ## Run a short demo as a test: every pod serves, nothing fails, in-flight load ends at 0.
	KUBEBUILDER_ASSETS="$(KUBEBUILDER_ASSETS)" DEMO_SMOKE=1 $(GO) test -race -timeout $(DEMO_TIMEOUT) \
		-run TestDemoSmoke ./test/demo/


##@ Reliability

# The reliability suite drives real picker, vllm-sim and API-server
# processes (test/reliability, docs/reliability.md). Its short soak and a
# short fuzz pass run in `make test`; `make soak` and `make fuzz` run long.
RELIABILITY_TIMEOUT ?= 15m
RELIABILITY_FLAGS ?=
SOAK_DURATION ?= 5m
FUZZ_SHORT ?= 10s
FUZZ_TIME ?= 2m

.PHONY: test-reliability
test-reliability: ## Abort storms, fallbacks, pod churn, long requests, faults, bad input, security, short soak.
	KUBEBUILDER_ASSETS="$(KUBEBUILDER_ASSETS)" $(GO) test -race -timeout $(RELIABILITY_TIMEOUT) \
		./test/reliability/... $(RELIABILITY_FLAGS)

.PHONY: soak
soak: ## Soak the picker for SOAK_DURATION (default 5m) and print RSS, heap and goroutines over time.
	RELIABILITY_SOAK=$(SOAK_DURATION) $(GO) test -timeout 60m -run '^TestSoak$$' -v ./test/reliability/

.PHONY: fuzz-short
fuzz-short: ## Run every fuzz target for FUZZ_SHORT (default 10s).
	hack/fuzz.sh $(FUZZ_SHORT)

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZ_TIME (default 2m).
	hack/fuzz.sh $(FUZZ_TIME)
