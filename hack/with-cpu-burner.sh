#!/usr/bin/env bash
# Runs a command beside busy loops, so that a timing-sensitive test can be run
# on a loaded machine as well as on an idle one, and both results reported.
#
#   hack/with-cpu-burner.sh [-n LOOPS] [-t MAX_SECONDS] -- COMMAND...
#
# LOOPS busy loops (default: one per core) run for as long as COMMAND does,
# and never longer than MAX_SECONDS (default 3600): they are stopped by PID
# when COMMAND exits, or when the bound is reached. The exit status is
# COMMAND's.
set -euo pipefail

loops=$(nproc)
max=3600
while [[ $# -gt 0 ]]; do
	case "$1" in
	-n) loops=$2; shift 2 ;;
	-t) max=$2; shift 2 ;;
	--) shift; break ;;
	*) echo "usage: $0 [-n LOOPS] [-t MAX_SECONDS] -- COMMAND..." >&2; exit 2 ;;
	esac
done
if [[ $# -eq 0 ]]; then
	echo "usage: $0 [-n LOOPS] [-t MAX_SECONDS] -- COMMAND..." >&2
	exit 2
fi
if ! [[ $loops =~ ^[0-9]+$ && $max =~ ^[0-9]+$ && $max -gt 0 ]]; then
	echo "$0: -n and -t take whole numbers (-t above 0)" >&2
	exit 2
fi

pids=()
stop() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop EXIT
for ((i = 0; i < loops; i++)); do
	timeout "$max" sh -c 'while :; do :; done' &
	pids+=("$!")
done
echo "with-cpu-burner: $loops busy loop(s) (at most ${max}s) beside: $*" >&2
start=$SECONDS
rc=0
"$@" || rc=$?
echo "with-cpu-burner: the command exited $rc after $((SECONDS - start))s; stopping the busy loops" >&2
exit "$rc"
