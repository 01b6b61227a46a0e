#!/usr/bin/env bash
# hack/kind-e2e.sh — tailcut end to end in a real kind cluster, the way users
# meet it: helm install, a HedgePolicy, Prometheus through prometheus-operator,
# and the Helm test (tailcut verify) that must show a shorter tail.
#
#   hack/kind-e2e.sh [run]    images, cluster, monitoring, tailcut, test/e2e
#   hack/kind-e2e.sh images   only get the images ready (pull or build)
#   hack/kind-e2e.sh clean    delete the cluster
#
# Images come from one of two places; everything else is one code path:
#   online   docker pull of the public images (kindest/node, prometheus-operator,
#            Prometheus, Envoy) and `docker build` of tailcut's Dockerfile;
#   offline  hack/kind-offline/ builds the same image names from Debian
#            packages, the Go module proxy and PyPI: the kind node (Kubernetes
#            v1.36.3 with its component images), the Dockerfile's base images
#            (stand-ins, for offline builds only), Envoy, Prometheus,
#            and prometheus-operator. Cached by version + script hash.
# KIND_E2E_IMAGES=auto (default) picks online when a public registry answers a
# pull within 20 s, else offline.
#
# Then: create the cluster (hack/kind-config.yaml; a static ptp CNI config
# instead of kindnetd in both modes), kind load every image, install
# prometheus-operator (bundle.yaml of the pinned Go module) and a Prometheus
# (test/e2e/manifests/prometheus.yaml) that selects every ServiceMonitor, helm
# install the chart with the demo, and run test/e2e (build tag e2e): wait for
# the workload, the proxy and the HedgePolicy (Ready, delay from Prometheus,
# Programmed with Envoy's ACK), run the Helm test (tailcut verify), print the A/B
# table, fail when hedged p99 > 0.5 x bypass p99 or on errors or dropped
# iterations, and check that every ServiceMonitor's targets are up and every
# dashboard query returns data. The cluster is kept for a look afterwards;
# `make kind-clean` deletes it (KIND_E2E_CLEAN=1 deletes it at the end).
#
# Needs Docker (started by hack/kind-offline/docker-engine.sh when root on
# Debian), Go, and, offline, root for debootstrap. On hosts without
# CAP_SYS_RESOURCE or with cgroup v1 the scripts say what they work around.
#
# Environment: KIND_CLUSTER (tailcut-e2e), IMG (tailcut:e2e), WORKLOAD_IMG
# (tailcut-workload:e2e), KIND_E2E_IMAGES (auto|online|offline),
# KIND_NODE_IMAGE (override the node image), E2E_ARTIFACTS (_output/kind-e2e),
# KIND_E2E_CLEAN=1.
set -euo pipefail
KO_NAME=kind-e2e
# shellcheck source=hack/kind-offline/lib.sh
. "$(dirname "$0")/kind-offline/lib.sh"
cd "$REPO_ROOT"

KIND_CLUSTER=${KIND_CLUSTER:-tailcut-e2e}
IMG=${IMG:-tailcut:e2e}
WORKLOAD_IMG=${WORKLOAD_IMG:-tailcut-workload:e2e}
NAMESPACE=tailcut
RELEASE=tailcut
MONITORING_NS=monitoring
ARTIFACTS=${E2E_ARTIFACTS:-$REPO_ROOT/_output/kind-e2e}
KUBECONFIG_FILE=$CACHE/kind-$KIND_CLUSTER.kubeconfig
NODE=$KIND_CLUSTER-control-plane

# The images the cluster runs besides the node's own, by the names the
# manifests use in both modes.
app_images() {
	echo "$IMG" "$WORKLOAD_IMG" "$ENVOY_IMAGE" "$PROMETHEUS_IMAGE" \
		"$PROMETHEUS_OPERATOR_IMAGE" "$PROMETHEUS_CONFIG_RELOADER_IMAGE"
}

ensure_kind() {
	local bin=$CACHE/bin/kind-$KIND_VERSION tmp
	if [[ ! -x $bin ]]; then
		ko_log "building kind $KIND_VERSION from its Go module"
		tmp=$(mktemp -d)
		(cd "$tmp" && GOTOOLCHAIN=local GOFLAGS='' CGO_ENABLED=0 GOBIN="$tmp/bin" go install "sigs.k8s.io/kind@$KIND_VERSION") ||
			ko_die "cannot build kind $KIND_VERSION"
		mkdir -p "$CACHE/bin"
		mv -f "$tmp/bin/kind" "$bin"
		rm -rf "$tmp"
	fi
	KIND=$bin
}

# split_image IMAGE: sets REPO and TAG; the tag is required, since an image
# without one means :latest, which Kubernetes always pulls.
split_image() {
	[[ $1 =~ ^(.+):([A-Za-z0-9_][A-Za-z0-9_.-]*)$ ]] || ko_die "image '$1' needs an explicit tag (repository:tag)"
	REPO=${BASH_REMATCH[1]} TAG=${BASH_REMATCH[2]}
	[[ $TAG != latest ]] || ko_die "image '$1': use a tag other than latest (Kubernetes would try to pull it)"
}

pick_mode() {
	MODE=${KIND_E2E_IMAGES:-auto}
	case $MODE in
	online | offline) ;;
	auto)
		if timeout 20 docker pull -q "registry.k8s.io/pause:3.10" >/dev/null 2>&1; then
			MODE=online
		else
			MODE=offline
		fi
		ko_log "KIND_E2E_IMAGES=auto: a public registry $([[ $MODE == online ]] && echo answered || echo "did not answer a pull within 20s"); images come $MODE"
		;;
	*) ko_die "KIND_E2E_IMAGES must be auto, online or offline, not '$MODE'" ;;
	esac
}

# images: every image in Docker, from where the mode says.
images() {
	local t0
	t0=$(ko_now)
	if [[ $MODE == online ]]; then
		NODE_IMAGE=${KIND_NODE_IMAGE:-$KIND_NODE_IMAGE_ONLINE}
		local img
		for img in "$NODE_IMAGE" "$ENVOY_IMAGE" "$PROMETHEUS_IMAGE" \
			"$PROMETHEUS_OPERATOR_IMAGE" "$PROMETHEUS_CONFIG_RELOADER_IMAGE"; do
			docker image inspect "$img" >/dev/null 2>&1 || docker pull -q "$img" >&2 || ko_die "cannot pull $img"
		done
		ko_log "building $IMG and $WORKLOAD_IMG"
		docker build -q --target operator -t "$IMG" . >&2
		docker build -q --target workload -t "$WORKLOAD_IMG" . >&2
	else
		NODE_IMAGE=${KIND_NODE_IMAGE:-}
		[[ -n $NODE_IMAGE ]] || NODE_IMAGE=$(hack/kind-offline/node-image.sh | tail -n1)
		IMG=$IMG WORKLOAD_IMG=$WORKLOAD_IMG hack/kind-offline/app-images.sh all >/dev/null
	fi
	local img
	for img in $NODE_IMAGE $(app_images); do
		docker image inspect "$img" >/dev/null 2>&1 || ko_die "image $img is missing after the $MODE image step"
	done
	ko_took "images ($MODE)" "$t0"
}

clean() {
	ensure_kind
	"$KIND" delete cluster --name "$KIND_CLUSTER"
	rm -f "$KUBECONFIG_FILE"
}

# wait_for_api waits until the API server serves the node object: a cluster
# reused after a Docker restart answers "forbidden" for a while, until its
# RBAC bootstrap has run again, and kubectl wait does not retry that.
wait_for_api() {
	local deadline=$((SECONDS + 180)) out
	until out=$("$KUBECTL" get "node/$NODE" -o name 2>&1); do
		((SECONDS < deadline)) || ko_die "the API server of $KIND_CLUSTER did not serve node/$NODE within 3 minutes: $out"
		sleep 2
	done
}

create_cluster() {
	local t0
	t0=$(ko_now)
	if "$KIND" get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
		ko_log "reusing the kind cluster $KIND_CLUSTER"
		"$KIND" export kubeconfig --name "$KIND_CLUSTER" --kubeconfig "$KUBECONFIG_FILE"
	else
		ko_log "creating the kind cluster $KIND_CLUSTER from $NODE_IMAGE"
		"$KIND" create cluster --name "$KIND_CLUSTER" --config hack/kind-config.yaml \
			--image "$NODE_IMAGE" --kubeconfig "$KUBECONFIG_FILE"
	fi
	# The pod network: one node, so a ptp CNI config with host-local
	# addresses from the node's pod CIDR is all it takes (kindnetd is
	# disabled in hack/kind-config.yaml).
	docker exec -i "$NODE" sh -c 'mkdir -p /etc/cni/net.d && cat > /etc/cni/net.d/10-tailcut-ptp.conflist' <hack/kind-offline/node/cni.conflist
	wait_for_api
	"$KUBECTL" wait --for=condition=Ready "node/$NODE" --timeout=3m >&2
	"$KUBECTL" -n kube-system rollout status deploy/coredns --timeout=3m >&2
	ko_took "cluster" "$t0"

	ko_log "loading the images into $KIND_CLUSTER"
	t0=$(ko_now)
	# shellcheck disable=SC2046
	"$KIND" load docker-image --name "$KIND_CLUSTER" $(app_images) >&2
	ko_took "kind load" "$t0"
}

install_monitoring() {
	local t0 dir
	t0=$(ko_now)
	dir=$(cd "$REPO_ROOT" && GOFLAGS=-mod=mod go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	[[ -f $dir/bundle.yaml ]] || ko_die "no bundle.yaml in prometheus-operator $PROMETHEUS_OPERATOR_VERSION ($dir)"
	ko_log "installing prometheus-operator $PROMETHEUS_OPERATOR_VERSION (its bundle.yaml) and a Prometheus in $MONITORING_NS"
	grep -q "image: $PROMETHEUS_OPERATOR_IMAGE\$" "$dir/bundle.yaml" ||
		ko_die "bundle.yaml does not use $PROMETHEUS_OPERATOR_IMAGE; update versions.sh"
	"$KUBECTL" apply --server-side --force-conflicts -f "$dir/bundle.yaml" >/dev/null
	"$KUBECTL" wait --for=condition=Established crd --all --timeout=2m >/dev/null
	"$KUBECTL" -n default rollout status deploy/prometheus-operator --timeout=3m >&2
	sed -e "s|@PROMETHEUS_IMAGE@|$PROMETHEUS_IMAGE|g" -e "s|@PROMETHEUS_VERSION@|$PROMETHEUS_VERSION|g" \
		-e "s|@NAMESPACE@|$MONITORING_NS|g" test/e2e/manifests/prometheus.yaml | "$KUBECTL" apply -f - >&2
	local i
	for ((i = 0; i < 60; i++)); do
		"$KUBECTL" -n "$MONITORING_NS" get statefulset prometheus-e2e >/dev/null 2>&1 && break
		sleep 2
	done
	"$KUBECTL" -n "$MONITORING_NS" rollout status statefulset/prometheus-e2e --timeout=4m >&2
	ko_took "monitoring" "$t0"
}

install_tailcut() {
	local t0 repo tag wrepo wtag erepo etag
	t0=$(ko_now)
	split_image "$IMG" && repo=$REPO tag=$TAG
	split_image "$WORKLOAD_IMG" && wrepo=$REPO wtag=$TAG
	split_image "$ENVOY_IMAGE" && erepo=$REPO etag=$TAG
	ko_log "installing tailcut ($IMG) with the demo into $NAMESPACE"
	# The namespace enforces Pod Security "restricted": every tailcut pod must
	# pass it in a real cluster too.
	"$KUBECTL" create namespace "$NAMESPACE" --dry-run=client -o yaml | "$KUBECTL" apply -f - >&2
	"$KUBECTL" label namespace "$NAMESPACE" --overwrite \
		pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/enforce-version=latest >&2
	# The warm-up runs at the A/B's rate, so the delay the test waits for is
	# settled under the load the A/B measures it at.
	"$HELM" upgrade --install "$RELEASE" charts/tailcut --namespace "$NAMESPACE" --wait --timeout 5m \
		--set image.repository="$repo" --set image.tag="$tag" --set image.pullPolicy=IfNotPresent \
		--set proxy.image.repository="$erepo" --set proxy.image.tag="$etag" \
		--set demo.enabled=true \
		--set demo.workload.image.repository="$wrepo" --set demo.workload.image.tag="$wtag" \
		--set verify.postRate=10 \
		--set demo.warmup.duration=15m --set demo.warmup.rate=150 \
		--set operator.prometheusURL="http://prometheus-operated.$MONITORING_NS.svc:9090" \
		--set monitoring.interval=5s >&2
	ko_took "helm install" "$t0"
}

diagnose() {
	ko_log "diagnostics (also in $ARTIFACTS/diagnostics.txt)"
	mkdir -p "$ARTIFACTS"
	{
		"$KUBECTL" get pods -A -o wide || true
		"$KUBECTL" logs -n "$NAMESPACE" "deploy/$RELEASE-proxy" --tail=50 || true
		"$KUBECTL" logs -n "$NAMESPACE" "deploy/$RELEASE" --tail=100 || true
		"$KUBECTL" get events -A --sort-by=.lastTimestamp | tail -40 || true
		# What the demo's traffic got (verify logs its answers every 30s).
		"$KUBECTL" logs -n "$NAMESPACE" "job/$RELEASE-warmup" --tail=10 || true
		# Last, so that the part of a CI log that is kept shows why the
		# policy did what it did.
		"$KUBECTL" get hedgepolicies -n "$NAMESPACE" -o yaml || true
	} >"$ARTIFACTS/diagnostics.txt" 2>&1
	tail -n 80 "$ARTIFACTS/diagnostics.txt" >&2
}

run() {
	local t0
	t0=$(ko_now)
	hack/kind-offline/docker-engine.sh
	pick_mode
	images
	HELM=$(hack/tools.sh helm)
	KUBECTL=$(hack/tools.sh kubectl)
	ensure_kind
	mkdir -p "$ARTIFACTS"
	export KUBECONFIG=$KUBECONFIG_FILE
	create_cluster
	install_monitoring
	install_tailcut

	ko_log "running test/e2e (policy, helm test with tailcut verify, ServiceMonitor targets, dashboard queries)"
	local t1
	t1=$(ko_now)
	if ! E2E_NAMESPACE=$NAMESPACE E2E_RELEASE=$RELEASE E2E_MONITORING_NAMESPACE=$MONITORING_NS \
		E2E_ARTIFACTS=$ARTIFACTS HELM_BIN=$HELM GOTOOLCHAIN=local \
		go test -tags e2e ./test/e2e/ -count=1 -timeout 30m -v; then
		diagnose
		ko_die "the e2e failed; the cluster is kept (KUBECONFIG=$KUBECONFIG_FILE); make kind-clean deletes it"
	fi
	ko_took "test/e2e" "$t1"
	"$KUBECTL" get pods -A >&2
	"$KUBECTL" get hp -A -o wide >&2
	if [[ ${KIND_E2E_CLEAN:-} == 1 ]]; then
		clean
	else
		ko_log "the cluster is kept: KUBECONFIG=$KUBECONFIG_FILE; make kind-clean deletes it"
	fi
	ko_took "make kind-e2e ($MODE images)" "$t0"
	ko_log "PASS. Report: $ARTIFACTS/report.html"
}

case ${1:-run} in
run) run ;;
images)
	hack/kind-offline/docker-engine.sh
	pick_mode
	images
	;;
clean) clean ;;
*) ko_die "usage: $0 [run|images|clean]" ;;
esac
