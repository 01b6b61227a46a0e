#!/usr/bin/env bash
# hack/kind-offline/node/smoke-test.sh [NODE-IMAGE] — check an offline node
# image end to end: create a one-node kind cluster (hack/kind-config.yaml),
# write the static CNI config (node/cni.conflist) into the node, wait for the
# node to be Ready and every pod to run, `kind load` a locally built test
# image, serve HTTP from it behind a Service and fetch that by its cluster
# DNS name from a second pod; then delete the cluster (KO_KEEP=1 keeps it).
# Uses no registry. Output: progress on stderr, `kubectl get pods -A` on
# stdout.
set -euo pipefail
shopt -s inherit_errexit
KO_NAME=smoke-test
# shellcheck source=hack/kind-offline/lib.sh
. "$(dirname "$0")/../lib.sh"
exec 3>&1 1>&2

NODE_IMAGE=${1:-$KIND_NODE_IMAGE_OFFLINE}
CLUSTER=${KO_CLUSTER:-ko-test}
KIND=${KIND:-$CACHE/bin/kind-$KIND_VERSION}
KUBECTL=${KUBECTL:-$CACHE/bin/kubectl-$KUBERNETES_VERSION}
KCFG=$KO_CACHE/$CLUSTER.kubeconfig
TEST_IMAGE=tailcut.local/ko-smoke:1
[[ -x $KIND ]] || ko_die "no kind at $KIND (hack/kind-e2e.sh builds it)"
[[ -x $KUBECTL ]] || ko_die "no kubectl at $KUBECTL (hack/tools.sh kubectl)"
k() { "$KUBECTL" --kubeconfig "$KCFG" "$@"; }

WORK=$(mktemp -d)
cleanup() {
	rm -rf "$WORK"
	[[ ${KO_KEEP:-} == 1 ]] || {
		"$KIND" delete cluster --name "$CLUSTER" >/dev/null 2>&1
		docker rmi "$TEST_IMAGE" >/dev/null 2>&1
	}
	return 0
}
trap cleanup EXIT

# A static Go binary: `serve` answers HTTP on :8080, `get URL` resolves the
# URL's host (cluster DNS) and prints the body.
cat >"$WORK/main.go" <<'GO'
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "get" {
		u, err := url.Parse(os.Args[2])
		if err == nil {
			var addrs []string
			if addrs, err = net.LookupHost(u.Hostname()); err == nil {
				fmt.Println("resolved", u.Hostname(), addrs)
				var r *http.Response
				if r, err = http.Get(os.Args[2]); err == nil {
					b, _ := io.ReadAll(r.Body)
					fmt.Printf("%s %s", r.Status, b)
					return
				}
			}
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello from", os.Getenv("HOSTNAME")) })
	panic(http.ListenAndServe(":8080", nil))
}
GO
printf 'module ko.local/smoke\n\ngo 1.26\n' >"$WORK/go.mod"
(cd "$WORK" && GOTOOLCHAIN=local GOWORK=off GOFLAGS='' CGO_ENABLED=0 go build -trimpath -o smoke .) || ko_die "cannot build the test binary"
printf 'FROM scratch\nCOPY smoke /smoke\nENTRYPOINT ["/smoke"]\n' >"$WORK/Dockerfile"
docker build -q -t "$TEST_IMAGE" "$WORK" >/dev/null 2>"$WORK/build.err" || {
	cat "$WORK/build.err"
	ko_die "cannot build $TEST_IMAGE"
}

t0=$(ko_now)
"$KIND" delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
"$KIND" create cluster --name "$CLUSTER" --image "$NODE_IMAGE" --config "$REPO_ROOT/hack/kind-config.yaml" \
	--kubeconfig "$KCFG" || ko_die "kind create cluster failed"
docker exec -i "$CLUSTER-control-plane" sh -c 'cat >/etc/cni/net.d/10-tailcut.conflist' <"$KO_DIR/node/cni.conflist"
ko_took "kind create cluster" "$t0"
k wait --for=condition=Ready node --all --timeout=180s || ko_die "the node did not get Ready"
ko_took "node Ready" "$t0"
# The node is Ready before kubeadm's and kind's add-ons have pods: wait for
# the workloads first, then for every pod.
for w in kube-system/daemonset/kube-proxy kube-system/deployment/coredns local-path-storage/deployment/local-path-provisioner; do
	k -n "${w%%/*}" rollout status "${w#*/}" --timeout=240s || {
		k get pods -A -o wide
		ko_die "${w#*/} did not roll out"
	}
done
k wait --for=condition=Ready pod --all --all-namespaces --timeout=120s || {
	k get pods -A -o wide
	ko_die "not every pod is Ready"
}
ko_took "all pods Ready" "$t0"

"$KIND" load docker-image "$TEST_IMAGE" --name "$CLUSTER" || ko_die "kind load docker-image failed"
k create deployment ko-web --image="$TEST_IMAGE" -- /smoke serve
k expose deployment ko-web --port=80 --target-port=8080
k rollout status deployment/ko-web --timeout=120s || ko_die "the test deployment did not roll out"
k run ko-client --image="$TEST_IMAGE" --restart=Never --image-pull-policy=IfNotPresent --command -- /smoke get http://ko-web.default.svc.cluster.local/
k wait --for=jsonpath='{.status.phase}'=Succeeded pod/ko-client --timeout=120s || {
	k logs ko-client || true
	ko_die "the client pod could not reach the Service by its DNS name"
}
k logs ko-client

# kind's default StorageClass: local-path-provisioner and its helper image.
helper=$(docker exec "$CLUSTER-control-plane" awk '/- --helper-image$/ {getline; sub(/^ *- */, ""); print; exit}' /kind/manifests/default-storage.yaml)
[[ -n $helper ]] || ko_die "no --helper-image in the node's /kind/manifests/default-storage.yaml"
k apply -f - <<YAML
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: ko-pvc}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: ko-volume}
spec:
  restartPolicy: Never
  containers:
  - name: write
    image: $helper
    imagePullPolicy: IfNotPresent
    command: [sh, -c, 'echo stored > /data/f && cat /data/f']
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: ko-pvc}
YAML
k wait --for=jsonpath='{.status.phase}'=Succeeded pod/ko-volume --timeout=120s || {
	k get pvc,pv,pods -A
	ko_die "no volume from the default StorageClass"
}
k logs ko-volume
k get pods -A -o wide >&3
ko_took "smoke test" "$t0"
