# Everything this project needs is built or installed from here: Go tools from the Go module proxy
# (pinned in hack/tools, hack/lint and hack/kube), protoc and shellcheck from Debian packages.
# Nothing is installed by hand.

SHELL := /usr/bin/env bash -o pipefail -o errexit
.DEFAULT_GOAL := build

ROOT := $(abspath .)
BIN := $(ROOT)/bin
# Go modules of this repository that hold code and tests. api, proto and pkg are separate modules so
# that drivers can import them without controller-runtime, client-go or a cloud SDK; pkg/sanity/s3probe
# and pkg/sanity/azureprobe too, so that only the vendors who use them require the AWS or Azure SDK.
MODULES := . api proto pkg pkg/sanity/s3probe pkg/sanity/azureprobe

CONTROLLER_GEN := $(BIN)/controller-gen
PROTOC_GEN_GO := $(BIN)/protoc-gen-go
PROTOC_GEN_GO_GRPC := $(BIN)/protoc-gen-go-grpc
CODEGEN_TOOLS := $(CONTROLLER_GEN) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC)
# golangci-lint with kube-api-linter compiled in (hack/lint/go.mod pins both).
GOLANGCI_LINT := $(BIN)/golangci-lint
KUBE_BINARIES := $(BIN)/kube-apiserver $(BIN)/etcd $(BIN)/kubectl $(BIN)/kube-controller-manager
# The Kubernetes release of hack/kube, stamped into the binaries as release builds are: Helm charts'
# kubeVersion and version-skew checks read it (unstamped, they report v0.0.0-master).
KUBE_VERSION := $(shell sed -n 's/^require k8s.io\/kubernetes \(v[0-9.]*\)$$/\1/p' hack/kube/go.mod)
KUBE_VERSION_PARTS := $(subst ., ,$(KUBE_VERSION:v%=%))
KUBE_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) -X k8s.io/component-base/version.gitMajor=$(word 1,$(KUBE_VERSION_PARTS)) -X k8s.io/component-base/version.gitMinor=$(word 2,$(KUBE_VERSION_PARTS)) -X k8s.io/component-base/version.gitTreeState=clean
VERSITYGW := $(BIN)/versitygw
# Azurite, Microsoft's Azure Storage emulator (npm), for the Azure driver's tests and make run
# DRIVER=azure. The stamp file records that this version is installed.
AZURITE_VERSION := 3.37.0
AZURITE_STAMP := $(BIN)/azurite/installed-$(AZURITE_VERSION)

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
GO_TEST_FLAGS ?= -race -count=1 -timeout 30m

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

# DRIVER=azure runs the Azure Blob driver against Azurite instead, with its data in .local-azure/.
DRIVER ?= s3
RUN_DIR := $(ROOT)/.local$(if $(filter-out s3,$(DRIVER)),-$(DRIVER))
.PHONY: run
run: build $(KUBE_BINARIES) $(if $(filter azure,$(DRIVER)),azurite,$(VERSITYGW)) ## Run COSI locally (API server, object store, controller, sidecar, S3 driver; DRIVER=azure: Azure Blob driver and Azurite) with a demo; Ctrl-C stops it. Data: .local/ (.local-azure/)
	$(BIN)/cosi-local --dir $(RUN_DIR) --repo $(ROOT) --bin $(BIN) --driver $(DRIVER) $(RUN_FLAGS)

.PHONY: build
build: ## Compile every module and build the commands into bin/.
	@echo "building COSI's commands into bin/ (the first build compiles the dependencies: a few minutes on 2 cores)"
	@for m in $(MODULES); do (cd $$m && go build ./...); done
	go build -o $(BIN)/ ./cmd/... ./dev/cmd/...
	cd pkg && go build -o $(BIN)/ ./cmd/...

.PHONY: sanity
sanity: build ## Run cosi-sanity against the in-memory reference driver, as processes.
	@dir=$$(mktemp -d); \
	COSI_ENDPOINT=unix://$$dir/driver.sock $(BIN)/cosi-driver-memory -v 5 2>$$dir/driver.log & pid=$$!; \
	trap 'kill $$pid 2>/dev/null; rm -rf $$dir' EXIT; \
	$(BIN)/cosi-sanity --endpoint unix://$$dir/driver.sock --timeout 10s --driver-log $$dir/driver.log \
		--bucket-parameters versioning=false --invalid-bucket-parameters versioning=maybe \
		--incompatible-bucket-parameters versioning=true \
		--access-parameters sasExpiry=1h --invalid-access-parameters sasExpiry=soon

.PHONY: generate
generate: $(CODEGEN_TOOLS) protoc ## Regenerate deepcopy, CRDs and protobuf Go code.
	cd api && $(CONTROLLER_GEN) object paths=./...
	cd api && $(CONTROLLER_GEN) crd paths=./... output:crd:artifacts:config=$(ROOT)/config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=cosi-sidecar paths=./internal/sidecar/... output:rbac:dir=config/rbac/sidecar
	$(CONTROLLER_GEN) rbac:roleName=cosi-controller paths=./internal/controller/... output:rbac:dir=config/rbac/controller
	hack/generate-proto.sh

.PHONY: verify
verify: verify-generated verify-fmt verify-mod vet lint ## All static checks.

.PHONY: verify-generated
verify-generated: $(CODEGEN_TOOLS) protoc ## Fail if regenerating changes a committed file.
	hack/verify-generated.sh

.PHONY: verify-fmt
verify-fmt: ## Fail if a Go file is not gofmt-ed.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-ed: $$out" >&2; exit 1; fi

.PHONY: verify-mod
verify-mod: ## Fail if a go.mod or go.sum is not tidy.
	@for m in $(MODULES) hack/tools hack/lint hack/kube hack/versitygw hack/image; do (cd $$m && go mod tidy -diff) || { echo "go.mod of $$m is not tidy (run go mod tidy there)" >&2; exit 1; }; done

.PHONY: vet
vet: ## go vet every module.
	@for m in $(MODULES); do (cd $$m && go vet ./...); done

# Shell scripts that shellcheck checks.
SHELL_SCRIPTS = $(shell git ls-files 'hack/*.sh')

.PHONY: lint
lint: lint-go lint-shell ## Run the linters: golangci-lint (with kube-api-linter on api/) and shellcheck.

# golangci-lint loads one Go module at a time, so it runs once per module, from the module's
# directory, with the one configuration at the root. Every module is linted before failing;
# hack/lint too, for its rename-import-alias tool. --allow-serial-runners: a run waits for
# another golangci-lint on the machine (another checkout) instead of failing on its lock.
.PHONY: lint-go
lint-go: $(GOLANGCI_LINT) ## golangci-lint every module (.golangci.yml; kube-api-linter on api/).
	@status=0; for m in $(MODULES) hack/lint hack/image; do \
		echo "golangci-lint: module $$m"; \
		(cd $$m && $(GOLANGCI_LINT) run --allow-serial-runners --config $(ROOT)/.golangci.yml $(LINT_FLAGS) ./...) || status=1; \
	done; exit $$status

.PHONY: lint-fix
lint-fix: LINT_FLAGS += --fix
lint-fix: lint-go ## Apply the fixes golangci-lint can make itself (imports, formatting, some API markers).

.PHONY: lint-wrap
lint-wrap: $(GOLANGCI_LINT) ## Wrap long lines with golines (hack/lint/golines.yml), to review by hand; not part of lint.
	@for m in $(MODULES); do (cd $$m && $(GOLANGCI_LINT) fmt --config $(ROOT)/hack/lint/golines.yml ./...); done

.PHONY: lint-shell
lint-shell: shellcheck ## shellcheck the scripts in hack/.
	shellcheck $(SHELL_SCRIPTS)

##@ Test

.PHONY: test
test: build $(KUBE_BINARIES) $(VERSITYGW) ceph jq azurite verify ## Run all tests, against a real kube-apiserver and etcd built from source and real object stores.
	@for m in $(MODULES); do (cd $$m && KUBEBUILDER_ASSETS=$(BIN) go test $(GO_TEST_FLAGS) ./...); done

##@ Release

# The platforms of kubectl-cosi's release archives, as os/arch (hack/krew/cosi.yaml lists the same).
KUBECTL_COSI_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64
# The release's version is the images' VERSION (below): a v* tag on the commit, else the chart's appVersion.
RELEASE_URL ?= https://github.com/kube-cosi/cosi/releases/download/$(VERSION)

.PHONY: kubectl-cosi-release
kubectl-cosi-release: ## Build kubectl-cosi's release archives (a tar.gz per platform, with LICENSE) and their krew manifest into bin/release/.
	@rm -rf $(BIN)/release && mkdir -p $(BIN)/release
	@grep -v '^#' hack/krew/cosi.yaml | sed -e 's|^  version: VERSION$$|  version: $(VERSION)|' -e 's|URL/|$(RELEASE_URL)/|' > $(BIN)/release/cosi.yaml
	@for p in $(KUBECTL_COSI_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; exe=kubectl-cosi; [ $$os = windows ] && exe=kubectl-cosi.exe; \
		dir=$$(mktemp -d); \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -ldflags "-s -w" -o $$dir/$$exe ./cmd/kubectl-cosi; \
		cp LICENSE $$dir/; \
		tar -C $$dir -czf $(BIN)/release/kubectl-cosi_$${os}_$${arch}.tar.gz $$exe LICENSE; \
		rm -rf $$dir; \
		sum=$$(sha256sum $(BIN)/release/kubectl-cosi_$${os}_$${arch}.tar.gz | cut -d' ' -f1); \
		sed -i "s|SHA256_$${os}_$${arch}|$$sum|" $(BIN)/release/cosi.yaml; \
		echo "bin/release/kubectl-cosi_$${os}_$${arch}.tar.gz $$sum"; \
	done

##@ Benchmark

BENCH_FLAGS ?=
.PHONY: bench
bench: build $(KUBE_BINARIES) ## Measure throughput, latency, writes and memory (cosi-bench; about 20 minutes). BENCH_FLAGS=-h lists options.
	$(BIN)/cosi-bench -json $(BIN)/bench.json $(BENCH_FLAGS)

# The reference implementation (kubernetes-sigs/container-object-storage-interface) that
# bench-reference compares with, built outside the repository by hack/reference/build.sh. Set
# REFERENCE_SRC to a git repository that holds the commit where GitHub cannot be reached.
REFERENCE_COMMIT ?= ee00c2690b877f9af3733acb8d03ea2c2a4bd521
REFERENCE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/cosi-reference/$(REFERENCE_COMMIT)

.PHONY: reference
reference: ## Build the reference implementation's controller and sidecar, with a no-op driver, into REFERENCE_DIR (outside the repository).
	REFERENCE_COMMIT=$(REFERENCE_COMMIT) hack/reference/build.sh $(REFERENCE_DIR)

.PHONY: bench-reference
bench-reference: build $(KUBE_BINARIES) ## This project and the reference side by side (cosi-bench -reference; N=500, 3 alternating runs each; about 10 minutes).
	@test -x $(REFERENCE_DIR)/ref-sidecar || { echo "no reference build in $(REFERENCE_DIR): run make reference" >&2; exit 1; }
	$(BIN)/cosi-bench -reference $(REFERENCE_DIR) -json $(BIN)/bench-reference.json $(BENCH_FLAGS)

.PHONY: bench-cache
bench-cache: $(KUBE_BINARIES) ## Measure a cache's Go heap per object set, as controller-runtime keeps objects and as COSI does (about a minute).
	KUBEBUILDER_ASSETS=$(BIN) go test -run '^$$' -bench CacheMemory -benchtime 3x ./internal/cache/slim

.PHONY: bench-requests
bench-requests: $(KUBE_BINARIES) ## Measure the API server's CPU per request of each kind an access makes (about a minute).
	KUBEBUILDER_ASSETS=$(BIN) go test -run '^$$' -bench RequestCost -benchtime 1200x -count 3 ./dev/bench

##@ Fault suite

CHAOS_FLAGS ?= -n 1100 -self-check
.PHONY: chaos
chaos: build $(KUBE_BINARIES) ## Run the fault suite at local size (cosi-chaos, docs/reliability.md; about 15 minutes). CHAOS_FLAGS=-h lists options.
	$(BIN)/cosi-chaos $(CHAOS_FLAGS)

##@ Build dependencies

# Grouped targets: one go build produces all three.
$(CODEGEN_TOOLS) &: hack/tools/go.mod hack/tools/go.sum
	cd hack/tools && go build -o $(BIN)/ sigs.k8s.io/controller-tools/cmd/controller-gen google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc

$(GOLANGCI_LINT): hack/lint/go.mod hack/lint/go.sum
	@echo "building golangci-lint with kube-api-linter from the Go module proxy (about 2 minutes on 2 cores the first time)"
	cd hack/lint && go build -o $(GOLANGCI_LINT) sigs.k8s.io/kube-api-linter/cmd/golangci-lint-kube-api-linter

.PHONY: kube-binaries
kube-binaries: $(KUBE_BINARIES) ## Build kube-apiserver, etcd, kubectl and kube-controller-manager into bin/.

$(KUBE_BINARIES) &: hack/kube/go.mod hack/kube/go.sum hack/kube/etcd/main.go
	@echo "building kube-apiserver, etcd, kubectl and kube-controller-manager from the Go module proxy (about 8 minutes on 2 cores the first time)"
	cd hack/kube && go build -ldflags "$(KUBE_LDFLAGS)" -o $(BIN)/ k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kube-controller-manager ./etcd

.PHONY: versitygw
versitygw: $(VERSITYGW) ## Build the Versity S3 gateway (object store for tests and the local environment) into bin/.

$(VERSITYGW): hack/versitygw/go.mod hack/versitygw/go.sum
	@echo "building the Versity S3 gateway from the Go module proxy (about 1 minute on 2 cores the first time)"
	cd hack/versitygw && go build -o $(BIN)/versitygw github.com/versity/versitygw/cmd/versitygw

.PHONY: ceph
ceph: ## Install Ceph (mon, osd, radosgw) from Debian's packages for the rgw back-end's tests; tests say so and skip if it cannot be.
	@hack/ceph/install.sh || echo "WARNING: Ceph could not be installed: the S3 driver's rgw back-end tests will be skipped" >&2

.PHONY: azurite
azurite: $(AZURITE_STAMP) ## Install Azurite (npm; Node.js from Debian packages if missing) into bin/azurite for the Azure driver; tests say so and skip if it cannot be.

# --ignore-scripts: Azurite's blob service needs none of its dependencies' install scripts.
$(AZURITE_STAMP):
	@if ! command -v npm >/dev/null || ! command -v node >/dev/null; then \
		echo "installing Node.js and npm from Debian packages (nodejs, npm)"; \
		$(SUDO) apt-get install -y --no-install-recommends nodejs npm >/dev/null \
		|| { $(SUDO) apt-get update >/dev/null && $(SUDO) apt-get install -y --no-install-recommends nodejs npm >/dev/null; } \
		|| true; \
	fi
	@echo "installing Azurite $(AZURITE_VERSION) from npm into bin/azurite (about a minute the first time)"
	@mkdir -p $(BIN)/azurite && rm -f $(BIN)/azurite/installed-*
	@npm install --prefix $(BIN)/azurite --ignore-scripts --no-audit --no-fund --loglevel=error \
		azurite@$(AZURITE_VERSION) >/dev/null && touch $@ \
		|| echo "WARNING: Azurite could not be installed: the Azure driver's tests will be skipped" >&2

.PHONY: protoc
protoc: ## Install protoc and the protobuf well-known types from Debian packages if missing.
	@if ! command -v protoc >/dev/null || [ ! -f /usr/include/google/protobuf/descriptor.proto ]; then \
		echo "installing protoc from Debian packages (protobuf-compiler, libprotobuf-dev)"; \
		$(SUDO) apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev >/dev/null \
		|| { $(SUDO) apt-get update >/dev/null && $(SUDO) apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev >/dev/null; }; \
	fi

.PHONY: shellcheck
shellcheck: ## Install shellcheck from Debian packages if missing (it is written in Haskell: no Go module).
	@if ! command -v shellcheck >/dev/null; then \
		echo "installing shellcheck from Debian packages"; \
		$(SUDO) apt-get install -y --no-install-recommends shellcheck >/dev/null \
		|| { $(SUDO) apt-get update >/dev/null && $(SUDO) apt-get install -y --no-install-recommends shellcheck >/dev/null; }; \
	fi

.PHONY: jq
jq: ## Install jq from Debian packages if missing (docs' runnable blocks use it; test/docs/runnable).
	@if ! command -v jq >/dev/null; then \
		echo "installing jq from Debian packages"; \
		$(SUDO) apt-get install -y --no-install-recommends jq >/dev/null \
		|| { $(SUDO) apt-get update >/dev/null && $(SUDO) apt-get install -y --no-install-recommends jq >/dev/null; }; \
	fi

.PHONY: clean
clean: ## Remove built binaries.
	rm -rf $(BIN)

##@ Images and the test node (hack/image, dev/cmd/cosi-cluster, docs/cluster.md)

# The images' tag and the version their commands print with --version: the release tag on HEAD,
# else the charts' appVersion, which the charts and config/ pull (test/install checks that the three
# agree). A per-commit tag: make images VERSION=$$(git describe --tags --always --dirty).
APP_VERSION := $(shell sed -n 's/^appVersion: *//p' $(ROOT)/charts/cosi/Chart.yaml)
VERSION ?= $(shell git describe --tags --exact-match --match 'v*' 2>/dev/null || echo $(APP_VERSION))
REGISTRY ?= ghcr.io/kube-cosi
PLATFORMS ?= linux/amd64,linux/arm64
# The node's own platform: what make cluster and the cluster tier import. They build the images for
# it alone (a second architecture compiles every command again: half an hour cold on 2 cores) unless
# PLATFORMS is given on the command line or in the environment.
NODE_PLATFORM := linux/$(shell go env GOARCH)
ifeq ($(origin PLATFORMS),file)
cluster test-cluster: PLATFORMS = $(NODE_PLATFORM)
endif
IMAGE_TOOL := $(BIN)/image
NODE_BINARIES := $(BIN)/kube-scheduler $(BIN)/kubelet $(BIN)/kube-proxy
# Debian packages of the node's container runtime (containerd, runc) and network (CNI plugins, iptables).
NODE_PACKAGES := containerd runc containernetworking-plugins iptables

.PHONY: print-version
print-version: ## Print the images' default tag (VERSION).
	@echo $(VERSION)

.PHONY: images
images: $(IMAGE_TOOL) ## Build every image (OCI layout in bin/images/oci, bin/images/<name>.tar for ctr import). VERSION=, REGISTRY=, PLATFORMS=.
	@echo "building the images for $(PLATFORMS) (the first build compiles every command per platform: several minutes on 2 cores)"
	$(IMAGE_TOOL) build --repo $(ROOT) --out $(BIN)/images --registry $(REGISTRY) --version $(VERSION) --platforms $(PLATFORMS)

.PHONY: push
push: images ## Push the images to REGISTRY=... (credentials from ~/.docker/config.json).
	$(IMAGE_TOOL) push --out $(BIN)/images --registry $(REGISTRY)

$(IMAGE_TOOL): hack/image/go.mod hack/image/go.sum $(wildcard hack/image/*.go)
	cd hack/image && go build -o $(IMAGE_TOOL) .

.PHONY: test-images
test-images: $(IMAGE_TOOL) ## Build the cluster tier's workload image (cosi-test-app) for this machine's platform into bin/test-images.
	$(IMAGE_TOOL) build --repo $(ROOT) --out $(BIN)/test-images --registry $(REGISTRY) --version $(VERSION) --platforms linux/$$(go env GOARCH) --images cosi-test-app

# The cluster tier (test/cluster) runs the images on a node; it skips, saying why, where the node
# cannot start (not root, no containerd). test-image-tool checks the images themselves.
test: test-image-tool test-cluster

.PHONY: test-cluster
test-cluster: build images test-images $(KUBE_BINARIES) $(NODE_BINARIES) $(BIN)/helm node-runtime ## Run the cluster tier (test/cluster): COSI installed with Helm and kustomize on a real node; skipped, saying why, where the node cannot run.
	COSI_CLUSTER_TIER=1 go test -v -count=1 -timeout 30m ./test/cluster/ 2>&1 | grep -v 'found symbolic link in path'

.PHONY: test-image-tool
test-image-tool: ## Test hack/image: reproducible digests, the images' contents and --version, make push to a registry.
	cd hack/image && go test $(GO_TEST_FLAGS) ./...

.PHONY: node-binaries
node-binaries: $(NODE_BINARIES) ## Build kube-scheduler, kubelet and kube-proxy into bin/.

$(NODE_BINARIES) &: hack/kube/go.mod hack/kube/go.sum
	@echo "building kube-scheduler, kubelet and kube-proxy from the Go module proxy (about 6 minutes on 2 cores the first time)"
	cd hack/kube && go build -ldflags "$(KUBE_LDFLAGS)" -o $(BIN)/ k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy

.PHONY: node-runtime
node-runtime: ## Install containerd, runc and the CNI plugins from Debian packages if missing (the test node's runtime).
	@if ! command -v containerd >/dev/null || ! command -v runc >/dev/null || [ ! -x /usr/lib/cni/bridge ] || ! command -v iptables >/dev/null; then \
		echo "installing the node's runtime from Debian packages ($(NODE_PACKAGES))"; \
		$(SUDO) apt-get install -y --no-install-recommends $(NODE_PACKAGES) >/dev/null \
		|| { $(SUDO) apt-get update >/dev/null && $(SUDO) apt-get install -y --no-install-recommends $(NODE_PACKAGES) >/dev/null; } \
		|| echo "WARNING: the node's runtime could not be installed: the cluster tier (test/cluster) will be skipped" >&2; \
	fi

.PHONY: cluster
cluster: build images test-images $(KUBE_BINARIES) $(NODE_BINARIES) node-runtime ## Run a single-node Kubernetes (etcd, API server, controller-manager, scheduler, kubelet, kube-proxy, containerd, a cluster DNS) with the images and the test workload (cosi-test-app) imported; Ctrl-C stops it and restores the host. Data: .cluster/
	go build -o $(BIN)/cosi-cluster ./dev/cmd/cosi-cluster
	$(SUDO) $(BIN)/cosi-cluster --dir $(ROOT)/.cluster --bin $(BIN) --images $(BIN)/images,$(BIN)/test-images $(CLUSTER_FLAGS)

.PHONY: cluster-cleanup
cluster-cleanup: ## Restore the host after a make cluster whose process was killed (cosi-cluster --cleanup); builds nothing else.
	go build -o $(BIN)/cosi-cluster ./dev/cmd/cosi-cluster
	$(SUDO) $(BIN)/cosi-cluster --cleanup

##@ Manifests and charts (config/default, config/driver, charts/; docs/install.md)

HELM := $(BIN)/helm

.PHONY: helm
helm: $(HELM) ## Build helm (pinned in hack/helm) into bin/.

$(HELM): hack/helm/go.mod hack/helm/go.sum
	@echo "building helm from the Go module proxy (a few minutes on 2 cores the first time)"
	cd hack/helm && go build -o $(BIN)/helm helm.sh/helm/v4/cmd/helm

.PHONY: lint-charts
lint-charts: $(HELM) ## Lint the Helm charts (templates, values.schema.json) with helm lint --strict.
	$(HELM) lint --strict charts/cosi charts/cosi-driver charts/versitygw

.PHONY: verify-mod-helm
verify-mod-helm: ## Fail if hack/helm's go.mod or go.sum is not tidy.
	@cd hack/helm && go mod tidy -diff || { echo "go.mod of hack/helm is not tidy (run go mod tidy there)" >&2; exit 1; }

# test/install renders the charts with bin/helm and compares them with the kustomizations.
verify: lint-charts verify-mod-helm
test: $(HELM)
