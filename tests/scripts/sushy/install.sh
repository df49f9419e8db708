#!/usr/bin/env bash
# Installs a real Redfish BMC emulator for fleetd's tests and lab: OpenStack's sushy-tools (`sushy-emulator`)
# from PyPI in a venv on Python 3.12 (pyenv), cached under $FLEETD_CACHE/sushy/<version>-py<python>/ (default
# ~/.cache/fleetd). The TypeScript harness (tests/src/harness/redfish.ts) starts it with the fake driver (no
# libvirt, no OpenStack: the emulated systems live in the emulator's memory) on a loopback port. Safe to run
# concurrently (flock) and again (a no-op when installed). Prints the venv directory on stdout.
set -euo pipefail

SUSHY_VERSION="${SUSHY_VERSION:-2.2.0}"
PYTHON_VERSION="${SUSHY_PYTHON:-3.12}"
CACHE_ROOT="${FLEETD_CACHE:-$HOME/.cache/fleetd}/sushy"
DIR="$CACHE_ROOT/$SUSHY_VERSION-py$PYTHON_VERSION"

log() { printf '\033[1m[sushy-install]\033[0m %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.lock-$SUSHY_VERSION-py$PYTHON_VERSION"
flock 9

ready() { [ -f "$DIR/READY" ] && [ -x "$DIR/venv/bin/sushy-emulator" ]; }
if ready; then echo "$DIR/venv"; exit 0; fi

# shellcheck source=../find-python.sh
. "$(dirname "${BASH_SOURCE[0]}")/../find-python.sh"

PY="$(find_python)"
log "creating venv with $("$PY" --version) and installing sushy-tools==$SUSHY_VERSION from PyPI"
rm -rf "$DIR"
mkdir -p "$DIR"
"$PY" -m venv "$DIR/venv"
"$DIR/venv/bin/pip" install -q --disable-pip-version-check --upgrade pip >&2
# bcrypt: the emulator's HTTP basic auth reads an htpasswd file (passlib-style bcrypt hashes); the harness
# writes that file with this venv's bcrypt.
"$DIR/venv/bin/pip" install -q --disable-pip-version-check "sushy-tools==$SUSHY_VERSION" >&2
"$DIR/venv/bin/sushy-emulator" --help >/dev/null 2>&1 || die "sushy-emulator does not run from $DIR/venv"
touch "$DIR/READY"
echo "$DIR/venv"
