#!/usr/bin/env bash
# hack/kind-offline/docker-engine.sh — make sure a Docker engine answers, and
# that it can run kind's privileged nodes on this host.
#
#   hack/kind-offline/docker-engine.sh          ensure; exit 1 when impossible
#   hack/kind-offline/docker-engine.sh check    exit 0 when an engine answers or
#                                               can be started here, else 1
#
# When `docker info` fails and this is root on Debian, it installs docker.io
# (with apt-get, when dockerd is missing) and starts dockerd in the background
# (log: $TAILCUT_CACHE/kind-offline/dockerd.log). dockerd keeps running after
# the script; it is the machine's engine, like a systemd-started one.
#
# When the capability bounding set lacks CAP_SYS_RESOURCE, `docker run
# --privileged` fails; it then installs runc-wrapper.sh as dockerd's default
# runtime (/etc/docker/daemon.json, applied with SIGHUP) and says so.
set -euo pipefail
KO_NAME=docker-engine
# shellcheck source=hack/kind-offline/lib.sh
. "$(dirname "$0")/lib.sh"

WRAPPER=/usr/local/sbin/tailcut-runc

has_cap_sys_resource() {
	local bnd
	bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
	(((16#$bnd >> 24) & 1))
}

can_start() {
	[[ $(id -u) == 0 ]] && { command -v dockerd >/dev/null || command -v apt-get >/dev/null; }
}

start_dockerd() {
	can_start || ko_die "no Docker engine answers, and this user cannot start one (needs root and dockerd or apt-get)"
	ko_need dockerd docker.io
	ko_need docker docker.io
	mkdir -p "$KO_CACHE"
	ko_log "starting dockerd (log: $KO_CACHE/dockerd.log)"
	# Its own session: stopping a run by its process group (kill -- -PGID)
	# must not take the engine, and the kept cluster, down with it.
	setsid nohup dockerd >"$KO_CACHE/dockerd.log" 2>&1 &
	local i
	for ((i = 0; i < 60; i++)); do
		docker info >/dev/null 2>&1 && return 0
		sleep 1
	done
	tail -20 "$KO_CACHE/dockerd.log" >&2
	ko_die "dockerd did not answer within 60s"
}

install_wrapper() {
	local rt
	rt=$(docker info --format '{{.DefaultRuntime}}')
	if [[ $rt == tailcut-runc ]] && cmp -s "$KO_DIR/runc-wrapper.sh" "$WRAPPER"; then
		ko_log "this host lacks CAP_SYS_RESOURCE; dockerd already runs containers through $WRAPPER"
		return
	fi
	[[ $(id -u) == 0 ]] || ko_die "this host lacks CAP_SYS_RESOURCE, and installing the runc wrapper needs root"
	ko_need jq jq
	ko_log "this host lacks CAP_SYS_RESOURCE (so --privileged fails): installing $WRAPPER as dockerd's default runtime"
	install -m 0755 "$KO_DIR/runc-wrapper.sh" "$WRAPPER"
	mkdir -p /etc/docker
	local conf=/etc/docker/daemon.json cur
	cur=$(cat "$conf" 2>/dev/null || echo '{}')
	jq --arg p "$WRAPPER" '.runtimes["tailcut-runc"] = {path: $p} | ."default-runtime" = "tailcut-runc"' <<<"$cur" >"$conf.tmp"
	mv -f "$conf.tmp" "$conf"
	local pid
	pid=$(pidof dockerd || true)
	[[ -n $pid ]] || ko_die "cannot find dockerd's PID to reload $conf"
	kill -HUP $pid
	local i
	for ((i = 0; i < 20; i++)); do
		[[ $(docker info --format '{{.DefaultRuntime}}') == tailcut-runc ]] && return
		sleep 0.5
	done
	ko_die "dockerd did not take tailcut-runc as its default runtime after SIGHUP"
}

case ${1:-ensure} in
check)
	docker info >/dev/null 2>&1 || can_start
	exit
	;;
ensure) ;;
*) ko_die "usage: $0 [ensure|check]" ;;
esac

docker info >/dev/null 2>&1 || start_dockerd
if has_cap_sys_resource; then
	ko_log "CAP_SYS_RESOURCE is in the bounding set: runc runs unwrapped"
else
	install_wrapper
fi
if [[ $(stat -fc %T /sys/fs/cgroup) != cgroup2fs ]]; then
	ko_log "this host has cgroup v1: the kind config sets the kubelet's failCgroupV1: false"
fi
docker version --format 'Docker engine {{.Server.Version}} ready' >&2
