#!/usr/bin/env bash
# The lab's OS disk image as the provision Workflow's `install-talos` action (image2disk) fetches it: the lab OS
# disk of the machine kit (tests/scripts/vm/build.sh `labos/disk.img`: a Talos-like GPT — EFI, BIOS, BOOT, META
# 1 MiB, STATE — written by Talos's own partitioning code, tests/go/talos mkimage, whose ESP holds the lab OS UKI
# signed with the lab's Talos key; META all zero, as Talos formats it), served compressed as a site serves a
# Talos metal image (`.raw.gz`, image2disk's COMPRESSED=true). Cached under $FLEETD_CACHE/lab-os/<key>/ (default
# ~/.cache/fleetd), keyed by the raw image's SHA-256 and this script; prints the directory:
#   lab-os.raw      the raw image (a copy: the kit's may be replaced when the kit is rebuilt)
#   lab-os.raw.gz   gzip -9n of it (no name, no time stamp: the same bytes on every machine)
#   SHA256SUMS      both files' SHA-256 (sha256sum format)
#   layout.json     the GPT as sgdisk reads it: sector size, partitions (number, name, first/last sector, type)
# .ci/setup runs it after the kit; tests find the directory with it (a cache hit then).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
CACHE_ROOT="${FLEETD_CACHE:-$HOME/.cache/fleetd}/lab-os"
log() { printf '\033[1m[lab-os]\033[0m %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
for t in sgdisk gzip sha256sum; do command -v "$t" >/dev/null || die "$t is missing (run .ci/setup)"; done

KIT="$(bash "$REPO/tests/scripts/vm/build.sh" | tail -n 1)"
RAW="$KIT/labos/disk.img"
[ -f "$RAW" ] || die "the machine kit at $KIT has no labos/disk.img"
key=$( { sha256sum <"$RAW"; cat "$HERE/build.sh"; } | sha256sum | cut -c1-16)
OUT="$CACHE_ROOT/$key"
if [ -f "$OUT/READY" ]; then echo "$OUT"; exit 0; fi

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.lock"
flock 9
if [ -f "$OUT/READY" ]; then echo "$OUT"; exit 0; fi
start=$(date +%s)
tmp="$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cp "$RAW" "$tmp/lab-os.raw"
gzip -9n <"$tmp/lab-os.raw" >"$tmp/lab-os.raw.gz"
(cd "$tmp" && sha256sum lab-os.raw lab-os.raw.gz >SHA256SUMS)

# The layout as sgdisk (gdisk, an implementation independent of Talos's) reads it.
sgdisk --verify "$tmp/lab-os.raw" >/dev/null 2>&1 || die "sgdisk --verify refuses the lab OS image"
sector="$(sgdisk -p "$tmp/lab-os.raw" | awk '/^Sector size \(logical\)/ {print $4; exit}')"
[ -n "$sector" ] || die "sgdisk prints no sector size"
{
  printf '{"sectorSize":%s,"size":%s,"partitions":[' "$sector" "$(stat -c %s "$tmp/lab-os.raw")"
  sep=""
  while read -r num first last _ _ _ name; do
    type="$(sgdisk -i "$num" "$tmp/lab-os.raw" | awk '/^Partition GUID code:/ {print $4; exit}')"
    printf '%s{"number":%s,"name":"%s","firstSector":%s,"lastSector":%s,"type":"%s"}' "$sep" "$num" "$name" "$first" "$last" "$type"
    sep=","
  done < <(sgdisk -p "$tmp/lab-os.raw" | awk 'f && NF >= 7 {print $1, $2, $3, $4, $5, $6, $7} /^Number/ {f=1}')
  printf ']}\n'
} >"$tmp/layout.json"
grep -q '"name":"META"' "$tmp/layout.json" || die "the lab OS image has no META partition: $(cat "$tmp/layout.json")"

touch "$tmp/READY"
rm -rf "$OUT"
mv "$tmp" "$OUT"
trap - EXIT
log "built in $(($(date +%s) - start))s -> $OUT"
ls -1dt "$CACHE_ROOT"/*/ 2>/dev/null | tail -n +4 | xargs -r rm -rf
echo "$OUT"
