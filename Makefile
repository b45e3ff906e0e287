# inferpick build, generation and test entry points. `make help` lists them.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
export GOTOOLCHAIN := local

GO ?= go
LOCALBIN ?= $(CURDIR)/bin

# Pinned tools, built from hack/tools/go.mod into bin/.
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
TOOLS_DEPS := hack/tools/go.mod hack/tools/go.sum

# Paths the generators write; `make verify` fails when they drift.
GENERATED_PATHS := api config/crd/bases config/rbac/role.yaml

# Packages run by test-unit: everything but the suites that need a cluster.
UNIT_PKGS = $(shell $(GO) list ./... | grep -v -e /test/integration -e /test/e2e)

# The control plane (etcd, kube-apiserver, kubectl) is built once into a
# cache outside the clone; hack/controlplane.sh prints its directory.
KUBEBUILDER_ASSETS ?= $(shell hack/controlplane.sh)
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
		paths="./api/..." paths="./controllers/..." \
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
	$(GOLANGCI_LINT) run ./...

.PHONY: verify
verify: generate manifests ## Regenerate, check formatting, and fail if generated files drift.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [[ -n "$$out" ]]; then \
		echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	@git diff --exit-code -- $(GENERATED_PATHS) || { \
		echo "generated files are stale: run 'make generate manifests' and commit"; exit 1; }
	@untracked=$$(git ls-files --others --exclude-standard -- $(GENERATED_PATHS)); \
		if [[ -n "$$untracked" ]]; then echo "untracked generated files:"; echo "$$untracked"; exit 1; fi

##@ Test

.PHONY: test
test: test-unit test-integration ## Run all tests that need no full cluster.

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

##@ Tools

.PHONY: tools
tools: $(CONTROLLER_GEN) $(GOLANGCI_LINT) ## Build the pinned tools into bin/.

$(CONTROLLER_GEN): $(TOOLS_DEPS)
	cd hack/tools && $(GO) build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(GOLANGCI_LINT): $(TOOLS_DEPS)
	cd hack/tools && $(GO) build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint
