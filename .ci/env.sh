# Sourced by .ci/setup, .ci/test and .ci/lab (not run on its own): every script, build, test and the lab run on the
# pinned Node.js 24 LTS, which .ci/node24.sh installs from the npm registry into the tools cache (Node 20, the
# system's, reached end of life in April 2026). node-gyp builds the native addons (better-sqlite3, pkcs11js)
# against that Node's own headers: nodejs.org, where node-gyp would fetch them, is not reachable.
FLEETD_NODE_DIR="$(bash "$(dirname "${BASH_SOURCE[0]}")/node24.sh")"
export FLEETD_NODE_DIR
export PATH="$FLEETD_NODE_DIR/bin:$PATH"
export npm_config_nodedir="$FLEETD_NODE_DIR"
