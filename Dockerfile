# tailcut images: the operator (default target) and the latency-variability
# workload used by the demo and the kind e2e.
#
#   docker build -t tailcut:dev .                                   # operator
#   docker build --target workload -t tailcut-workload:dev .        # workload
#   make docker-build IMG=... WORKLOAD_IMG=...                      # both
#
# Both run as the distroless "nonroot" user (65532) on a static, shell-less
# base. The base images are pinned by version tag below; pin them by digest
# (image:tag@sha256:...) in a release pipeline that can resolve digests.
# No BuildKit-only syntax is used, so the classic builder works too.

ARG GO_VERSION=1.26.8
ARG RUST_VERSION=1.95.0
ARG DISTROLESS_IMAGE=gcr.io/distroless/static-debian12:nonroot

# The hedge account's Proxy-Wasm module (controllers/envoyconf/hedgeaccount).
FROM rust:${RUST_VERSION} AS hedge-account
WORKDIR /src
RUN rustup target add wasm32-unknown-unknown
# Crates first (the versions Cargo.lock pins), so that a code change does not
# download them again; Cargo reads a manifest only beside its library.
COPY controllers/envoyconf/hedgeaccount/Cargo.toml controllers/envoyconf/hedgeaccount/Cargo.lock ./
RUN mkdir src && touch src/lib.rs && cargo fetch --locked
COPY controllers/envoyconf/hedgeaccount/src/ src/
RUN cargo build --locked --release --target wasm32-unknown-unknown && \
    cp target/wasm32-unknown-unknown/release/tailcut_hedge_account.wasm /hedge-account.wasm

FROM golang:${GO_VERSION} AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-trimpath
# A module proxy can be passed in: --build-arg GOPROXY=...
ARG GOPROXY
# Dependencies first, so that a code change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY main.go ./
COPY api/ api/
COPY controllers/ controllers/
COPY test/workload/ test/workload/
# Set by buildx for multi-platform builds; empty means the builder's platform.
ARG TARGETOS
ARG TARGETARCH
RUN GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -ldflags="-s -w" -o /out/tailcut . && \
    GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -ldflags="-s -w" -o /out/workload ./test/workload

FROM ${DISTROLESS_IMAGE} AS workload
COPY --from=build /out/workload /workload
USER 65532:65532
EXPOSE 8090
ENTRYPOINT ["/workload"]
CMD ["--listen=:8090"]

# The operator is the last stage, so a plain `docker build .` builds it.
FROM ${DISTROLESS_IMAGE} AS operator
COPY --from=build /out/tailcut /tailcut
# The hedge account's Proxy-Wasm module: the proxies' init container copies it
# beside their bootstrap (tailcut bootstrap --hedge-account-module); the Istio
# publisher inlines it in the EnvoyFilter that puts it in the sidecars.
COPY --from=hedge-account /hedge-account.wasm /hedge-account.wasm
USER 65532:65532
# xDS (ADS gRPC), metrics, health probes.
EXPOSE 18000 8080 8081
ENTRYPOINT ["/tailcut"]
