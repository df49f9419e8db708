#!/usr/bin/env bash
# Builds the real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) from the Go
# modules pinned in go.mod/go.sum into a cache directory keyed by a hash of go.mod, go.sum, this script and
# the Go version, so repeated runs (and CI) rebuild only when one of them changed. Prints the directory.
#   tests/go/k8s/build.sh            -> ~/.cache/fleetd/go-bin/k8s-<key>
# FLEETD_GO_BIN_CACHE overrides the cache root. Concurrent callers wait for one build (flock).
# A cold build takes many minutes on a 2-core machine (kube-apiserver alone is a large program).
set -euo pipefail
cd "$(dirname "$0")"

# binary name -> Go package (each is its module's own main package, declared with `tool` in go.mod)
declare -A PKG=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
)
PROGRAMS=(etcd kube-apiserver kube-controller-manager)
command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 3; }

key=$( { go env GOVERSION GOOS GOARCH; cat go.mod go.sum build.sh ../gobin.sh; } | sha256sum | cut -c1-16)

build_into() {
  # The machines have 2 cores shared with other work: two parallel package builds, no more.
  export GOMAXPROCS=${GOMAXPROCS:-2}
  # The Kubernetes binaries report the version in go.mod (what `make` would stamp from git).
  local kver kminor v kflags flags p start
  kver=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
  kminor=${kver#v*.}; kminor=${kminor%%.*}
  v=k8s.io/component-base/version
  kflags="-X $v.gitVersion=$kver -X $v.gitMajor=1 -X $v.gitMinor=$kminor -X $v.gitTreeState=clean"
  for p in "${PROGRAMS[@]}"; do
    start=$(date +%s)
    echo "build.sh: building $p (${PKG[$p]})" >&2
    flags='-s -w'
    [ "$p" = etcd ] || flags="$flags $kflags"
    # go.sum is committed: the default -mod=readonly refuses to change it. -s -w: smaller binaries.
    CGO_ENABLED=0 go build -p 2 -trimpath -ldflags="$flags" -o "$1/$p" "${PKG[$p]}" >&2
    echo "build.sh: built $p in $(( $(date +%s) - start ))s" >&2
  done
}
. ../gobin.sh
gobin_cached k8s "$key" "${PROGRAMS[@]}"
