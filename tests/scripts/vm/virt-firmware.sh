#!/usr/bin/env bash
# Installs virt-firmware (`virt-fw-vars`: edits OVMF variable stores; not packaged in Debian 12) from PyPI in a
# venv on Python 3.12 (pyenv), cached under $FLEETD_CACHE/vm/virt-firmware-<version>-py<python>/ (default
# ~/.cache/fleetd). The lab machine kit (build.sh) uses it to enrol the lab's Secure Boot keys. Safe to run
# concurrently (flock) and again (a no-op when installed). Prints the venv directory on stdout.
set -euo pipefail

VFW_VERSION="${VIRT_FIRMWARE_VERSION:-26.10}"
PYTHON_VERSION="${VIRT_FIRMWARE_PYTHON:-3.12}"
CACHE_ROOT="${FLEETD_CACHE:-$HOME/.cache/fleetd}/vm"
DIR="$CACHE_ROOT/virt-firmware-$VFW_VERSION-py$PYTHON_VERSION"

log() { printf '\033[1m[virt-firmware]\033[0m %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.lock-virt-firmware-$VFW_VERSION-py$PYTHON_VERSION"
flock 9

ready() { [ -f "$DIR/READY" ] && [ -x "$DIR/venv/bin/virt-fw-vars" ]; }
if ready; then echo "$DIR/venv"; exit 0; fi

# shellcheck source=../find-python.sh
. "$(dirname "${BASH_SOURCE[0]}")/../find-python.sh"

PY="$(find_python)"
log "creating venv with $("$PY" --version) and installing virt-firmware==$VFW_VERSION from PyPI"
rm -rf "$DIR"
mkdir -p "$DIR"
"$PY" -m venv "$DIR/venv"
"$DIR/venv/bin/pip" install -q --disable-pip-version-check "virt-firmware==$VFW_VERSION" >&2
"$DIR/venv/bin/virt-fw-vars" --help >/dev/null 2>&1 || die "virt-fw-vars does not run from $DIR/venv"
touch "$DIR/READY"
echo "$DIR/venv"
