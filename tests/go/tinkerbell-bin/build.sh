#!/usr/bin/env bash
# Builds the real Tinkerbell from the github.com/tinkerbell/tinkerbell module pinned in go.mod/go.sum: `tinkerbell`
# (tink-server, tink-controller, Rufio, Smee, Tootles, SecondStar and the UI in one program) and `tink-agent` (the
# agent, cmd/agent: runs a Workflow's actions as containers), into a cache directory keyed by a hash of go.mod,
# go.sum, this script, the shared helper and the Go version. Prints the directory.
#   tests/go/tinkerbell-bin/build.sh     -> ~/.cache/fleetd/go-bin/tinkerbell-<key>
# FLEETD_GO_BIN_CACHE overrides the cache root. Concurrent callers wait for one build (flock).
# The CRDs and the agent protocol's .proto files are read from the module cache: see moddir.sh.
set -euo pipefail
cd "$(dirname "$0")"

PROGRAMS=(tinkerbell tink-agent)
command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 3; }

key=$( { go env GOVERSION GOOS GOARCH; cat go.mod go.sum build.sh ../gobin.sh; } | sha256sum | cut -c1-16)

build_into() {
  # The machines have 2 cores shared with other work: two parallel package builds, no more.
  export GOMAXPROCS=${GOMAXPROCS:-2}
  local start
  start=$(date +%s)
  echo "build.sh: building tinkerbell (github.com/tinkerbell/tinkerbell/cmd/tinkerbell $(go list -m -f '{{.Version}}' github.com/tinkerbell/tinkerbell))" >&2
  # As upstream's Makefile: CGO_ENABLED=0, no build tags (the `embedded` tag would link etcd and
  # kube-apiserver into the binary; the tests bring their own control plane). go.sum is committed: the
  # default -mod=readonly refuses to change it. -s -w: a smaller binary.
  CGO_ENABLED=0 go build -p 2 -trimpath -ldflags='-s -w' -o "$1/tinkerbell" github.com/tinkerbell/tinkerbell/cmd/tinkerbell >&2
  echo "build.sh: built tinkerbell in $(( $(date +%s) - start ))s" >&2
  start=$(date +%s)
  # The agent as upstream's Makefile builds it (`out/tink-agent`: CGO_ENABLED=0, -s -w), named as upstream names it.
  # Its github.com/jaypipes/ghw pseudo-version has no checksum-database entry; go.sum carries the hash from the
  # monorepo's own go.sum (see README.md), so this build needs no GONOSUMDB.
  CGO_ENABLED=0 go build -p 2 -trimpath -ldflags='-s -w' -o "$1/tink-agent" github.com/tinkerbell/tinkerbell/cmd/agent >&2
  echo "build.sh: built tink-agent in $(( $(date +%s) - start ))s" >&2
}
. ../gobin.sh
gobin_cached tinkerbell "$key" "${PROGRAMS[@]}"
