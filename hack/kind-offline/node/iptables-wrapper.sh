#!/bin/sh
# hack/kind-offline/node/iptables-wrapper.sh — installed in the offline
# kube-proxy image as iptables, iptables-save, iptables-restore and their ip6
# twins. kube-proxy must program the same iptables backend (legacy or nft)
# as the node's kubelet, or its rules are ignored. On the first call this
# picks the backend the node already uses, points every name at that
# backend's xtables multi-binary, and re-runs the command; later calls go
# straight to the real binary.
set -eu
cmd=$(basename "$0")

has_rules() { # has_rules legacy|nft: the number of rules in that backend
	{ "xtables-$1-multi" iptables-save || true; "xtables-$1-multi" ip6tables-save || true; } 2>/dev/null | grep -c '^-' || true
}

# The kubelet leaves KUBE-IPTABLES-HINT (newer) or KUBE-KUBELET-CANARY
# (older) in the mangle table of the backend it uses; failing that, the
# backend with more rules wins (kind's entrypoint decides the same way).
if { xtables-nft-multi iptables-save -t mangle; xtables-nft-multi ip6tables-save -t mangle; } 2>/dev/null | grep -qE 'KUBE-IPTABLES-HINT|KUBE-KUBELET-CANARY'; then
	mode=nft
elif { xtables-legacy-multi iptables-save -t mangle; xtables-legacy-multi ip6tables-save -t mangle; } 2>/dev/null | grep -qE 'KUBE-IPTABLES-HINT|KUBE-KUBELET-CANARY'; then
	mode=legacy
elif [ "$(has_rules legacy)" -gt "$(has_rules nft)" ]; then
	mode=legacy
else
	mode=nft
fi

for c in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
	ln -sf "xtables-$mode-multi" "/usr/sbin/$c.tailcut-new"
	mv -f "/usr/sbin/$c.tailcut-new" "/usr/sbin/$c"
done
echo "iptables-wrapper: using iptables-$mode" >&2
exec "/usr/sbin/$cmd" "$@"
