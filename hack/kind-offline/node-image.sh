#!/usr/bin/env bash
# hack/kind-offline/node-image.sh — build, with no image registry, the kind
# node image $KIND_NODE_IMAGE_OFFLINE (Kubernetes $KUBERNETES_VERSION) and
# every image the node runs, then print the node image's name.
#
#   hack/kind-offline/node-image.sh     build or reuse; the last stdout line is
#                                       the image name, all logs go to stderr
#
# Why: `kind build node-image` and kind's base image pull from registries
# (debian, etcd, coredns, pause, kindnetd, local-path-provisioner). Offline,
# only the Debian archive and the Go module proxy answer, so this script
# does kind's work from those (see ../shared/KIND-OFFLINE.md beside the checkout):
#   1. in parallel (2 cores: the go builds share the CPU, debootstrap is
#      mostly network):
#      - one `go build` of kubeadm, kubelet, kubectl, kube-apiserver,
#        kube-controller-manager, kube-scheduler and kube-proxy in a wrapper
#        module around k8s.io/kubernetes (staging modules replaced by their
#        published versions, -X version ldflags; the approach and go build
#        cache of hack/tools.sh, so it is incremental after `tools.sh env`);
#      - etcd, coredns, crictl and local-path-provisioner, each in its own
#        wrapper module (`go install pkg@version` fails on modules with
#        replace directives), and pause from kubernetes' pause.c (gcc);
#      - two debootstrap rootfs: the node (systemd, Debian's containerd and
#        runc, CNI plugins, iptables, ..., finished by node/rootfs-node.sh
#        after kind's images/base/Dockerfile) and a slim one (iptables) for
#        kube-proxy and kind's local-path helper;
#   2. component images tagged exactly as kubeadm and kind's default storage
#      manifest name them (checked against `kubeadm config images list`);
#   3. the node: run the base image, copy in kubeadm/kubelet/kubectl/crictl,
#      /kind/version and /kind/manifests, import the component images into
#      containerd's k8s.io namespace (pinned), docker commit.
# Where the host lacks CAP_SYS_RESOURCE, the node also gets runc-wrapper.sh as
# /usr/local/sbin/runc (see below).
#
# Cache (${TAILCUT_CACHE:-~/.cache/tailcut}/kind-offline): keys are ko_key of
# the pins, the Go version and: for binaries, the functions here that
# build them; for the node image, this script, the node/ files it uses and
# the runc wrapper decision. node/smoke-test.sh checks a built image in a
# throwaway cluster.
#   bin/kubernetes-<key>/, bin/components-<key>/   built binaries
#   rootfs/kind-node-<key>.tar, rootfs/kind-slim-<key>.tar   debootstraps
#   images/kindest_node_...-<key>.tar.gz            the finished node image
#   src/                                            wrapper Go modules
# A run with the image already in Docker takes a second; with only the saved
# image, about 20 s (docker load); with binaries and rootfs cached, about
# 70 s. Older keys of these files are removed. Runs take a lock
# (node-image.lock), so parallel callers build once.
# Go downloads and builds use the normal module and build caches.
# shellcheck disable=SC2317 # functions run through variables and traps
set -euo pipefail
shopt -s inherit_errexit
KO_NAME=node-image
# shellcheck source=hack/kind-offline/lib.sh
. "$(dirname "$0")/lib.sh"
# fd 3 is the real stdout (the image name); everything else goes to stderr.
exec 3>&1 1>&2

SELF=$KO_DIR/node-image.sh
NODE_FILES=$KO_DIR/node
IMAGE=$KIND_NODE_IMAGE_OFFLINE
K8S_CMDS=(kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy)
# Intermediate images (removed once the node image is committed).
TMP_REPO=tailcut.local/kind-offline
NODE_PKGS=systemd,containerd,runc,containernetworking-plugins,iptables,nftables,conntrack,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,e2fsprogs,bash,ca-certificates,curl,jq,procps,hostname,mawk
SLIM_PKGS=iptables,nftables,conntrack,ca-certificates

WORK=""
BUILD_CTR=""
TMP_IMAGES=()
# On every exit: the build container, the scratch dir and the intermediate
# images (component images live on inside the node's containerd).
cleanup() {
	[[ -n $BUILD_CTR ]] && docker rm -f "$BUILD_CTR" >/dev/null 2>&1
	((${#TMP_IMAGES[@]})) && docker rmi "${TMP_IMAGES[@]}" >/dev/null 2>&1
	[[ -n $WORK ]] && rm -rf "$WORK"
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The runc wrapper (runc-wrapper.sh) goes into the node only where the host's
# capability bounding set lacks CAP_SYS_RESOURCE: there every pod fails
# without it, because the CRI asks runc for a negative oom_score_adj. On a
# normal host the node keeps plain runc, so privileged pods keep that
# capability. The decision is part of the cache key, so an image built on one
# kind of host is never reused on the other.
wrap_runc() {
	local bnd
	bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
	if (((16#$bnd >> 24) & 1)); then echo no; else echo yes; fi
}

go_env() {
	export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod
	unset GOOS GOARCH GOBIN
}

# mod_dir MODULE VERSION: download a module, print its directory.
mod_dir() {
	local info dir
	info=$(go mod download -json "$1@$2") || ko_die "cannot download $1@$2 from the Go module proxy: $info"
	dir=$(jq -r '.Dir // empty' <<<"$info")
	[[ -d $dir ]] || ko_die "no directory for $1@$2 in the module cache"
	echo "$dir"
}

# wrapper_module DIR MODULE VERSION PACKAGE... [-- REPLACE-LINE...]: write a
# wrapper module in DIR that requires MODULE@VERSION and imports PACKAGEs
# (tools.go, build tag "tools"; main packages are fine there), copying the
# go and godebug lines of MODULE's go.mod, then `go mod tidy` it.
wrapper_module() {
	local dir=$1 mod=$2 ver=$3 gomod godir godebug p
	shift 3
	local pkgs=() repl=()
	while (($#)) && [[ $1 != -- ]]; do
		pkgs+=("$1")
		shift
	done
	(($#)) && shift && repl=("$@")
	gomod=$(mod_dir "$mod" "$ver")/go.mod
	godir=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")
	godebug=$(grep -E '^godebug ' "$gomod" || true)
	mkdir -p "$dir"
	{
		printf '// Generated by hack/kind-offline/node-image.sh.\nmodule tailcut.local/kind-offline/%s\n\ngo %s\n\n' \
			"${dir##*/}" "${godir:-1.26.0}"
		[[ -n $godebug ]] && printf '%s\n\n' "$godebug"
		printf 'require %s %s\n' "$mod" "$ver"
		if ((${#repl[@]})); then
			printf '\nreplace (\n'
			printf '\t%s\n' "${repl[@]}"
			printf ')\n'
		fi
	} >"$dir/go.mod"
	rm -f "$dir/go.sum"
	{
		printf '//go:build tools\n\n// Generated by hack/kind-offline/node-image.sh.\npackage tools\n\nimport (\n'
		for p in "${pkgs[@]}"; do printf '\t_ "%s"\n' "$p"; done
		printf ')\n'
	} >"$dir/tools.go"
	(cd "$dir" && go mod tidy) >"$dir/tidy.log" 2>&1 || {
		tail -30 "$dir/tidy.log"
		ko_die "go mod tidy failed in $dir"
	}
}

# go_build DIR OUT LDFLAGS PACKAGE...: build in a wrapper module, statically.
go_build() {
	local dir=$1 out=$2 ldflags=$3
	shift 3
	(cd "$dir" && go build -trimpath -ldflags "-s -w$ldflags" -o "$out" "$@") >"$dir/build.log" 2>&1 || {
		tail -40 "$dir/build.log"
		ko_die "go build failed in $dir (log: $dir/build.log)"
	}
}

# prune DIR PREFIX KEEP: remove DIR/PREFIX* except KEEP (older cache keys).
prune() {
	local f
	for f in "$1/$2"*; do
		[[ -e $f && $f != "$3" ]] && rm -rf "$f"
	done
	return 0
}

# build_kubernetes OUT: the seven Kubernetes commands in one go build.
build_kubernetes() {
	KO_NAME=node-image/kubernetes
	local out=$1 t0 src=$KO_CACHE/src/kubernetes-$KUBERNETES_VERSION gomod staging m c
	t0=$(ko_now)
	ko_log "go build of ${K8S_CMDS[*]} $KUBERNETES_VERSION (about 13 min on 2 cores from an empty go build cache)"
	gomod=$(mod_dir k8s.io/kubernetes "$KUBERNETES_VERSION")/go.mod
	# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces
	# them with ./staging/...; each is published at the staging version.
	staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "$gomod" | sort -u)
	[[ -n $staging ]] || ko_die "no staging replace directives in $gomod"
	local repl=() pkgs=()
	for m in $staging; do repl+=("$m => $m $KUBERNETES_STAGING_VERSION"); done
	for c in "${K8S_CMDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
	wrapper_module "$src" k8s.io/kubernetes "$KUBERNETES_VERSION" "${pkgs[@]}" -- "${repl[@]}"
	# The version variables as kubernetes' hack/lib/version.sh sets them;
	# kubeadm picks the control plane image tags from its own version.
	local major minor bdate x ldflags=""
	major=${KUBERNETES_VERSION#v}
	major=${major%%.*}
	minor=${KUBERNETES_VERSION#v*.}
	minor=${minor%%.*}
	bdate=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | jq -r '.Time // "1970-01-01T00:00:00Z"')
	for x in component-base/version client-go/pkg/version; do
		ldflags+=" -X k8s.io/$x.gitVersion=$KUBERNETES_VERSION -X k8s.io/$x.gitMajor=$major -X k8s.io/$x.gitMinor=$minor"
		ldflags+=" -X k8s.io/$x.gitTreeState=clean -X k8s.io/$x.buildDate=$bdate"
	done
	mkdir -p "$out"
	go_build "$src" "$out/" "$ldflags" "${pkgs[@]}"
	ko_took "kubernetes go build" "$t0"
}

# build_components OUT: etcd, coredns, crictl, local-path-provisioner, pause.
build_components() {
	KO_NAME=node-image/components
	local out=$1 t0 t src=$KO_CACHE/src k8s
	t0=$(ko_now)
	mkdir -p "$out"
	t=$(ko_now)
	wrapper_module "$src/etcd-$ETCD_VERSION" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" go.etcd.io/etcd/server/v3
	go_build "$src/etcd-$ETCD_VERSION" "$out/etcd" "" go.etcd.io/etcd/server/v3
	ko_took "etcd $ETCD_VERSION" "$t"
	t=$(ko_now)
	wrapper_module "$src/coredns-$COREDNS_VERSION" github.com/coredns/coredns "$COREDNS_VERSION" github.com/coredns/coredns
	go_build "$src/coredns-$COREDNS_VERSION" "$out/coredns" "" github.com/coredns/coredns
	ko_took "coredns $COREDNS_VERSION" "$t"
	t=$(ko_now)
	wrapper_module "$src/crictl-$CRICTL_VERSION" sigs.k8s.io/cri-tools "$CRICTL_VERSION" sigs.k8s.io/cri-tools/cmd/crictl
	go_build "$src/crictl-$CRICTL_VERSION" "$out/crictl" " -X sigs.k8s.io/cri-tools/pkg/version.Version=${CRICTL_VERSION#v}" \
		sigs.k8s.io/cri-tools/cmd/crictl
	ko_took "crictl $CRICTL_VERSION" "$t"
	t=$(ko_now)
	wrapper_module "$src/local-path-provisioner-$LOCAL_PATH_PROVISIONER_VERSION" \
		github.com/rancher/local-path-provisioner "$LOCAL_PATH_PROVISIONER_VERSION" github.com/rancher/local-path-provisioner
	go_build "$src/local-path-provisioner-$LOCAL_PATH_PROVISIONER_VERSION" "$out/local-path-provisioner" \
		" -X main.VERSION=$LOCAL_PATH_PROVISIONER_VERSION" github.com/rancher/local-path-provisioner
	ko_took "local-path-provisioner $LOCAL_PATH_PROVISIONER_VERSION" "$t"
	# pause, as kubernetes' build/pause/Makefile compiles it.
	k8s=$(mod_dir k8s.io/kubernetes "$KUBERNETES_VERSION")
	local tags
	read -r -a tags <<<"$PAUSE_IMAGE_TAGS"
	gcc -Os -Wall -Werror -static -DVERSION="v${tags[0]}" -o "$out/pause" "$k8s/build/pause/linux/pause.c" ||
		ko_die "cannot compile pause.c (needs gcc and libc6-dev)"
	strip "$out/pause"
	ko_took "components" "$t0"
}

# cached_build NAME FUNCTION: the binaries of FUNCTION in
# $KO_CACHE/bin/NAME-<key>, built (into a scratch dir, then renamed) only
# when missing. Prints the directory.
cached_build() {
	local name=$1 fn=$2 key dir
	# Keyed on the code that builds them (not all of this file), so that
	# changing how the image is assembled does not rebuild the binaries.
	key=$(ko_key "binaries $name go=$GOVERSION ${K8S_CMDS[*]}" \
		"$(declare -f "$fn" wrapper_module go_build mod_dir go_env)")
	dir=$KO_CACHE/bin/$name-$key
	if [[ ! -d $dir ]]; then
		mkdir -p "$KO_CACHE/bin"
		rm -rf "$dir.tmp"
		"$fn" "$dir.tmp" >&2
		mv -f "$dir.tmp" "$dir"
		prune "$KO_CACHE/bin" "$name-" "$dir"
	else
		ko_log "$name binaries are cached ($dir)"
	fi
	echo "$dir"
}

# import_rootfs TARBALL IMAGE CHANGE...: docker import with Dockerfile changes.
import_rootfs() {
	local tar=$1 img=$2
	shift 2
	local args=() c
	for c in "$@"; do args+=(--change "$c"); done
	docker import "${args[@]}" "$tar" "$img" >/dev/null || ko_die "docker import of $tar failed"
}

# build_image TAG CONTEXT-DIR: docker build of CONTEXT-DIR/Dockerfile.
build_image() {
	# (stderr kept apart: Docker without buildx warns on every build)
	docker build -q -t "$1" "$2" >/dev/null 2>"$WORK/docker-build.err" || {
		cat "$WORK/docker-build.err"
		ko_die "docker build of $1 failed"
	}
}

# kind's default storage: the manifest constant and its two image names, read
# from the kind module (pkg/build/nodeimage/const_storage.go).
read_kind_storage() {
	local f=$KIND_DIR/pkg/build/nodeimage/const_storage.go
	STORAGE_IMAGE=$(sed -n 's/^const storageProvisionerImage = "\(.*\)"$/\1/p' "$f")
	STORAGE_HELPER_IMAGE=$(sed -n 's/^const storageHelperImage = "\(.*\)"$/\1/p' "$f")
	[[ -n $STORAGE_IMAGE && -n $STORAGE_HELPER_IMAGE ]] || ko_die "cannot find the storage image names in $f"
	awk '/^const defaultStorageManifest = `/ {on=1; next} on && /^`$/ {exit} on {print}' "$f" |
		sed -e "s#\` + storageProvisionerImage + \`#$STORAGE_IMAGE#g" \
			-e "s#\` + storageHelperImage + \`#$STORAGE_HELPER_IMAGE#g" >"$WORK/default-storage.yaml"
	grep -q '`' "$WORK/default-storage.yaml" && ko_die "unexpected Go expression in kind's storage manifest ($f)"
	grep -q "image: $STORAGE_IMAGE" "$WORK/default-storage.yaml" || ko_die "cannot read kind's storage manifest from $f"
}

# check_kubeadm_images KUBEADM: the images kubeadm wants must be the ones
# built here (the pins in versions.sh).
check_kubeadm_images() {
	local want got tag
	got=$("$1" config images list --kubernetes-version "$KUBERNETES_VERSION" 2>/dev/null | sort) ||
		ko_die "kubeadm config images list failed"
	want=$(
		for c in kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do
			echo "registry.k8s.io/$c:$KUBERNETES_VERSION"
		done
		echo "registry.k8s.io/coredns/coredns:$COREDNS_VERSION"
		echo "registry.k8s.io/etcd:$ETCD_IMAGE_TAG"
		for tag in $PAUSE_IMAGE_TAGS; do echo "registry.k8s.io/pause:$tag"; done
	)
	local img
	while read -r img; do
		grep -qxF "$img" <<<"$want" ||
			ko_die "kubeadm $KUBERNETES_VERSION wants $img, which versions.sh does not pin (kubeadm's list: $(echo "$got" | paste -sd' '))"
	done <<<"$got"
	ko_log "kubeadm's image list matches the pins: $(echo "$got" | paste -sd' ')"
}

# component_images K8S-BIN COMP-BIN: tag every image the node must hold; sets
# NODE_IMAGES (what goes into containerd) and TMP_IMAGES (what to remove).
component_images() {
	local kb=$1 cb=$2 d c tag
	NODE_IMAGES=()
	# Every image tagged here is removed at exit (see cleanup).
	TMP_IMAGES+=("registry.k8s.io/kube-apiserver:$KUBERNETES_VERSION" "registry.k8s.io/kube-controller-manager:$KUBERNETES_VERSION"
		"registry.k8s.io/kube-scheduler:$KUBERNETES_VERSION" "registry.k8s.io/kube-proxy:$KUBERNETES_VERSION"
		"registry.k8s.io/etcd:$ETCD_IMAGE_TAG" "registry.k8s.io/coredns/coredns:$COREDNS_VERSION"
		"$STORAGE_IMAGE" "$STORAGE_HELPER_IMAGE")
	for tag in $PAUSE_IMAGE_TAGS; do TMP_IMAGES+=("registry.k8s.io/pause:$tag"); done
	# A tiny base for the static Go binaries: users, a CA bundle, /tmp, PATH.
	d=$WORK/static-base
	mkdir -p "$d/etc/ssl/certs" "$d/tmp"
	chmod 1777 "$d/tmp"
	printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$d/etc/passwd"
	printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$d/etc/group"
	printf 'hosts: files dns\n' >"$d/etc/nsswitch.conf"
	tar -xf "$SLIM_TAR" -C "$d" ./etc/ssl/certs/ca-certificates.crt || ko_die "no CA bundle in $SLIM_TAR"
	tar -C "$d" --numeric-owner --owner=0 --group=0 -cf "$WORK/static-base.tar" .
	TMP_IMAGES+=("$TMP_REPO/static-base:$KEY")
	import_rootfs "$WORK/static-base.tar" "$TMP_REPO/static-base:$KEY" \
		"ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"

	# kube-apiserver, kube-controller-manager, kube-scheduler.
	for c in kube-apiserver kube-controller-manager kube-scheduler; do
		d=$WORK/img-$c
		mkdir -p "$d"
		cp "$kb/$c" "$d/"
		printf 'FROM %s\nCOPY %s /usr/local/bin/%s\nENTRYPOINT ["/usr/local/bin/%s"]\n' \
			"$TMP_REPO/static-base:$KEY" "$c" "$c" "$c" >"$d/Dockerfile"
		build_image "registry.k8s.io/$c:$KUBERNETES_VERSION" "$d"
		NODE_IMAGES+=("registry.k8s.io/$c:$KUBERNETES_VERSION")
	done

	# kube-proxy: the slim Debian rootfs (iptables, nft, conntrack) with a
	# wrapper that picks the node's iptables backend (node/iptables-wrapper.sh).
	d=$WORK/img-kube-proxy
	mkdir -p "$d/layer/usr/local/bin" "$d/layer/usr/sbin"
	cp "$kb/kube-proxy" "$d/layer/usr/local/bin/"
	install -m 0755 "$NODE_FILES/iptables-wrapper.sh" "$d/layer/usr/sbin/iptables-wrapper"
	for c in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
		ln -s iptables-wrapper "$d/layer/usr/sbin/$c"
	done
	tar -C "$d/layer" --numeric-owner --owner=0 --group=0 -cf "$d/layer.tar" usr
	printf 'FROM %s\nADD layer.tar /\nENTRYPOINT ["/usr/local/bin/kube-proxy"]\n' "$TMP_REPO/slim-base:$KEY" >"$d/Dockerfile"
	rm -rf "$d/layer"
	build_image "registry.k8s.io/kube-proxy:$KUBERNETES_VERSION" "$d"
	NODE_IMAGES+=("registry.k8s.io/kube-proxy:$KUBERNETES_VERSION")

	# etcd.
	d=$WORK/img-etcd
	mkdir -p "$d"
	cp "$cb/etcd" "$d/"
	printf 'FROM %s\nCOPY etcd /usr/local/bin/etcd\nENTRYPOINT ["/usr/local/bin/etcd"]\n' "$TMP_REPO/static-base:$KEY" >"$d/Dockerfile"
	build_image "registry.k8s.io/etcd:$ETCD_IMAGE_TAG" "$d"
	NODE_IMAGES+=("registry.k8s.io/etcd:$ETCD_IMAGE_TAG")

	# coredns: kubeadm's Deployment passes only args, so /coredns is the
	# entrypoint. Root, because this binary carries no file capability for
	# port 53 (the Deployment still drops every capability but
	# NET_BIND_SERVICE).
	d=$WORK/img-coredns
	mkdir -p "$d"
	cp "$cb/coredns" "$d/"
	printf 'FROM %s\nCOPY coredns /coredns\nUSER 0\nEXPOSE 53 53/udp\nENTRYPOINT ["/coredns"]\n' "$TMP_REPO/static-base:$KEY" >"$d/Dockerfile"
	build_image "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" "$d"
	NODE_IMAGES+=("registry.k8s.io/coredns/coredns:$COREDNS_VERSION")

	# pause: kubeadm's tag and the sandbox image of kind's containerd config.
	d=$WORK/img-pause
	mkdir -p "$d"
	cp "$cb/pause" "$d/"
	printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$d/Dockerfile"
	for tag in $PAUSE_IMAGE_TAGS; do
		build_image "registry.k8s.io/pause:$tag" "$d"
		NODE_IMAGES+=("registry.k8s.io/pause:$tag")
	done

	# kind's default storage (/kind/manifests/default-storage.yaml): the
	# provisioner, and the helper pod image, which needs a shell.
	d=$WORK/img-local-path
	mkdir -p "$d"
	cp "$cb/local-path-provisioner" "$d/"
	printf 'FROM %s\nCOPY local-path-provisioner /usr/bin/local-path-provisioner\nENTRYPOINT ["/usr/bin/local-path-provisioner"]\n' \
		"$TMP_REPO/static-base:$KEY" >"$d/Dockerfile"
	build_image "$STORAGE_IMAGE" "$d"
	docker tag "$TMP_REPO/slim-base:$KEY" "$STORAGE_HELPER_IMAGE"
	NODE_IMAGES+=("$STORAGE_IMAGE" "$STORAGE_HELPER_IMAGE")
}

# build_node IMAGE: everything, from binaries to the committed node image.
build_node() {
	local img=$1 t0 t kb cb pk pc pn ps
	[[ $(id -u) == 0 ]] || ko_die "building the offline node image needs root (debootstrap, chroot)"
	command -v go >/dev/null || ko_die "go is needed to build the node image's binaries"
	ko_need gcc gcc
	ko_need jq jq
	ko_need debootstrap debootstrap
	go_env
	WORK=$(mktemp -d "${TMPDIR:-/tmp}/kind-node-image.XXXXXX")
	KIND_DIR=$(mod_dir sigs.k8s.io/kind "$KIND_VERSION")
	export KO_KIND_BASE=$KIND_DIR/images/base
	read_kind_storage

	# 1. binaries and rootfs, in parallel.
	t0=$(ko_now)
	cached_build kubernetes build_kubernetes >"$WORK/kb" &
	pk=$!
	cached_build components build_components >"$WORK/cb" &
	pc=$!
	(KO_NAME=node-image/rootfs ko_rootfs kind-node "$NODE_PKGS" "$NODE_FILES/rootfs-node.sh" >"$WORK/node.tar.path") &
	pn=$!
	(KO_NAME=node-image/rootfs ko_rootfs kind-slim "$SLIM_PKGS" "$NODE_FILES/rootfs-slim.sh" >"$WORK/slim.tar.path") &
	ps=$!
	local failed=""
	wait "$pk" || failed+=" kubernetes"
	wait "$pc" || failed+=" components"
	wait "$pn" || failed+=" node-rootfs"
	wait "$ps" || failed+=" slim-rootfs"
	[[ -z $failed ]] || ko_die "failed:$failed (see above)"
	ko_took "binaries and rootfs (parallel)" "$t0"
	kb=$(<"$WORK/kb") cb=$(<"$WORK/cb") NODE_TAR=$(<"$WORK/node.tar.path") SLIM_TAR=$(<"$WORK/slim.tar.path")
	local c
	for c in "${K8S_CMDS[@]}"; do [[ -x $kb/$c ]] || ko_die "$kb/$c is missing"; done
	for c in etcd coredns crictl local-path-provisioner pause; do [[ -x $cb/$c ]] || ko_die "$cb/$c is missing"; done
	[[ $("$kb/kubeadm" version -o short) == "$KUBERNETES_VERSION" ]] || ko_die "kubeadm does not report $KUBERNETES_VERSION"
	check_kubeadm_images "$kb/kubeadm"
	prune "$KO_CACHE/rootfs" kind-node- "$NODE_TAR"
	prune "$KO_CACHE/rootfs" kind-slim- "$SLIM_TAR"

	# 2. base images and component images.
	t=$(ko_now)
	TMP_IMAGES+=("$TMP_REPO/node-import:$KEY" "$TMP_REPO/node-base:$KEY" "$TMP_REPO/slim-base:$KEY")
	import_rootfs "$NODE_TAR" "$TMP_REPO/node-import:$KEY"
	# Docker 20.10's import --change rejects STOPSIGNAL; a docker build adds it.
	mkdir -p "$WORK/node-base"
	# systemd exits on SIGRTMIN+3 (SIGTERM re-executes it).
	printf 'FROM %s\nENV container=docker\nSTOPSIGNAL SIGRTMIN+3\nENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]\n' \
		"$TMP_REPO/node-import:$KEY" >"$WORK/node-base/Dockerfile"
	build_image "$TMP_REPO/node-base:$KEY" "$WORK/node-base"
	import_rootfs "$SLIM_TAR" "$TMP_REPO/slim-base:$KEY" \
		"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	ko_took "base images (docker import)" "$t"
	t=$(ko_now)
	component_images "$kb" "$cb"
	ko_took "component images (${#NODE_IMAGES[@]})" "$t"

	# 3. the node: files in, images into containerd, commit.
	t=$(ko_now)
	local st=$WORK/node-files
	mkdir -p "$st/usr/bin" "$st/usr/local/bin" "$st/usr/local/sbin" "$st/kind/manifests"
	for c in kubeadm kubelet kubectl; do cp "$kb/$c" "$st/usr/bin/"; done
	cp "$cb/crictl" "$st/usr/local/bin/"
	if [[ $WRAP_RUNC == yes ]]; then
		ko_log "this host lacks CAP_SYS_RESOURCE: installing runc-wrapper.sh as the node's /usr/local/sbin/runc"
		install -m 0755 "$KO_DIR/runc-wrapper.sh" "$st/usr/local/sbin/runc"
	else
		ko_log "this host has CAP_SYS_RESOURCE: the node keeps Debian's plain runc"
	fi
	printf '%s' "$KUBERNETES_VERSION" >"$st/kind/version"
	cp "$WORK/default-storage.yaml" "$st/kind/manifests/default-storage.yaml"
	local conflist
	conflist=$(jq -c '.plugins[0].ipam.ranges = [[{"subnet": "{{ .PodSubnet }}"}]]' "$NODE_FILES/cni.conflist") ||
		ko_die "cannot read $NODE_FILES/cni.conflist"
	sed -e "s#@IMAGE@#$STORAGE_HELPER_IMAGE#" -e "s#@CONFLIST@#$conflist#" \
		"$NODE_FILES/default-cni.yaml" >"$st/kind/manifests/default-cni.yaml"
	find "$st" -type d -exec chmod 0755 {} +
	chmod 0644 "$st/kind/version" "$st/kind/manifests/"*

	BUILD_CTR=kind-offline-node-build-$$
	# --init: containerd is started from `docker exec`, so PID 1 must reap it
	# once it is stopped.
	docker run -d --init --name "$BUILD_CTR" --entrypoint=sleep --security-opt seccomp=unconfined \
		"$TMP_REPO/node-base:$KEY" infinity >/dev/null || ko_die "cannot start the build container"
	tar -C "$st" --numeric-owner --owner=0 --group=0 -c usr kind | docker cp - "$BUILD_CTR:/" ||
		ko_die "cannot copy the binaries into the build container"
	docker exec "$BUILD_CTR" bash -c 'nohup containerd >/tmp/containerd.log 2>&1 &
		for i in $(seq 50); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.2; done
		cat /tmp/containerd.log; exit 1' || ko_die "containerd did not start in the build container"
	ko_took "node files" "$t"
	t=$(ko_now)
	docker save "${NODE_IMAGES[@]}" |
		docker exec -i "$BUILD_CTR" ctr --namespace=k8s.io images import --all-platforms --no-unpack - >/dev/null ||
		ko_die "importing the component images into the node's containerd failed"
	# Pinned, so that the kubelet's image garbage collection keeps them.
	local ref refs
	refs=$(docker exec "$BUILD_CTR" ctr --namespace=k8s.io images list -q)
	for ref in $refs; do
		docker exec "$BUILD_CTR" ctr --namespace=k8s.io images label "$ref" io.cri-containerd.pinned=pinned >/dev/null ||
			ko_die "cannot pin $ref"
	done
	ko_log "node images: $(echo "$refs" | paste -sd' ')"
	docker exec "$BUILD_CTR" bash -c 'pkill containerd; for i in $(seq 50); do pgrep -x containerd >/dev/null || exit 0; sleep 0.2; done; exit 1' ||
		ko_die "containerd did not stop in the build container"
	docker exec "$BUILD_CTR" rm -rf /tmp/containerd.log /run/containerd
	ko_took "image import into containerd" "$t"
	t=$(ko_now)
	# The build container ran `sleep infinity`; put kind's entrypoint back
	# and drop the command.
	docker commit --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' --change 'CMD []' \
		"$BUILD_CTR" "$img" >/dev/null || ko_die "docker commit failed"
	docker rm -f "$BUILD_CTR" >/dev/null
	BUILD_CTR=""
	docker rmi "${TMP_IMAGES[@]}" >/dev/null 2>&1 || ko_log "could not remove some intermediate images"
	TMP_IMAGES=()
	ko_took "docker commit" "$t"
	ko_took "node image build (without label and save)" "$t0"
}

# already_built IMAGE: ko_ensure_image's build function; the build ran above,
# so getting here without one means the saved image did not hold the key.
BUILT=no
already_built() {
	[[ $BUILT == yes ]] || ko_die "$(ko_image_file "$IMAGE" "$KEY") does not hold $IMAGE with key $KEY; delete it and run again"
}

main() {
	local t0
	t0=$(ko_now)
	"$KO_DIR/docker-engine.sh"
	# Locked after docker-engine.sh: a dockerd it starts must not inherit
	# the lock's file descriptor.
	mkdir -p "$KO_CACHE"
	local lock
	exec {lock}>"$KO_CACHE/node-image.lock"
	flock "$lock" || ko_die "cannot lock $KO_CACHE/node-image.lock"
	GOVERSION=$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null || echo none)
	WRAP_RUNC=$(wrap_runc)
	# (node/smoke-test.sh is not part of the image, so not of the key)
	local parts=("$SELF" "runc-wrapper=$WRAP_RUNC" "go=$GOVERSION")
	local f
	for f in rootfs-node.sh rootfs-slim.sh iptables-wrapper.sh cni.conflist default-cni.yaml; do
		parts+=("$NODE_FILES/$f")
	done
	[[ $WRAP_RUNC == yes ]] && parts+=("$KO_DIR/runc-wrapper.sh")
	KEY=$(ko_key "${parts[@]}")
	ko_log "node image $IMAGE, key $KEY (runc wrapper in the node: $WRAP_RUNC)"
	local old
	old=$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
	# build_node runs in this shell, not as ko_ensure_image's build function
	# (a subshell there), so that the EXIT trap (cleanup) sees its build
	# container and intermediate images; ko_ensure_image then labels and
	# saves what it built.
	if [[ $(ko_image_key "$IMAGE") != "$KEY" && ! -f $(ko_image_file "$IMAGE" "$KEY") ]]; then
		build_node "$IMAGE"
		BUILT=yes
	fi
	ko_ensure_image "$IMAGE" "$KEY" already_built save
	# A rebuilt or reloaded image leaves the previous one untagged; drop it
	# (this fails, harmlessly, while a cluster still runs on it).
	if [[ -n $old && $old != $(docker image inspect --format '{{.Id}}' "$IMAGE") ]]; then
		docker rmi "$old" >/dev/null 2>&1 || true
	fi
	# Saved images of older keys are dead weight.
	prune "$KO_CACHE/images" "$(basename "$(ko_image_file "$IMAGE" "")" .tar.gz)" "$(ko_image_file "$IMAGE" "$KEY")"
	ko_took "node-image.sh" "$t0"
	echo "$IMAGE" >&3
}

main "$@"; exit $?  # keep on one line: bash must not read past here (safe if edited while running)
