#!/usr/bin/env bash
# Prints the module-cache directory of the github.com/tinkerbell/tinkerbell version pinned in go.mod
# (downloading it through the Go module proxy if needed). The tests read the v1alpha1 CRDs
# (crd/bases/v1alpha1/*.yaml) and the agent protocol (pkg/proto/*.proto) from there; no copies are committed.
set -euo pipefail
cd "$(dirname "$0")"
command -v go >/dev/null || { echo "moddir.sh: go is not installed" >&2; exit 3; }
dir=$(go mod download -json github.com/tinkerbell/tinkerbell | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
[ -n "$dir" ] && [ -d "$dir/crd/bases/v1alpha1" ] || { echo "moddir.sh: no module directory for github.com/tinkerbell/tinkerbell" >&2; exit 1; }
echo "$dir"
