#!/bin/bash
# hack/kind-offline/runc-wrapper.sh — an OCI runtime in front of runc for hosts
# whose capability bounding set lacks CAP_SYS_RESOURCE (some VMs and sandboxes).
#
# There, runc fails on `docker run --privileged` ("unable to apply caps"),
# which is how kind runs its nodes, and inside a node it fails on every pod
# ("can't get final child's PID from pipe"), because the CRI asks for a
# negative oom_score_adj, which needs CAP_SYS_RESOURCE. This wrapper edits the
# OCI spec before runc reads it:
#   create/run: drop CAP_SYS_RESOURCE from the bundle's config.json, and raise
#               a process.oomScoreAdj below this process's own value to it
#               (lowering it is what needs the capability);
#   exec:       drop CAP_SYS_RESOURCE from the --process file.
# Every other call, and every argument, goes to runc unchanged.
#
# Installed by hack/kind-offline/docker-engine.sh as dockerd's default runtime
# (host) and by hack/kind-offline/node-image.sh as /usr/local/sbin/runc (node,
# ahead of /usr/sbin/runc on containerd's PATH). Needs jq. A normal machine
# does not need it, and the scripts install it only where the capability is
# missing.
set -euo pipefail

self=$(readlink -f "$0")
real=${TAILCUT_REAL_RUNC:-}
if [[ -z $real ]]; then
	for c in /usr/sbin/runc /usr/bin/runc /usr/local/bin/runc /sbin/runc; do
		if [[ -x $c && $(readlink -f "$c") != "$self" ]]; then
			real=$c
			break
		fi
	done
fi
[[ -n $real ]] || {
	echo "tailcut runc wrapper: no real runc found" >&2
	exit 127
}

# edit FILE JQ-FILTER: rewrite a JSON file in place with jq.
edit() {
	local file=$1 filter=$2 tmp
	[[ -f $file ]] || return 0
	tmp=$(mktemp "$file.XXXXXX")
	if jq "$filter" "$file" >"$tmp"; then
		cat "$tmp" >"$file"
	fi
	rm -f "$tmp"
}

drop_caps='def drop: if type == "array" then map(select(. != "CAP_SYS_RESOURCE")) else . end;'
own_oom=$(cat /proc/self/oom_score_adj 2>/dev/null || echo 0)

# Find the subcommand: the first argument that is not a global option.
args=("$@")
cmd="" i=0
while ((i < ${#args[@]})); do
	a=${args[i]}
	case $a in
	--root | --log | --log-format | --criu | --rootless) i=$((i + 2)) ;;
	-*) i=$((i + 1)) ;;
	*)
		cmd=$a
		break
		;;
	esac
done

case $cmd in
create | run)
	bundle=$PWD
	for ((j = i + 1; j < ${#args[@]}; j++)); do
		case ${args[j]} in
		--bundle | -b) bundle=${args[j + 1]:-$bundle} ;;
		--bundle=*) bundle=${args[j]#--bundle=} ;;
		esac
	done
	edit "$bundle/config.json" "$drop_caps
		if .process.capabilities then .process.capabilities |= with_entries(.value |= drop) else . end
		| if .process.oomScoreAdj != null and .process.oomScoreAdj < $own_oom then .process.oomScoreAdj = $own_oom else . end"
	;;
exec)
	for ((j = i + 1; j < ${#args[@]}; j++)); do
		case ${args[j]} in
		--process | -p) edit "${args[j + 1]:-}" "$drop_caps if .capabilities then .capabilities |= with_entries(.value |= drop) else . end" ;;
		--process=*) edit "${args[j]#--process=}" "$drop_caps if .capabilities then .capabilities |= with_entries(.value |= drop) else . end" ;;
		esac
	done
	;;
esac
exec "$real" "$@"
