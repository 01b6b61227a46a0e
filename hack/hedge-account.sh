#!/usr/bin/env bash
# hack/hedge-account.sh — build and test the hedge account's Proxy-Wasm module
# (controllers/envoyconf/hedgeaccount, Rust), with the toolchain pinned in
# hack/tools.sh.
#
#   hack/hedge-account.sh build [OUT]   build the module; copy it to OUT, or
#                                       print its path in the cache
#   hack/hedge-account.sh test          the account's unit tests (cargo test)
#
# Cargo's output goes to ${TAILCUT_CACHE:-$HOME/.cache/tailcut}/cargo-target/<checkout>,
# never into the repository; the crates are the ones Cargo.lock pins.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CRATE=$ROOT/controllers/envoyconf/hedgeaccount
CACHE=${TAILCUT_CACHE:-${HOME:?HOME is not set}/.cache/tailcut}
CARGO=$("$ROOT/hack/tools.sh" cargo)
# One target directory per checkout: Cargo judges the module fresh by the
# source files of its last build, so two checkouts sharing one would each get
# the module built from the other's sources.
export CARGO_TARGET_DIR=$CACHE/cargo-target/$(printf %s "$ROOT" | sha256sum | cut -c1-16)
# The toolchain's cargo runs its own rustc, not the machine's default.
export RUSTC=${CARGO%/cargo}/rustc
TARGET=wasm32-unknown-unknown
MODULE=$CARGO_TARGET_DIR/$TARGET/release/tailcut_hedge_account.wasm

case ${1:-} in
build)
	"$CARGO" build --quiet --locked --release --target "$TARGET" --manifest-path "$CRATE/Cargo.toml" >&2
	if [[ -n ${2:-} ]]; then
		# Under another name first, so that a reader never loads half a file.
		cp "$MODULE" "$2.$$" && mv -f "$2.$$" "$2"
	else
		printf '%s\n' "$MODULE"
	fi
	;;
test)
	"$CARGO" test --locked --manifest-path "$CRATE/Cargo.toml"
	;;
*)
	sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
