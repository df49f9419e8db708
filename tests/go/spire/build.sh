#!/usr/bin/env bash
# Builds the real SPIRE (spire-server and spire-agent) from the github.com/spiffe/spire module pinned in
# go.mod/go.sum into a cache directory keyed by a hash of go.mod, go.sum, this script, the shared helper and the
# Go version. Prints the directory.
#   tests/go/spire/build.sh     -> ~/.cache/fleetd/go-bin/spire-<key>
# FLEETD_GO_BIN_CACHE overrides the cache root. Concurrent callers wait for one build (flock).
# A cold build takes many minutes on a 2-core machine (spire-server links every plugin SPIRE ships).
set -euo pipefail
cd "$(dirname "$0")"

PROGRAMS=(spire-server spire-agent)
command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 3; }
command -v gcc >/dev/null || { echo "build.sh: gcc is not installed (SPIRE's SQLite datastore needs cgo; .ci/setup installs build-essential)" >&2; exit 3; }

key=$( { go env GOVERSION GOOS GOARCH; cat go.mod go.sum build.sh ../gobin.sh; } | sha256sum | cut -c1-16)

build_into() {
  # The machines have 2 cores shared with other work: two parallel package builds, no more.
  export GOMAXPROCS=${GOMAXPROCS:-2}
  local v p start
  v=$(go list -m -f '{{.Version}}' github.com/spiffe/spire)
  for p in "${PROGRAMS[@]}"; do
    start=$(date +%s)
    echo "build.sh: building $p (github.com/spiffe/spire/cmd/$p $v)" >&2
    # CGO_ENABLED=1: the SQL datastore's sqlite3 dialect exists only with cgo (mattn/go-sqlite3). gittag without
    # the "v": SPIRE parses its version as semver at start and panics on "v1.13.3". go.sum is committed: the
    # default -mod=readonly refuses to change it. -s -w: smaller binaries.
    CGO_ENABLED=1 go build -p 2 -trimpath -ldflags="-s -w -X github.com/spiffe/spire/pkg/common/version.gittag=${v#v}" -o "$1/$p" "github.com/spiffe/spire/cmd/$p" >&2
    echo "build.sh: built $p in $(( $(date +%s) - start ))s" >&2
  done
}
. ../gobin.sh
gobin_cached spire "$key" "${PROGRAMS[@]}"
