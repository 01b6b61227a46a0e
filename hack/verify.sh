#!/usr/bin/env bash
# Regenerates everything that is generated and fails when the result differs
# from what is committed, naming the stale files.
set -euo pipefail
cd "$(dirname "$0")/.."

make -s generate manifests api-docs >/dev/null
go mod tidy
if ! git diff --exit-code --stat -- api config charts docs/api.md go.mod go.sum; then
	echo "verify: generated files are stale; run 'make generate manifests api-docs' and 'go mod tidy', then commit" >&2
	git diff -- api config charts docs/api.md go.mod go.sum | head -50 >&2
	exit 1
fi
untracked=$(git ls-files --others --exclude-standard -- api config charts docs/api.md)
if [ -n "$untracked" ]; then
	echo "verify: generated files are not committed: $untracked" >&2
	exit 1
fi
echo "verify: generated files are up to date"

# The Rust toolchain is pinned in three places that must agree: hack/tools.sh
# (tests, make hedge-account), the Dockerfile (images) and the offline rust
# stand-in's tag.
tools=$(sed -n 's/^RUST_VERSION=\([^[:space:]]*\).*/\1/p' hack/tools.sh)
docker=$(sed -n 's/^ARG RUST_VERSION=\([^[:space:]]*\).*/\1/p' Dockerfile)
image=$(sed -n 's/^RUST_IMAGE=rust:\([^[:space:]]*\).*/\1/p' hack/kind-offline/versions.sh)
if [[ -z $tools || $tools != "$docker" || $tools != "$image" ]]; then
	echo "verify: the Rust pins disagree: hack/tools.sh RUST_VERSION=$tools, Dockerfile RUST_VERSION=$docker, hack/kind-offline/versions.sh RUST_IMAGE=rust:$image" >&2
	exit 1
fi
echo "verify: the Rust pins agree ($tools)"
