#!/usr/bin/env bash
# Builds the Talos validation helpers (advread, advwrite, gen-secrets, mkimage, validate-config) with Talos's own Go
# modules into a cache directory keyed by a hash of go.mod, go.sum, the Go sources and the Go version, so
# repeated runs (and CI) rebuild only when one of them changed. Prints the directory holding the binaries.
#   tests/go/talos/build.sh            -> ~/.cache/fleetd/go-bin/talos-<key>
# FLEETD_GO_BIN_CACHE overrides the cache root. Concurrent callers wait for one build (flock).
set -euo pipefail
cd "$(dirname "$0")"

PROGRAMS=(advread advwrite gen-secrets mkimage validate-config)
command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 3; }

key=$( { go env GOVERSION GOOS GOARCH; cat go.mod go.sum ../gobin.sh; find . -name '*.go' -print0 | sort -z | xargs -0 cat; } \
  | sha256sum | cut -c1-16)
# go.sum is committed: the default -mod=readonly refuses to change it. -p 2: the machines have 2 cores.
build_into() { CGO_ENABLED=0 go build -p 2 -trimpath -o "$1/" ./cmd/... >&2; }
. ../gobin.sh
gobin_cached talos "$key" "${PROGRAMS[@]}"
