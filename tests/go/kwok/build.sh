#!/usr/bin/env bash
# Builds KWOK's `kwok` controller (sigs.k8s.io/kwok/cmd/kwok, pinned in go.mod/go.sum) into a cache directory
# keyed by a hash of go.mod, go.sum, this script and the Go version. Prints the directory.
#   tests/go/kwok/build.sh   -> ~/.cache/fleetd/go-bin/kwok-<key>
# KWOK marks the Nodes it manages Ready and moves pods bound to them through their lifecycle (Running, then
# gone on deletion), so retirement is tested with real evictions against a real API server and no kubelet.
set -euo pipefail
cd "$(dirname "$0")"
PROGRAMS=(kwok)
command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 3; }
key=$( { go env GOVERSION GOOS GOARCH; cat go.mod go.sum build.sh ../gobin.sh; } | sha256sum | cut -c1-16)
build_into() {
  export GOMAXPROCS=${GOMAXPROCS:-2}
  local v
  v=$(go list -m -f '{{.Version}}' sigs.k8s.io/kwok)
  # go.sum is committed: the default -mod=readonly refuses to change it. -s -w: smaller binaries.
  CGO_ENABLED=0 go build -p 2 -trimpath -ldflags="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$v" -o "$1/kwok" sigs.k8s.io/kwok/cmd/kwok >&2
}
. ../gobin.sh
gobin_cached kwok "$key" "${PROGRAMS[@]}"
