#!/usr/bin/env bash
# hack/kind-offline/node/rootfs-node.sh ROOTFS — turn a debootstrapped Debian
# rootfs into a kind node base, the way sigs.k8s.io/kind's
# images/base/Dockerfile does (read from the kind module in the Go module
# cache, $KO_KIND_BASE = <kind module>/images/base). Run by ko_rootfs (as
# root) from hack/kind-offline/node-image.sh; the result is cached as a
# tarball keyed by this file's content, the package list and the pins.
#
# Differences from kind's image: containerd, runc and the CNI plugins are
# Debian's (containerd 1.6, runc 1.1, plugins 1.1) instead of upstream
# release builds; crictl and the Kubernetes binaries are added later by
# node-image.sh; no fuse-overlayfs, NFS or iSCSI packages.
set -euo pipefail
exec 1>&2 # ko_rootfs prints the tarball path on stdout; keep it clean
root=${1:?usage: rootfs-node.sh ROOTFS}
# ko_rootfs debootstraps into a mktemp -d (mode 0700), which would become
# the image's "/".
chmod 0755 "$root"
files=${KO_KIND_BASE:?KO_KIND_BASE must point at kind\'s images/base}/files
[[ -f $files/usr/local/bin/entrypoint ]] || {
	echo "rootfs-node.sh: $files has no usr/local/bin/entrypoint" >&2
	exit 1
}

# put SRC-DIR DEST-DIR MODE: copy the regular files of SRC-DIR (not
# subdirectories) into DEST-DIR with MODE, like the Dockerfile's COPY --chmod.
put() {
	local src=$1 dest=$root$2 mode=$3 f
	install -d -m 0755 "$dest"
	for f in "$src"/*; do
		[[ -f $f ]] && install -m "$mode" "$f" "$dest/"
	done
	return 0
}
put "$files/usr/local/bin" /usr/local/bin 0755
put "$files/kind" /kind 0644
put "$files/kind/bin" /kind/bin 0755
put "$files/etc" /etc 0644
put "$files/etc/containerd" /etc/containerd 0644
put "$files/etc/default" /etc/default 0644
put "$files/etc/sysctl.d" /etc/sysctl.d 0644
put "$files/etc/systemd/system" /etc/systemd/system 0644
put "$files/etc/systemd/system/kubelet.service.d" /etc/systemd/system/kubelet.service.d 0644
rm -f "$root/usr/local/bin/clean-install" "$root/usr/local/bin/target-cc"

# kind's units and scripts expect containerd under /usr/local/bin, where its
# own build puts it; Debian installs it in /usr/bin.
for b in containerd containerd-shim-runc-v2 ctr; do
	[[ -x $root/usr/bin/$b ]] || {
		echo "rootfs-node.sh: Debian's containerd package has no /usr/bin/$b" >&2
		exit 1
	}
	ln -sf "/usr/bin/$b" "$root/usr/local/bin/$b"
done

# The CNI plugins: containerd looks in /opt/cni/bin (loopback for every pod's
# lo, and whatever the CNI config names: ptp, host-local, portmap, ...).
install -d -m 0755 "$root/opt/cni/bin"
for p in "$root"/usr/lib/cni/*; do
	ln -sf "/usr/lib/cni/${p##*/}" "$root/opt/cni/bin/${p##*/}"
done
for p in loopback ptp host-local portmap; do
	[[ -x $root/usr/lib/cni/$p ]] || {
		echo "rootfs-node.sh: CNI plugin $p is missing" >&2
		exit 1
	}
done

# containerd's base OCI spec, as kind generates it: the default spec plus
# kind's createContainer hook (product_name/uuid), without rlimits.
chroot "$root" ctr oci spec |
	jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
	jq 'del(.process.rlimits)' >"$root/etc/containerd/cri-base.json"

# systemd clean-ups of kind's Dockerfile: no tmpfiles setup at boot, no
# services but the ones enabled below, no kmsg in journald.
find "$root/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
rm -f "$root"/lib/systemd/system/multi-user.target.wants/* \
	"$root"/etc/systemd/system/*.wants/* \
	"$root"/lib/systemd/system/local-fs.target.wants/* \
	"$root"/lib/systemd/system/sockets.target.wants/*udev* \
	"$root"/lib/systemd/system/sockets.target.wants/*initctl* \
	"$root"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"$root/etc/systemd/journald.conf"
[[ -e $root/sbin/init ]] || ln -s /usr/lib/systemd/systemd "$root/sbin/init"
chroot "$root" systemctl enable kubelet.service containerd.service undo-mount-hacks.service
chroot "$root" systemctl mask systemd-binfmt.service
install -d -m 0755 "$root/etc/kubernetes/manifests"

# The entrypoint regenerates the machine id on every node.
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"
# Documentation is dead weight in a node image.
rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
	"$root"/var/cache/debconf/*-old "$root"/var/tmp/*
