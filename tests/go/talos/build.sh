#!/usr/bin/env bash
# Builds the Talos validation helpers (advread, advwrite, mkimage, validate-config) with Talos's own Go
# modules into a cache directory keyed by a hash of go.mod, go.sum, the Go sources and the Go version, so
# repeated runs (and CI) rebuild only when one of them changed. Prints the directory holding the binaries.
#   tests/go/talos/build.sh            -> ~/.cache/fleetd/go-bin/talos-<key>
# FLEETD_GO_BIN_CACHE overrides the cache root. Concurrent callers wait for one build (flock).
set -euo pipefail
cd "$(dirname "$0")"

PROGRAMS=(advread advwrite mkimage validate-config)
command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 3; }

key=$( { go env GOVERSION GOOS GOARCH; cat go.mod go.sum; find . -name '*.go' -print0 | sort -z | xargs -0 cat; } \
  | sha256sum | cut -c1-16)
root=${FLEETD_GO_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetd/go-bin}
out="$root/talos-$key"

have_all() { for p in "${PROGRAMS[@]}"; do [ -x "$out/$p" ] || return 1; done; }
if have_all; then echo "$out"; exit 0; fi

mkdir -p "$root"
exec 9>"$root/.talos.lock"
flock 9
if have_all; then echo "$out"; exit 0; fi

tmp=$(mktemp -d "$root/.talos-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
# go.sum is committed: the default -mod=readonly refuses to change it. -p 2: the machines have 2 cores.
CGO_ENABLED=0 go build -p 2 -trimpath -o "$tmp/" ./cmd/... >&2
echo "build.sh: built ${PROGRAMS[*]} in $(( $(date +%s) - start ))s -> $out" >&2
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
# keep the four newest builds (other worktrees may be using theirs), drop older ones
ls -1dt "$root"/talos-* 2>/dev/null | tail -n +5 | xargs -r rm -rf
echo "$out"
