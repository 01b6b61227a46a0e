# hack/kind-offline/lib.sh — shared by the scripts in hack/kind-offline/ and
# hack/kind-e2e.sh: logging, the cache, Debian rootfs builds, and images that
# are rebuilt only when their cache key changes.
# shellcheck shell=bash

KO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$KO_DIR/../.." && pwd)
# shellcheck source=hack/kind-offline/versions.sh
. "$KO_DIR/versions.sh"

CACHE=${TAILCUT_CACHE:-${HOME:?HOME is not set}/.cache/tailcut}
KO_CACHE=$CACHE/kind-offline
KO_LABEL=io.tailcut.kind-offline.key

ko_log() { printf '[%s] %s\n' "${KO_NAME:-kind-offline}" "$*" >&2; }
ko_die() {
	printf '[%s] ERROR: %s\n' "${KO_NAME:-kind-offline}" "$*" >&2
	exit 1
}
ko_now() { date +%s; }
ko_took() { ko_log "$1 took $(($(ko_now) - $2))s"; }

# ko_key PART...: a 12-hex cache key from the pins and each PART (a file,
# whose content counts, or a literal string). Callers pass what their build
# depends on (their script, or the text of the functions that build), so that
# editing this library's logging does not throw away every cache.
ko_key() {
	{
		cat "$KO_DIR/versions.sh"
		local p
		for p in "$@"; do
			if [[ -f $p ]]; then cat "$p"; else printf '%s\n' "$p"; fi
		done
	} | sha256sum | cut -c1-12
}

# ko_debian_mirror: the Debian archive this host's apt uses (DEBIAN_MIRROR
# overrides), so debootstrap reaches the same package registry as apt-get.
ko_debian_mirror() {
	if [[ -n ${DEBIAN_MIRROR:-} ]]; then
		echo "$DEBIAN_MIRROR"
		return
	fi
	local m
	m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
		awk '/^URIs:/ {u=$2} /^Suites:/ && / '"$DEBIAN_SUITE"'( |$)/ && u !~ /security/ {print u; exit}')
	[[ -n $m ]] || m=$(awk '$1 == "deb" && $3 == "'"$DEBIAN_SUITE"'" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
	[[ -n $m ]] || ko_die "cannot find a Debian $DEBIAN_SUITE archive in /etc/apt/sources.list*; set DEBIAN_MIRROR"
	echo "$m"
}

# ko_need CMD PACKAGE: make sure CMD exists, installing the Debian PACKAGE
# when running as root on Debian.
ko_need() {
	command -v "$1" >/dev/null && return 0
	if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
		ko_log "installing $2 (for $1) with apt-get"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >&2 || ko_die "apt-get install $2 failed"
		command -v "$1" >/dev/null && return 0
	fi
	ko_die "$1 is needed (Debian package $2)"
}

# ko_rootfs NAME PACKAGES [SETUP-SCRIPT]: a minbase Debian rootfs with the
# comma-separated PACKAGES, as a tarball in the cache; SETUP-SCRIPT (a file)
# runs with the rootfs directory as $1 before it is packed. Prints the path.
ko_rootfs() {
	local name=$1 pkgs=$2 setup=${3:-} key tar dir t0
	key=$(ko_key "rootfs $name $pkgs" ${setup:+"$setup"})
	tar=$KO_CACHE/rootfs/$name-$key.tar
	if [[ -f $tar ]]; then
		echo "$tar"
		return
	fi
	[[ $(id -u) == 0 ]] || ko_die "debootstrap needs root"
	ko_need debootstrap debootstrap
	t0=$(ko_now)
	mkdir -p "$KO_CACHE/rootfs"
	dir=$(mktemp -d "$KO_CACHE/rootfs/.$name.XXXXXX")
	chmod 0755 "$dir" # mktemp -d makes it 0700, and it becomes the image's "/"
	ko_log "debootstrap $DEBIAN_SUITE minbase for $name ($pkgs)"
	if ! debootstrap --variant=minbase --include="$pkgs" "$DEBIAN_SUITE" "$dir" "$(ko_debian_mirror)" >"$dir.log" 2>&1; then
		tail -20 "$dir.log" >&2
		rm -rf "$dir"
		ko_die "debootstrap of $name failed (log: $dir.log)"
	fi
	if [[ -n $setup ]]; then
		bash "$setup" "$dir" >&2 || {
			rm -rf "$dir"
			ko_die "setup of rootfs $name failed"
		}
	fi
	# Package caches and logs make the image bigger and change nothing.
	rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/var/log/* "$dir"/tmp/*
	tar -C "$dir" --numeric-owner -cf "$tar.tmp" . || ko_die "cannot pack rootfs $name"
	mv -f "$tar.tmp" "$tar"
	rm -rf "$dir" "$dir.log"
	ko_took "rootfs $name" "$t0"
	echo "$tar"
}

# ko_image_key IMAGE: the cache key an image was built with ("" if absent).
ko_image_key() {
	docker image inspect --format "{{ index .Config.Labels \"$KO_LABEL\" }}" "$1" 2>/dev/null || true
}

# ko_image_file IMAGE KEY: where a built image is saved in the cache.
ko_image_file() {
	local safe=${1//[\/:@]/_}
	echo "$KO_CACHE/images/$safe-$2.tar.gz"
}

# ko_ensure_image IMAGE KEY BUILD-FUNCTION [save]: make IMAGE (built with KEY)
# present in Docker: already there, else loaded from the cache, else built by
# BUILD-FUNCTION IMAGE (which must tag IMAGE), then labelled with KEY, and
# saved to the cache when the 4th argument is "save" (for images that take
# minutes to build).
ko_ensure_image() {
	local img=$1 key=$2 build=$3 save=${4:-} file t0
	if [[ $(ko_image_key "$img") == "$key" ]]; then
		ko_log "$img is current ($key)"
		return
	fi
	file=$(ko_image_file "$img" "$key")
	if [[ -f $file ]]; then
		ko_log "loading $img from the cache"
		gzip -dc "$file" | docker load >&2 || ko_die "cannot load $file"
		[[ $(ko_image_key "$img") == "$key" ]] && return
		ko_log "$file did not hold $img with key $key; rebuilding"
	fi
	t0=$(ko_now)
	ko_log "building $img"
	# A function called as `f || ...` runs with set -e off; a subshell
	# outside any condition keeps it on, so a failing step stops the build.
	local rc
	set +e
	(
		set -e
		"$build" "$img"
	)
	rc=$?
	set -e
	((rc == 0)) || ko_die "building $img failed"
	printf 'FROM %s\nLABEL %s=%s\n' "$img" "$KO_LABEL" "$key" | docker build -q -t "$img" - >/dev/null ||
		ko_die "cannot label $img"
	if [[ $save == save ]]; then
		mkdir -p "$KO_CACHE/images"
		docker save "$img" | gzip -1 >"$file.tmp" && mv -f "$file.tmp" "$file" || ko_die "cannot save $img to $file"
	fi
	ko_took "$img" "$t0"
}

# ko_go_build OUT-DIR MODULE-DIR PACKAGE...: build Go commands statically with
# the local toolchain into OUT-DIR (the go build cache makes repeats cheap).
ko_go_build() {
	local out=$1 dir=$2
	shift 2
	mkdir -p "$out"
	(cd "$dir" && GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out/" "$@")
}
