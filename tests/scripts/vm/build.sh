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
#   labos/      the lab OS (what the provision Workflow installs in place of Talos, which cannot be fetched here):
#               labos.efi, a UKI signed with the Talos key whose /init is labos-init.sh and whose command line names
#               `talos.config=http://10.99.0.1/talos/config?uuid=${uuid}&code=${code}` (the boot network's API
#               address, tests/src/vm/bootNetwork.ts); disk.img, a Talos-like GPT (EFI, BIOS, BOOT, META, STATE;
#               written by Talos's own partitioning code, tests/go/talos mkimage) whose EFI partition is a FAT ESP
#               holding labos.efi as \EFI\BOOT\BOOTX64.EFI
#   runtime/    the read-only share the lab's machines mount over virtio-9p: Node.js 24 (.ci/node24.sh), lldpd and
#               lldpcli (Debian's, for the action's LLDP claim), and the libraries they load; Talos's META reader
#               and config validator (tests/go/talos advread, validate-config --write-files; static) and SPIRE's
#               spire-agent (tests/go/spire, v1.13.3; cgo, so its libc too) for the lab OS; and for the HookOS's
#               agent mode (hookos-init.sh, FLEETD_AGENT=tink-agent): the real Tinkerbell agent (tink-agent, cmd/agent
#               of the pinned github.com/tinkerbell/tinkerbell, tests/go/tinkerbell-bin; static), Debian's podman
#               (its Docker API is the agent's `docker` runtime), conmon and runc, their libraries, and the
#               containers configuration in etc/containers (policy.json; storage.conf: overlay on the guest's
#               tmpfs; containers.conf: runc without pivot_root, cgroupfs, CNI; registries.conf is the job's), CNI's
#               bridge, host-local, portmap, firewall, tuning and loopback plugins (runtime/cni) and iptables-legacy
#               with its extensions (podman's default network: a bridge with NAT)
#   kernel/     the kernel version and its package name
#
# Inputs: Debian's linux-image (the version linux-image-amd64 depends on, fetched with `apt-get download`),
# busybox-static, systemd-boot-efi (the stub), ovmf (the empty variable store), lldpd, the pinned Node.js 24,
# virt-firmware from PyPI (virt-firmware.sh), Talos's Go tools (tests/go/talos/build.sh), SPIRE's spire-agent
# (tests/go/spire/build.sh; .ci/setup builds it before this kit), tink-agent (tests/go/tinkerbell-bin/build.sh,
# also built before), podman, conmon, runc, containernetworking-plugins and iptables (Debian's), and the files of
# this directory.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
CACHE_ROOT="${FLEETD_CACHE:-$HOME/.cache/fleetd}/vm"
STUB=/usr/lib/systemd/boot/efi/linuxx64.efi.stub
OVMF_VARS=/usr/share/OVMF/OVMF_VARS_4M.fd
# Modules the HookOS loads (with their dependencies, resolved from the modules' own .modinfo): the virtio PCI
# transport, the NIC, the disk, and 9p for the runtime share. The agent mode loads AGENT_MODULES too: overlay (the
# container storage) and what podman's default network needs (CNI's bridge plugin: a bridge, veth pairs, and
# iptables NAT with the matches the bridge, firewall and portmap plugins use; crc32c_generic first: libcrc32c
# asks the crypto API for crc32c, which a HookOS without modprobe cannot load on demand), as on a Docker HookOS.
MODULES=(virtio_pci virtio_net virtio_blk 9pnet_virtio 9p)
AGENT_MODULES=(overlay bridge veth crc32c_generic ip_tables iptable_filter iptable_nat xt_MASQUERADE xt_comment xt_conntrack xt_addrtype xt_multiport xt_mark xt_tcpudp)

log() { printf '\033[1m[vm-kit]\033[0m %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

for t in qemu-system-x86_64 sbsign sbattach objcopy objdump mkfs.vfat mmd mcopy sgdisk cpio swtpm lldpd podman conmon runc xtables-legacy-multi; do
  command -v "$t" >/dev/null || die "$t is missing (run .ci/setup)"
done
[ -f "$STUB" ] || die "$STUB is missing (systemd-boot-efi; run .ci/setup)"
[ -f "$OVMF_VARS" ] || die "$OVMF_VARS is missing (ovmf; run .ci/setup)"
[ -x /bin/busybox ] && /bin/busybox --list | grep -x udhcpc >/dev/null || die "busybox-static is missing (run .ci/setup)"  # not grep -q: it would stop reading, busybox die of SIGPIPE and pipefail fail the check

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
TALOS_DIR="$(bash "$REPO/tests/go/talos/build.sh")"
SPIRE_DIR="$(bash "$REPO/tests/go/spire/build.sh")"
TINK_DIR="$(bash "$REPO/tests/go/tinkerbell-bin/build.sh")"
[ -x "$TINK_DIR/tink-agent" ] || die "$TINK_DIR/tink-agent is missing (tests/go/tinkerbell-bin/build.sh)"
# The lab OS's config URL: the boot network's API address (LAB_SEGMENT.1, LAB_API_PORT in tests/src/vm/bootNetwork.ts).
LABOS_CONFIG_URL='http://10.99.0.1/talos/config?uuid=${uuid}&code=${code}'
ver() { dpkg-query -W -f='${Version}' "$1"; }
KEY="$(
  {
    echo "$KPKG $KVER_PKG"
    for p in busybox-static systemd-boot-efi ovmf lldpd libc6 podman conmon runc containernetworking-plugins iptables; do echo "$p $(ver "$p")"; done
    "$NODE_DIR/bin/node" --version
    "$VFW/bin/pip" show virt-firmware 2>/dev/null | awk '/^Version:/ {print $2}'
    basename "$TALOS_DIR"
    basename "$SPIRE_DIR"
    basename "$TINK_DIR"
    cat "$HERE/build.sh" "$HERE/hookos-init.sh" "$HERE/labos-init.sh" "$HERE/udhcpc.sh"
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
mkdir -p "$tmp"/{keys,vars,site,hookos,labos,runtime/bin,runtime/cni,runtime/lib/x86_64-linux-gnu,runtime/lib64,runtime/etc/containers,kernel,work}
W="$tmp/work"

# ---- the kernel: Debian's package, its signature stripped (the lab signs the whole UKI with its own key) ----
# The package is kept (by version) beside the kits, so a rebuild for another reason does not fetch it again.
DEBS="$CACHE_ROOT/debs"
mkdir -p "$DEBS"
deb="$(ls "$DEBS/${KPKG}_${KVER_PKG//:/%3a}_"*.deb 2>/dev/null | head -1 || true)"
if [ -z "$deb" ]; then
  log "kernel: apt-get download $KPKG ($KVER_PKG)"
  (cd "$W" && apt-get download -q "$KPKG=$KVER_PKG" >/dev/null 2>&1) || die "apt-get download $KPKG=$KVER_PKG failed"
  for f in "$W/${KPKG}_"*.deb; do mv "$f" "$DEBS/"; done
  ls -1t "$DEBS"/linux-image-*.deb | tail -n +3 | xargs -r rm -f
  deb="$(ls "$DEBS/${KPKG}_"*.deb | head -1)"
fi
dpkg-deb -x "$deb" "$W/k"
KREL="${KPKG#linux-image-}"
sbattach --remove "$W/k/boot/vmlinuz-$KREL" >/dev/null 2>&1 || true
cp "$W/k/boot/vmlinuz-$KREL" "$W/vmlinuz"
printf '%s\n' "$KREL" >"$tmp/kernel/release"
printf '%s %s\n' "$KPKG" "$KVER_PKG" >"$tmp/kernel/package"

# ---- the initramfs: busybox, an /init, the modules in dependency order ----
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
  order+=("$m")
}
for m in "${MODULES[@]}"; do visit "$m"; done
base=${#order[@]}
for m in "${AGENT_MODULES[@]}"; do visit "$m"; done
agent_order=("${order[@]:base}")
order=("${order[@]:0:base}")
# make_initramfs INIT OUT: busybox, INIT as /init, the udhcpc script, the modules and their order
make_initramfs() {
  local R="$W/initramfs-$(basename "$2")" m
  mkdir -p "$R"/{bin,modules,proc,sys,dev,tmp,run}
  cp /bin/busybox "$R/bin/busybox"
  install -m 0755 "$1" "$R/init"
  install -m 0755 "$HERE/udhcpc.sh" "$R/udhcpc.sh"
  for m in "${order[@]}" "${agent_order[@]}"; do cp "$(modpath "$m")" "$R/modules/$m.ko"; done
  printf '%s\n' "${order[@]}" >"$R/modules/order"
  printf '%s\n' "${agent_order[@]}" >"$R/modules/agent-order"
  (cd "$R" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet --reproducible | gzip -9n >"$2")
}
log "initramfs: busybox, modules ${order[*]}, agent mode ${agent_order[*]}; /init: hookos-init.sh, labos-init.sh"
make_initramfs "$HERE/hookos-init.sh" "$W/hookos-initrd.img"
make_initramfs "$HERE/labos-init.sh" "$W/labos-initrd.img"

# ---- UKIs: systemd's stub with .osrel, .cmdline, .linux, .initrd (what ukify does, with objcopy) ----
# make_uki NAME INITRD CMDLINE OUT
make_uki() {
  printf 'NAME="%s"\nID=fleetd-lab\nVERSION_ID=%s\n' "$1" "$KEY" >"$W/osrel"
  printf '%s' "$3" >"$W/cmdline"
  local align last offs args=() s name file
  align="$((16#$(objdump -p "$STUB" | awk '/SectionAlignment/ {print $2}')))"
  last="$(objdump -h "$STUB" | awk '$1 ~ /^[0-9]+$/ {vma=$4; size=$3} END {print vma, size}')"
  offs=$((16#${last% *} + 16#${last#* }))
  for s in osrel:"$W/osrel" cmdline:"$W/cmdline" linux:"$W/vmlinuz" initrd:"$2"; do
    name=${s%%:*}
    file=${s#*:}
    offs=$(((offs + align - 1) / align * align))
    args+=(--add-section ".$name=$file" --change-section-vma ".$name=$(printf 0x%x "$offs")")
    offs=$((offs + $(stat -Lc%s "$file")))
  done
  objcopy "${args[@]}" "$STUB" "$4"
}
log "UKIs: $(basename "$STUB") + vmlinuz-$KREL + initramfs"
# Serial console, quiet kernel, and no reboot loop: a panic powers off through QEMU's -no-reboot.
BASE_CMDLINE='console=ttyS0,115200 loglevel=4 panic=-1'
make_uki "fleetd lab HookOS" "$W/hookos-initrd.img" "$BASE_CMDLINE" "$tmp/hookos/hookos-unsigned.efi"
make_uki "fleetd lab OS" "$W/labos-initrd.img" "$BASE_CMDLINE talos.config=$LABOS_CONFIG_URL" "$W/labos-unsigned.efi"

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
sbsign --key "$tmp/keys/talos.key" --cert "$tmp/keys/talos.crt" --output "$tmp/labos/labos.efi" "$W/labos-unsigned.efi" >/dev/null 2>&1
sbverify --cert "$tmp/keys/hookos.crt" "$tmp/hookos/hookos.efi" >/dev/null 2>&1 || die "the signed HookOS does not verify"
sbverify --cert "$tmp/keys/talos.crt" "$tmp/labos/labos.efi" >/dev/null 2>&1 || die "the signed lab OS does not verify"

# ---- the lab OS disk image: Talos's GPT layout, the UKI on a FAT ESP in the EFI partition ----
log "lab OS disk image: Talos-like GPT (mkimage), ESP with the lab OS UKI"
GUID_EFI=C12A7328-F81F-11D2-BA4B-00A0C93EC93B
GUID_BIOS=21686148-6449-6E6F-744E-656564454649
GUID_LINUX=0FC63DAF-8483-4772-8E79-3D69D8477DE4
ESP_KIB=24576
"$TALOS_DIR/mkimage" --size-mib 40 --part "EFI:$ESP_KIB:$GUID_EFI" --part "BIOS:1024:$GUID_BIOS" --part "BOOT:1024:$GUID_LINUX" \
  --part "META:1024:$GUID_LINUX" --part "STATE:4096:$GUID_LINUX" "$tmp/labos/disk.img" >/dev/null
mkfs.vfat -C -n EFI "$W/esp.img" "$ESP_KIB" >/dev/null
mmd -i "$W/esp.img" ::/EFI ::/EFI/BOOT
mcopy -i "$W/esp.img" "$tmp/labos/labos.efi" ::/EFI/BOOT/BOOTX64.EFI
first="$(sgdisk -i 1 "$tmp/labos/disk.img" | awk '/^First sector:/ {print $3}')"
[ -n "$first" ] || die "the lab OS image has no partition 1"
dd if="$W/esp.img" of="$tmp/labos/disk.img" bs=512 seek="$first" conv=notrunc status=none

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
log "runtime share: node $("$NODE_DIR/bin/node" --version), lldpd, lldpcli, advread, validate-config, spire-agent, tink-agent, podman, conmon, runc, CNI plugins, iptables"
ln "$NODE_DIR/bin/node" "$tmp/runtime/bin/node" 2>/dev/null || cp "$NODE_DIR/bin/node" "$tmp/runtime/bin/node"
cp /usr/sbin/lldpd /usr/sbin/lldpcli "$tmp/runtime/bin/"
cp "$TALOS_DIR/advread" "$TALOS_DIR/validate-config" "$tmp/runtime/bin/"
ln "$SPIRE_DIR/spire-agent" "$tmp/runtime/bin/spire-agent" 2>/dev/null || cp "$SPIRE_DIR/spire-agent" "$tmp/runtime/bin/spire-agent"
# The agent mode: tink-agent (static), podman, conmon, runc (Debian's; their libraries below).
ln "$TINK_DIR/tink-agent" "$tmp/runtime/bin/tink-agent" 2>/dev/null || cp "$TINK_DIR/tink-agent" "$tmp/runtime/bin/tink-agent"
cp /usr/bin/podman /usr/bin/conmon /usr/sbin/runc /usr/sbin/xtables-legacy-multi "$tmp/runtime/bin/"
for n in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do ln -s xtables-legacy-multi "$tmp/runtime/bin/$n"; done
CNI_PLUGINS=(bridge host-local portmap firewall tuning loopback)
for p in "${CNI_PLUGINS[@]}"; do cp "/usr/lib/cni/$p" "$tmp/runtime/cni/"; done
cp -r /usr/lib/x86_64-linux-gnu/xtables "$tmp/runtime/lib/x86_64-linux-gnu/"
for b in "$tmp/runtime/bin/node" /usr/sbin/lldpd /usr/sbin/lldpcli "$tmp/runtime/bin/spire-agent" /usr/bin/podman /usr/bin/conmon /usr/sbin/runc /usr/sbin/xtables-legacy-multi "${CNI_PLUGINS[@]/#//usr/lib/cni/}" /usr/lib/x86_64-linux-gnu/xtables/*.so; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do cp -L "$lib" "$tmp/runtime/lib/x86_64-linux-gnu/"; done
cp -L /lib64/ld-linux-x86-64.so.2 "$tmp/runtime/lib64/"
printf 'root:x:0:0:root:/root:/bin/sh\n_lldpd:x:104:111::/run/lldpd:/bin/false\n' >"$tmp/runtime/etc/passwd"
printf 'root:x:0:\n_lldpd:x:111:\n' >"$tmp/runtime/etc/group"
# The containers configuration the agent mode copies to /etc/containers (registries.conf is written from the job).
# podman's Docker API gives a container whose action names no network (the agent sets none then) podman's default
# network: CNI's bridge with NAT (the plugins in runtime/cni; iptables-legacy), as Docker's bridge on a HookOS.
cat >"$tmp/runtime/etc/containers/containers.conf" <<'EOF'
# written by tests/scripts/vm/build.sh: the lab HookOS's agent mode
[containers]
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
conmon_path = ["/runtime/bin/conmon"]
# The HookOS's root is the initramfs (rootfs), which pivot_root(2) refuses: runc moves and chroots instead.
no_pivot_root = true

[engine.runtimes]
runc = ["/runtime/bin/runc"]

[network]
network_backend = "cni"
cni_plugin_dirs = ["/runtime/cni"]
EOF
cat >"$tmp/runtime/etc/containers/storage.conf" <<'EOF'
# written by tests/scripts/vm/build.sh: the lab HookOS's agent mode (its /var is a tmpfs)
[storage]
driver = "overlay"
graphroot = "/var/lib/containers/storage"
runroot = "/run/containers/storage"
EOF
printf '{"default": [{"type": "insecureAcceptAnything"}]}\n' >"$tmp/runtime/etc/containers/policy.json"
printf 'podman %s, conmon %s, runc %s, tink-agent of %s\n' "$(ver podman)" "$(ver conmon)" "$(ver runc)" "$(basename "$TINK_DIR")" >"$tmp/runtime/etc/agent-versions"

rm -rf "$W"
touch "$tmp/READY"
rm -rf "$OUT"
mv "$tmp" "$OUT"
trap - EXIT
log "built in $(($(date +%s) - start))s -> $OUT"
ls -1dt "$CACHE_ROOT"/kit-* 2>/dev/null | tail -n +4 | xargs -r rm -rf
echo "$OUT"
