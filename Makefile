# tailcut: hedged requests for Kubernetes services, tuned from live latency.
#
# Tools are pinned in hack/tools.sh and installed into a cache outside the
# repository (${TAILCUT_CACHE:-~/.cache/tailcut}); nothing here relies on tools
# installed by hand.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

IMG ?= tailcut:dev
TOOLS := hack/tools.sh
GO ?= go
export GOTOOLCHAIN := local

CONTROLLER_GEN = $(shell $(TOOLS) controller-gen)

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: ## Generate the CRD and RBAC manifests (controller-gen) and copy them into the chart.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd:allowDangerousTypes=true paths="./..." output:crd:artifacts:config=config/crd/bases
	@$(MAKE) -s chart-crds

.PHONY: api-docs
api-docs: ## Write the API reference, docs/api.md, from the Go types in api/ (crd-ref-docs).
	$$($(TOOLS) crd-ref-docs) --source-path=./api --config=hack/crd-ref-docs.yaml --renderer=markdown \
		--log-level=ERROR --output-path=docs/api.md

.PHONY: generate
generate: ## Generate deepcopy code (controller-gen).
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./..."

.PHONY: fmt
fmt: ## Run gofmt on the code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	$(GO) vet ./...

.PHONY: lint
lint: vet ## Run go vet, the gofmt check and golangci-lint (pinned; fails when it cannot be installed).
	@bad=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$bad" ]; then echo "gofmt would change: $$bad"; exit 1; fi
	@lint=$$($(TOOLS) golangci-lint) || { echo "make lint: golangci-lint could not be installed (hack/tools.sh golangci-lint printed why above)"; exit 1; }; \
	$$lint run ./...

.PHONY: verify
verify: ## Fail when generated files (CRD, RBAC, deepcopy) or go.mod are stale.
	hack/verify.sh

.PHONY: licenses
licenses: ## List the licences of the linked Go modules and the pinned tools; fail on AGPL or an unknown licence.
	hack/licenses.sh

##@ Test

# Every test and the demo run the real binaries: kube-apiserver and etcd
# (KUBEBUILDER_ASSETS), Envoy, Prometheus, helm, kustomize, promtool, istiod and
# envoy-gateway, all pinned in hack/tools.sh and installed before any test starts.
# Plain assignments, so that a tool that fails to install stops make (errexit).
TOOL_ENV = assets=$$($(TOOLS) env); eval "$$assets"; \
	ENVOY_BIN=$$($(TOOLS) envoy); PROMETHEUS_BIN=$$($(TOOLS) prometheus); \
	HELM_BIN=$$($(TOOLS) helm); KUSTOMIZE_BIN=$$($(TOOLS) kustomize); PROMTOOL_BIN=$$($(TOOLS) promtool); \
	ISTIOD_BIN=$$($(TOOLS) istiod); ENVOY_GATEWAY_BIN=$$($(TOOLS) envoy-gateway); \
	export ENVOY_BIN PROMETHEUS_BIN HELM_BIN KUSTOMIZE_BIN PROMTOOL_BIN ISTIOD_BIN ENVOY_GATEWAY_BIN

.PHONY: test
test: test-unit test-e2e ## Run every test: unit, real API server, real Envoy and Prometheus, and the local-stack e2e.

.PHONY: test-unit
test-unit: ## Unit tests (Go, and the hedge account's Rust) plus the CEL, reconciler, xDS-with-Envoy, istiod, Envoy Gateway and estimator-with-Prometheus tests.
	hack/hedge-account.sh test
	@$(TOOL_ENV); $(GO) test ./... -count=1 -timeout 25m

.PHONY: test-e2e
test-e2e: ## The local stack end to end: ordinary traffic with a latency shift, the A/B (tailcut verify) through Envoy, saturation, a low rate, one slow replica.
	@$(TOOL_ENV); $(GO) test -tags localstack ./test/localstack/ -run 'TestOrdinaryTraffic|TestHedgingShortensTheTail|TestSaturationBacksOff|TestLowRateSaysWhatToChange|TestOneSlowReplicaIsWeightedDown' -count=1 -timeout 30m -v

.PHONY: test-chaos
test-chaos: ## Faults on the local stack, two at a time (about 10 minutes): operator killed and restarted, leader failover, Prometheus down 5 minutes, brownout.
	@$(TOOL_ENV); $(GO) test -tags 'localstack chaos' ./test/localstack/ -run 'TestChaos' -count=1 -parallel 2 -timeout 50m -v

SOAK_DURATION ?= 30m

.PHONY: soak
soak: ## SOAK_DURATION (30m) at 200 rps with the delay adapting: no errors, flat memory and goroutines; curves in _output/soak.
	@$(TOOL_ENV); SOAK_DURATION=$(SOAK_DURATION) SOAK_OUT=$(CURDIR)/_output/soak $(GO) test -tags 'localstack chaos' ./test/localstack/ -run '^TestSoak$$' -count=1 -timeout 90m -v

FUZZTIME ?= 60s

.PHONY: fuzz
fuzz: ## Search with the fuzz targets, FUZZTIME each (go test runs their seeds in test-unit); failures land in testdata/fuzz.
	@$(TOOL_ENV); set -e; \
	$(GO) test ./controllers/estimate/ -run '^$$' -fuzz '^FuzzEstimateStaysInBounds$$' -fuzztime $(FUZZTIME); \
	$(GO) test ./controllers/envoyconf/ -run '^$$' -fuzz '^FuzzPlanToEnvoy$$' -fuzztime $(FUZZTIME)

##@ Demo

DURATION ?= 60s
SCENARIO ?= bimodal4
RATE ?= 150
SCALE_POLICIES ?= 1000
SCALE_NAMESPACES ?= 100
LOADGEN_RATES ?= 150,1000,5000
PROXY_RATES ?= 500,2000,5000

.PHONY: demo
demo: ## Run the local stack and print the hedged vs bypass tail (DURATION=60s SCENARIO=bimodal4 RATE=150).
	@$(TOOL_ENV); $(GO) run ./test/localstack/demo -duration=$(DURATION) -scenario=$(SCENARIO) -rate=$(RATE)

.PHONY: install-tools
install-tools: ## Install every pinned tool into the cache.
	$(TOOLS) all

.PHONY: tool-versions
tool-versions: ## Print the pinned tool versions.
	$(TOOLS) versions

.PHONY: bench-tail
bench-tail: ## Benchmark: every scenario with the automatic delay and a static-delay sweep; writes docs/benchmarks.md.
	@$(TOOL_ENV); $(GO) run ./test/localstack/bench -rate=$(RATE)

.PHONY: bench-loadgen
bench-loadgen: ## Benchmark: tailcut verify's generator against a no-op server at 150, 1,000 and 5,000/s (rate, send lag, CPU); writes its section of docs/benchmarks.md.
	$(GO) run ./test/localstack/loadgenbench -rates=$(LOADGEN_RATES)

.PHONY: bench-proxy
bench-proxy: ## Benchmark: Envoy's CPU and added latency with and without the hedge account, at 500, 2,000 and 5,000/s on 1 and 2 workers; writes its section of docs/benchmarks.md.
	@$(TOOL_ENV); $(GO) run ./test/localstack/proxybench -rates=$(PROXY_RATES)

.PHONY: bench-affinity
bench-affinity: ## Benchmark: affinity for caches: hit ratio and tail without hedging, without affinity, hedging to any replica and to the key's next owner; keys moved by replica changes; writes its section of docs/benchmarks.md.
	@$(TOOL_ENV); $(GO) run ./test/localstack/affinitybench

.PHONY: bench-fanout
bench-fanout: ## Benchmark: delay.mode FanOut (one and two copies at once) against one hedge at the auto delay on bimodal3: tail, extra load, POSTs; writes its section of docs/benchmarks.md.
	@$(TOOL_ENV); $(GO) run ./test/localstack/fanoutbench

.PHONY: bench-scale
bench-scale: ## Benchmark: 1,000 policies on the real API server, operator and Envoy; writes its section of docs/benchmarks.md.
	@$(TOOL_ENV); $(GO) run ./test/localstack/scalebench -policies=$(SCALE_POLICIES) -namespaces=$(SCALE_NAMESPACES)

##@ Build

.PHONY: build
build: hedge-account ## Build the operator binary and the hedge account module into bin/.
	$(GO) build -o bin/tailcut .

.PHONY: hedge-account
hedge-account: ## Build the hedge account's Proxy-Wasm module (Rust, pinned in hack/tools.sh) into bin/hedge-account.wasm.
	mkdir -p bin && hack/hedge-account.sh build bin/hedge-account.wasm

.PHONY: run
run: ## Run the operator against the cluster in your kubeconfig.
	$(GO) run . --metrics-bind-address=:8080 --health-probe-bind-address=:8081

##@ Deployment

.PHONY: install
install: manifests ## Install the CRD into the cluster in your kubeconfig.
	$$($(TOOLS) kubectl) apply --server-side -f config/crd/bases

.PHONY: uninstall
uninstall: ## Remove the CRD (and every HedgePolicy) from the cluster.
	$$($(TOOLS) kubectl) delete --ignore-not-found -f config/crd/bases

##@ Packaging

# Images: the operator (Dockerfile target "operator", the default) and the
# variability workload (target "workload") used by the chart's demo.
WORKLOAD_IMG ?= tailcut-workload:dev
CONTAINER_TOOL ?= docker
KIND_CLUSTER ?= tailcut-e2e

.PHONY: docker-build
docker-build: ## Build the operator (IMG) and workload (WORKLOAD_IMG) images.
	$(CONTAINER_TOOL) build --target operator -t $(IMG) .
	$(CONTAINER_TOOL) build --target workload -t $(WORKLOAD_IMG) .

.PHONY: docker-push
docker-push: ## Push IMG and WORKLOAD_IMG.
	$(CONTAINER_TOOL) push $(IMG)
	$(CONTAINER_TOOL) push $(WORKLOAD_IMG)

.PHONY: deploy
deploy: ## Deploy the CRD, RBAC and the operator (config/default, image IMG) to the cluster in your kubeconfig.
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; cp -R config "$$tmp/"; \
	kustomize=$$($(TOOLS) kustomize); \
	(cd "$$tmp/config/manager" && $$kustomize edit set image controller=$(IMG)); \
	$$kustomize build "$$tmp/config/default" | $$($(TOOLS) kubectl) apply --server-side -f -

.PHONY: undeploy
undeploy: ## Remove what make deploy created (and the CRD, with every HedgePolicy).
	$$($(TOOLS) kustomize) build config/default | $$($(TOOLS) kubectl) delete --ignore-not-found -f -

.PHONY: chart-crds
chart-crds: ## Copy the generated CRDs and RBAC rules into charts/tailcut (test/chart fails on drift).
	rm -f charts/tailcut/crds/*.yaml
	cp config/crd/bases/*.yaml charts/tailcut/crds/
	cp config/rbac/role.yaml charts/tailcut/files/manager-role.yaml

.PHONY: helm-lint
helm-lint: ## helm lint the chart with its default values and with the demo on.
	helm=$$($(TOOLS) helm); $$helm lint --strict charts/tailcut; \
	$$helm lint --strict charts/tailcut --set demo.enabled=true

.PHONY: docker-base-images
docker-base-images: ## Offline only: build local stand-ins for the Dockerfile's base images (golang, rust, distroless) when no registry is reachable.
	hack/kind-offline/docker-engine.sh
	hack/kind-offline/app-images.sh bases

.PHONY: kind-images
kind-images: ## Get every kind e2e image ready: pulled online, built from Debian/Go/PyPI offline (KIND_E2E_IMAGES=auto|online|offline).
	KIND_CLUSTER=$(KIND_CLUSTER) IMG=$(IMG) WORKLOAD_IMG=$(WORKLOAD_IMG) hack/kind-e2e.sh images

.PHONY: kind-e2e
kind-e2e: ## Real kind cluster: images (online or offline), prometheus-operator, helm install with the demo, helm test (tailcut verify), targets, dashboards.
	KIND_CLUSTER=$(KIND_CLUSTER) IMG=$(IMG) WORKLOAD_IMG=$(WORKLOAD_IMG) hack/kind-e2e.sh

.PHONY: kind-clean
kind-clean: ## Delete the kind e2e cluster.
	KIND_CLUSTER=$(KIND_CLUSTER) hack/kind-e2e.sh clean
