#!/usr/bin/env bash
# hack/kind-offline/node/rootfs-slim.sh ROOTFS — trim the small Debian rootfs
# that the kube-proxy image (iptables, nftables, conntrack) and kind's
# local-path helper image (a shell, mkdir, rm) are built on. Run by ko_rootfs
# from hack/kind-offline/node-image.sh.
set -euo pipefail
exec 1>&2 # ko_rootfs prints the tarball path on stdout; keep it clean
root=${1:?usage: rootfs-slim.sh ROOTFS}
# ko_rootfs debootstraps into a mktemp -d (mode 0700), which would become
# the image's "/".
chmod 0755 "$root"
rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
	"$root"/usr/share/locale/* "$root"/var/cache/debconf/*-old "$root"/var/tmp/*
: >"$root/etc/machine-id"
