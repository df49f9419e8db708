#!/usr/bin/env bash
# Builds the lab's machine kit: everything a lab machine (QEMU + OVMF + swtpm, tests/src/vm/) boots with, cached
# under $FLEETD_CACHE/vm/kit-<key>/ (default ~/.cache/fleetd) and reused while its inputs are unchanged. Prints
# the kit directory on stdout. Safe to run concurrently (flock) and again (a no-op when built).
#
#   keys/       the lab's own Secure Boot keys (openssl RSA-2048, self-signed): pk, kek, hookos (db key that signs
#               HookOS: the `hookos` profile's authority), talos (db key that signs the installed OS: the `talos`
#               profile's), rogue (a key no firmware of the lab lists); owner.guid (the owner GUID of the entries)
#   vars/       OVMF variable stores: secureboot.fd (PK, KEK, db = hookos + talos, Secure Boot on) and
#               secureboot-off.fd (the same keys, Secure Boot turned off as in the firmware's setup menu)
#   site/       the same certificates as the policy's site authority sets (lab-pk, lab-kek, lab-db = talos,
#               hookos-signer = hookos), for the attestation server's --site-authorities
#   hookos/     the lab HookOS, a unified kernel image (systemd's stub + Debian's kernel + a busybox initramfs
#               whose /init is hookos-init.sh): hookos.efi signed with the HookOS key, hookos-rogue.efi signed
#               with the rogue key, hookos-unsigned.efi
#   runtime/    the read-only share the HookOS mounts over virtio-9p: Node.js 24 (.ci/node24.sh), lldpd and
#               lldpcli (Debian's, for the action's LLDP claim), and the libraries they load
#   kernel/     the kernel version and its package name
#
# Inputs: Debian's linux-image (the version linux-image-amd64 depends on, fetched with `apt-get download`),
# busybox-static, systemd-boot-efi (the stub), ovmf (the empty variable store), lldpd, the pinned Node.js 24,
# virt-firmware from PyPI (virt-firmware.sh), and the files of this directory.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
CACHE_ROOT="${FLEETD_CACHE:-$HOME/.cache/fleetd}/vm"
STUB=/usr/lib/systemd/boot/efi/linuxx64.efi.stub
OVMF_VARS=/usr/share/OVMF/OVMF_VARS_4M.fd
# Modules the HookOS loads (with their dependencies, resolved from the modules' own .modinfo): the virtio PCI
# transport, the NIC, the disk, and 9p for the runtime share.
MODULES=(virtio_pci virtio_net virtio_blk 9pnet_virtio 9p)

log() { printf '\033[1m[vm-kit]\033[0m %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

for t in qemu-system-x86_64 sbsign sbattach objcopy objdump mkfs.vfat mcopy cpio swtpm lldpd; do
  command -v "$t" >/dev/null || die "$t is missing (run .ci/setup)"
done
[ -f "$STUB" ] || die "$STUB is missing (systemd-boot-efi; run .ci/setup)"
[ -f "$OVMF_VARS" ] || die "$OVMF_VARS is missing (ovmf; run .ci/setup)"
[ -x /bin/busybox ] && /bin/busybox --list | grep -qx udhcpc || die "busybox-static is missing (run .ci/setup)"

# The kernel package: the one Debian's linux-image-amd64 currently depends on.
kernel_pkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'; }
KPKG="$(kernel_pkg)"
if [ -z "$KPKG" ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  KPKG="$(kernel_pkg)"
fi
[ -n "$KPKG" ] || die "apt-cache knows no linux-image-amd64"
KVER_PKG="$(apt-cache show "$KPKG" 2>/dev/null | awk '/^Version:/ {print $2; exit}')"

VFW="$(bash "$HERE/virt-firmware.sh")"
NODE_DIR="$(bash "$REPO/.ci/node24.sh")"
ver() { dpkg-query -W -f='${Version}' "$1"; }
KEY="$(
  {
    echo "$KPKG $KVER_PKG"
    for p in busybox-static systemd-boot-efi ovmf lldpd libc6; do echo "$p $(ver "$p")"; done
    "$NODE_DIR/bin/node" --version
    "$VFW/bin/pip" show virt-firmware 2>/dev/null | awk '/^Version:/ {print $2}'
    cat "$HERE/build.sh" "$HERE/hookos-init.sh" "$HERE/udhcpc.sh"
  } | sha256sum | cut -c1-16
)"
OUT="$CACHE_ROOT/kit-$KEY"
mkdir -p "$CACHE_ROOT"
if [ -f "$OUT/READY" ]; then echo "$OUT"; exit 0; fi
exec 9>"$CACHE_ROOT/.kit.lock"
flock 9
if [ -f "$OUT/READY" ]; then echo "$OUT"; exit 0; fi

start=$(date +%s)
tmp="$(mktemp -d "$CACHE_ROOT/.kit-build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"/{keys,vars,site,hookos,runtime/bin,runtime/lib/x86_64-linux-gnu,runtime/lib64,runtime/etc,kernel,work}
W="$tmp/work"

# ---- the kernel: Debian's package, its signature stripped (the lab signs the whole UKI with its own key) ----
log "kernel: apt-get download $KPKG ($KVER_PKG)"
(cd "$W" && apt-get download -q "$KPKG" >/dev/null 2>&1) || die "apt-get download $KPKG failed"
dpkg-deb -x "$W"/"$KPKG"_*.deb "$W/k"
KREL="${KPKG#linux-image-}"
sbattach --remove "$W/k/boot/vmlinuz-$KREL" >/dev/null 2>&1 || true
cp "$W/k/boot/vmlinuz-$KREL" "$W/vmlinuz"
printf '%s\n' "$KREL" >"$tmp/kernel/release"
printf '%s %s\n' "$KPKG" "$KVER_PKG" >"$tmp/kernel/package"

# ---- the initramfs: busybox, /init, the modules in dependency order ----
log "initramfs: busybox, /init, modules ${MODULES[*]}"
R="$W/initramfs"
mkdir -p "$R"/{bin,modules,proc,sys,dev,tmp,run}
cp /bin/busybox "$R/bin/busybox"
install -m 0755 "$HERE/hookos-init.sh" "$R/init"
install -m 0755 "$HERE/udhcpc.sh" "$R/udhcpc.sh"
MODDIR="$W/k/lib/modules/$KREL"
modpath() { find "$MODDIR/kernel" -name "$1.ko" -print -quit; }
moddeps() { objcopy -O binary --only-section=.modinfo "$1" /dev/stdout | tr '\0' '\n' | sed -n 's/^depends=//p' | tr ',' ' '; }
declare -A seen=()
order=()
visit() {
  local m=$1 f d
  [ -n "${seen[$m]:-}" ] && return 0
  seen[$m]=1
  f="$(modpath "$m")"
  [ -n "$f" ] || die "module $m is not in $KPKG"
  for d in $(moddeps "$f"); do visit "$d"; done
  cp "$f" "$R/modules/$m.ko"
  order+=("$m")
}
for m in "${MODULES[@]}"; do visit "$m"; done
printf '%s\n' "${order[@]}" >"$R/modules/order"
(cd "$R" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet --reproducible | gzip -9n >"$W/initrd.img")

# ---- the UKI: systemd's stub with .osrel, .cmdline, .linux, .initrd (what ukify does, with objcopy) ----
log "UKI: $(basename "$STUB") + vmlinuz-$KREL + initramfs ($(du -h "$W/initrd.img" | cut -f1))"
printf 'NAME="fleetd lab HookOS"\nID=fleetd-lab-hookos\nVERSION_ID=%s\n' "$KEY" >"$W/osrel"
# Serial console, quiet kernel, and no reboot loop: a panic powers off through QEMU's -no-reboot.
printf 'console=ttyS0,115200 loglevel=4 panic=-1' >"$W/cmdline"
align="$((16#$(objdump -p "$STUB" | awk '/SectionAlignment/ {print $2}')))"
last="$(objdump -h "$STUB" | awk '$1 ~ /^[0-9]+$/ {vma=$4; size=$3} END {print vma, size}')"
offs=$((16#${last% *} + 16#${last#* }))
args=()
for s in osrel:"$W/osrel" cmdline:"$W/cmdline" linux:"$W/vmlinuz" initrd:"$W/initrd.img"; do
  name=${s%%:*}
  file=${s#*:}
  offs=$(((offs + align - 1) / align * align))
  args+=(--add-section ".$name=$file" --change-section-vma ".$name=$(printf 0x%x "$offs")")
  offs=$((offs + $(stat -Lc%s "$file")))
done
objcopy "${args[@]}" "$STUB" "$tmp/hookos/hookos-unsigned.efi"

# ---- the lab's Secure Boot keys and the signed images ----
log "Secure Boot keys: PK, KEK, db (HookOS, Talos), an unlisted key"
for k in pk:"fleetd lab PK" kek:"fleetd lab KEK" hookos:"fleetd lab HookOS signing key" talos:"fleetd lab Talos signing key" rogue:"fleetd lab unlisted signing key"; do
  n=${k%%:*}
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 -subj "/O=fleetd lab/CN=${k#*:}" \
    -keyout "$tmp/keys/$n.key" -out "$tmp/keys/$n.crt" 2>/dev/null
  chmod 0600 "$tmp/keys/$n.key"
done
cat /proc/sys/kernel/random/uuid >"$tmp/keys/owner.guid"
GUID="$(cat "$tmp/keys/owner.guid")"
sbsign --key "$tmp/keys/hookos.key" --cert "$tmp/keys/hookos.crt" --output "$tmp/hookos/hookos.efi" "$tmp/hookos/hookos-unsigned.efi" >/dev/null 2>&1
sbsign --key "$tmp/keys/rogue.key" --cert "$tmp/keys/rogue.crt" --output "$tmp/hookos/hookos-rogue.efi" "$tmp/hookos/hookos-unsigned.efi" >/dev/null 2>&1
sbverify --cert "$tmp/keys/hookos.crt" "$tmp/hookos/hookos.efi" >/dev/null 2>&1 || die "the signed HookOS does not verify"

# ---- OVMF variable stores with the keys enrolled ----
log "OVMF variable stores: Secure Boot on, and off"
enrol=(--set-pk "$GUID" "$tmp/keys/pk.crt" --add-kek "$GUID" "$tmp/keys/kek.crt" --add-db "$GUID" "$tmp/keys/hookos.crt" --add-db "$GUID" "$tmp/keys/talos.crt")
"$VFW/bin/virt-fw-vars" -i "$OVMF_VARS" -o "$tmp/vars/secureboot.fd" "${enrol[@]}" --sb >/dev/null 2>&1 || die "virt-fw-vars (Secure Boot on) failed"
"$VFW/bin/virt-fw-vars" -i "$OVMF_VARS" -o "$tmp/vars/secureboot-off.fd" "${enrol[@]}" --set-false SecureBootEnable >/dev/null 2>&1 || die "virt-fw-vars (Secure Boot off) failed"

# ---- the site authority sets of the policy profiles ----
cp "$tmp/keys/pk.crt" "$tmp/site/lab-pk.pem"
cp "$tmp/keys/kek.crt" "$tmp/site/lab-kek.pem"
cp "$tmp/keys/talos.crt" "$tmp/site/lab-db.pem"
cp "$tmp/keys/hookos.crt" "$tmp/site/hookos-signer.pem"

# ---- the runtime share: node, lldpd, lldpcli and their libraries ----
log "runtime share: node $("$NODE_DIR/bin/node" --version), lldpd, lldpcli"
ln "$NODE_DIR/bin/node" "$tmp/runtime/bin/node" 2>/dev/null || cp "$NODE_DIR/bin/node" "$tmp/runtime/bin/node"
cp /usr/sbin/lldpd /usr/sbin/lldpcli "$tmp/runtime/bin/"
for b in "$tmp/runtime/bin/node" /usr/sbin/lldpd /usr/sbin/lldpcli; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do cp -L "$lib" "$tmp/runtime/lib/x86_64-linux-gnu/"; done
cp -L /lib64/ld-linux-x86-64.so.2 "$tmp/runtime/lib64/"
printf 'root:x:0:0:root:/root:/bin/sh\n_lldpd:x:104:111::/run/lldpd:/bin/false\n' >"$tmp/runtime/etc/passwd"
printf 'root:x:0:\n_lldpd:x:111:\n' >"$tmp/runtime/etc/group"

rm -rf "$W"
touch "$tmp/READY"
rm -rf "$OUT"
mv "$tmp" "$OUT"
trap - EXIT
log "built in $(($(date +%s) - start))s -> $OUT"
ls -1dt "$CACHE_ROOT"/kit-* 2>/dev/null | tail -n +4 | xargs -r rm -rf
echo "$OUT"
