#!/bin/sh
# The build stage of tink-action/Dockerfile, in two steps so the dependency layer is cached:
#   build.sh deps    install what @fleetd/tink-action and its workspace dependencies need (lockfile, no scripts:
#                    the native addons, optional peers of @fleetd/platform, are never installed, built or bundled)
#   build.sh build   compile @fleetd/verify, @fleetd/platform and tink-action, bundle them into dist/bundle/fleetd-tink-action.mjs, and
#                    check that the bundle runs
# Run from the workspace root. tink-action/src/dockerfile.it.test.ts runs it the same way, offline.
set -eu
case "${1:-}" in
  deps)
    pnpm install --frozen-lockfile --ignore-scripts --filter "@fleetd/tink-action..."
    ;;
  build)
    pnpm --filter @fleetd/tink-action exec tsc -b
    node tink-action/scripts/bundle.mjs
    node tink-action/dist/bundle/fleetd-tink-action.mjs --help >/dev/null
    ;;
  *)
    echo "usage: build.sh deps|build" >&2
    exit 2
    ;;
esac
