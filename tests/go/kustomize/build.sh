#!/usr/bin/env bash
# Builds the real kustomize (sigs.k8s.io/kustomize/kustomize/v5, pinned in go.mod/go.sum) into a cache directory
# keyed by a hash of go.mod, go.sum, this script and the Go version. Prints the directory.
#   tests/go/kustomize/build.sh   -> ~/.cache/fleetd/go-bin/kustomize-<key>
# It renders the plugins' deploy/ bases and overlays (tests/src/deploy, `pnpm -s deploy:render`).
set -euo pipefail
cd "$(dirname "$0")"
PROGRAMS=(kustomize)
command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 3; }
key=$( { go env GOVERSION GOOS GOARCH; cat go.mod go.sum build.sh ../gobin.sh; } | sha256sum | cut -c1-16)
build_into() {
  export GOMAXPROCS=${GOMAXPROCS:-2}
  # go.sum is committed: the default -mod=readonly refuses to change it. -s -w: smaller binaries.
  CGO_ENABLED=0 go build -p 2 -trimpath -ldflags="-s -w" \
    -o "$1/kustomize" sigs.k8s.io/kustomize/kustomize/v5 >&2
}
. ../gobin.sh
gobin_cached kustomize "$key" "${PROGRAMS[@]}"
