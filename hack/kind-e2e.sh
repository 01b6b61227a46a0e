#!/usr/bin/env bash
# hack/kind-e2e.sh — tailcut end to end in a kind cluster, the way users meet it:
# helm install, a HedgePolicy, Prometheus, Grafana dashboards and a k6 A/B run.
#
#   hack/kind-e2e.sh          create the cluster (or reuse it), build and load
#                             the images, install kube-prometheus-stack and
#                             tailcut with the demo, then run test/e2e (build
#                             tag e2e): wait for the HedgePolicy to be Ready
#                             with a delay from Prometheus, run the k6 A/B Job
#                             (helm test), print the A/B table, and fail when
#                             the hedged p99 is not <= 0.5 x the bypass p99 or
#                             on errors or dropped iterations.
#   hack/kind-e2e.sh clean    delete the cluster.
#
# Needs Docker (or CONTAINER_TOOL=podman), Go, and the internet: it pulls the
# golang, distroless, Envoy, k6, kind node and kube-prometheus-stack images and
# charts. kind is built from its Go module at a pinned version; helm and kubectl
# come from hack/tools.sh. The cluster is kept after the run (for Grafana); make
# kind-clean deletes it.
#
# Environment: KIND_CLUSTER (tailcut-e2e), IMG (tailcut:e2e), WORKLOAD_IMG
# (tailcut-workload:e2e), CONTAINER_TOOL (docker), KIND_NODE_IMAGE (kind's
# default), E2E_ARTIFACTS (_output/kind-e2e), SKIP_BUILD=1 to reuse images.
set -euo pipefail
cd "$(dirname "$0")/.."

# Pins.
KIND_VERSION=v0.33.0                 # sigs.k8s.io/kind; its default node image is Kubernetes v1.37
KPS_CHART_VERSION=83.4.3             # kube-prometheus-stack (Prometheus Operator, Prometheus, Grafana)
KPS_REPO=https://prometheus-community.github.io/helm-charts

KIND_CLUSTER=${KIND_CLUSTER:-tailcut-e2e}
IMG=${IMG:-tailcut:e2e}
WORKLOAD_IMG=${WORKLOAD_IMG:-tailcut-workload:e2e}
CONTAINER_TOOL=${CONTAINER_TOOL:-docker}
NAMESPACE=tailcut
RELEASE=tailcut
MONITORING_NS=monitoring
ARTIFACTS=${E2E_ARTIFACTS:-$PWD/_output/kind-e2e}
CACHE=${TAILCUT_CACHE:-$HOME/.cache/tailcut}
KUBECONFIG_FILE=$CACHE/kind-$KIND_CLUSTER.kubeconfig

log() { printf '\n[kind-e2e] %s\n' "$*" >&2; }
die() {
	printf '[kind-e2e] ERROR: %s\n' "$*" >&2
	exit 1
}

# kind, built once into the tool cache like hack/tools.sh does.
ensure_kind() {
	local bin=$CACHE/bin/kind-$KIND_VERSION
	if [[ ! -x $bin ]]; then
		command -v go >/dev/null || die "go is needed to build kind $KIND_VERSION"
		log "building kind $KIND_VERSION (go install sigs.k8s.io/kind@$KIND_VERSION)"
		local tmp
		tmp=$(mktemp -d)
		(cd "$tmp" && GOTOOLCHAIN=local GOFLAGS='' CGO_ENABLED=0 GOBIN="$tmp/bin" go install "sigs.k8s.io/kind@$KIND_VERSION") ||
			die "cannot build kind $KIND_VERSION"
		mkdir -p "$CACHE/bin"
		mv -f "$tmp/bin/kind" "$bin"
		rm -rf "$tmp"
	fi
	"$bin" version >&2
	KIND=$bin
}

# split_image IMAGE: sets REPO and TAG; the tag is required, since an image
# without one means :latest, which Kubernetes always pulls.
split_image() {
	local img=$1
	[[ $img =~ ^(.+):([A-Za-z0-9_][A-Za-z0-9_.-]*)$ ]] || die "image '$img' needs an explicit tag (repository:tag)"
	REPO=${BASH_REMATCH[1]} TAG=${BASH_REMATCH[2]}
	[[ $TAG != latest ]] || die "image '$img': use a tag other than latest (Kubernetes would try to pull it)"
}

clean() {
	ensure_kind
	"$KIND" delete cluster --name "$KIND_CLUSTER"
	rm -f "$KUBECONFIG_FILE"
}

create_cluster() {
	if "$KIND" get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
		log "reusing the kind cluster $KIND_CLUSTER"
		"$KIND" export kubeconfig --name "$KIND_CLUSTER" --kubeconfig "$KUBECONFIG_FILE"
		return
	fi
	log "creating the kind cluster $KIND_CLUSTER"
	local -a image=()
	[[ -n ${KIND_NODE_IMAGE:-} ]] && image=(--image "$KIND_NODE_IMAGE")
	"$KIND" create cluster --name "$KIND_CLUSTER" --config hack/kind-config.yaml \
		--kubeconfig "$KUBECONFIG_FILE" --wait 5m "${image[@]}"
}

build_and_load() {
	if [[ ${SKIP_BUILD:-} != 1 ]]; then
		log "building $IMG and $WORKLOAD_IMG"
		"$CONTAINER_TOOL" build --target operator -t "$IMG" .
		"$CONTAINER_TOOL" build --target workload -t "$WORKLOAD_IMG" .
	fi
	log "loading the images into $KIND_CLUSTER"
	"$KIND" load docker-image --name "$KIND_CLUSTER" "$IMG" "$WORKLOAD_IMG"
}

install_monitoring() {
	log "installing kube-prometheus-stack $KPS_CHART_VERSION into $MONITORING_NS"
	# Prometheus selects every ServiceMonitor and PrometheusRule (not only the
	# release's), scrapes every 5s, and Grafana's sidecar loads dashboards from
	# every namespace.
	"$HELM" upgrade --install kps kube-prometheus-stack --repo "$KPS_REPO" --version "$KPS_CHART_VERSION" \
		--namespace "$MONITORING_NS" --create-namespace --wait --timeout 10m \
		--set fullnameOverride=kps \
		--set alertmanager.enabled=false \
		--set nodeExporter.enabled=false \
		--set prometheus.prometheusSpec.scrapeInterval=5s \
		--set prometheus.prometheusSpec.evaluationInterval=5s \
		--set prometheus.prometheusSpec.serviceMonitorSelectorNilUsesHelmValues=false \
		--set prometheus.prometheusSpec.podMonitorSelectorNilUsesHelmValues=false \
		--set prometheus.prometheusSpec.ruleSelectorNilUsesHelmValues=false \
		--set grafana.sidecar.dashboards.enabled=true \
		--set grafana.sidecar.dashboards.searchNamespace=ALL
}

install_tailcut() {
	log "installing tailcut ($IMG) with the demo into $NAMESPACE"
	local repo tag wrepo wtag
	split_image "$IMG"
	repo=$REPO tag=$TAG
	split_image "$WORKLOAD_IMG"
	wrepo=$REPO wtag=$TAG
	# The namespace enforces Pod Security "restricted": every tailcut pod must
	# pass it in a real cluster too.
	"$KUBECTL" create namespace "$NAMESPACE" --dry-run=client -o yaml | "$KUBECTL" apply -f -
	"$KUBECTL" label namespace "$NAMESPACE" --overwrite \
		pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/enforce-version=latest
	"$HELM" upgrade --install "$RELEASE" charts/tailcut --namespace "$NAMESPACE" --wait --timeout 5m \
		--set image.repository="$repo" --set image.tag="$tag" --set image.pullPolicy=IfNotPresent \
		--set demo.enabled=true \
		--set demo.workload.image.repository="$wrepo" --set demo.workload.image.tag="$wtag" \
		--set demo.workload.image.pullPolicy=IfNotPresent \
		--set demo.warmup.duration=10m \
		--set operator.prometheusURL="http://prometheus-operated.$MONITORING_NS.svc:9090" \
		--set monitoring.interval=5s
}

diagnose() {
	log "diagnostics (also in $ARTIFACTS)"
	mkdir -p "$ARTIFACTS"
	{
		"$KUBECTL" get pods,svc,hedgepolicies,jobs -n "$NAMESPACE" -o wide || true
		"$KUBECTL" get hedgepolicies -n "$NAMESPACE" -o yaml || true
		"$KUBECTL" logs -n "$NAMESPACE" "deploy/$RELEASE" --tail=200 || true
		"$KUBECTL" logs -n "$NAMESPACE" "deploy/$RELEASE-proxy" --tail=100 || true
	} >"$ARTIFACTS/diagnostics.txt" 2>&1
	tail -n 60 "$ARTIFACTS/diagnostics.txt" >&2
}

main() {
	case ${1:-run} in
	clean)
		clean
		return
		;;
	run) ;;
	*) die "usage: $0 [run|clean]" ;;
	esac
	command -v "$CONTAINER_TOOL" >/dev/null || die "$CONTAINER_TOOL is not installed; the kind e2e needs a container engine"
	HELM=$(hack/tools.sh helm)
	KUBECTL=$(hack/tools.sh kubectl)
	ensure_kind
	mkdir -p "$CACHE" "$ARTIFACTS"
	create_cluster
	export KUBECONFIG=$KUBECONFIG_FILE
	build_and_load
	install_monitoring
	install_tailcut

	log "running test/e2e (waits for the policy, runs the k6 A/B Job, checks the dashboards' queries)"
	if ! E2E_NAMESPACE=$NAMESPACE E2E_RELEASE=$RELEASE E2E_MONITORING_NAMESPACE=$MONITORING_NS \
		E2E_ARTIFACTS=$ARTIFACTS HELM_BIN=$HELM GOTOOLCHAIN=local \
		go test -tags e2e ./test/e2e/ -count=1 -timeout 30m -v; then
		diagnose
		die "the e2e failed; the cluster is kept (KUBECONFIG=$KUBECONFIG_FILE); make kind-clean deletes it"
	fi
	log "PASS. Report: $ARTIFACTS/report.html. Grafana: KUBECONFIG=$KUBECONFIG_FILE kubectl -n $MONITORING_NS port-forward svc/kps-grafana 3000:80 (admin / prom-operator). make kind-clean deletes the cluster."
}

main "$@"
