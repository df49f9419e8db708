#!/bin/busybox sh
# /init of the lab HookOS (the initramfs inside the signed UKI that build.sh makes). It stands in for HookOS's
# userland: it brings up the boot interface with DHCP, mounts securityfs, fetches its job from the boot server
# (TFTP, the same server that served the UKI) and runs fleetd's action under Node.js 24 from the read-only
# runtime share (virtio-9p), then powers the machine off. Every step prints a marker line on the serial console
# ("[fleetd-hookos] …"); the harness (tests/src/vm/machine.ts) waits on them.
#
# The job is the stand-in for a Tinkerbell workflow as the agent receives it: FLEETD_* settings (the action's
# `environment:`; only lines of the form FLEETD_NAME=value, no quotes, no shell syntax, are taken), FLEETD_STEPS
# (the actions, in order), plus the action bundle. Where the real agent plugs in: the steps loop at the end is
# what tink-agent does with a container runtime (pull the action image, run each action privileged with /worker
# mounted, stop at the first failure).
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
export HOME=/root

mark() { echo "[fleetd-hookos] $* (uptime $(cut -d' ' -f1 /proc/uptime)s)"; }
fail() {
  mark "error: $*"
  poweroff -f
  sleep 30
}

mkdir -p /proc /sys /dev /tmp /run /worker /root /runtime /lib /usr/bin /usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=0755 tmpfs /run
mark "init: $(uname -r)"

# The firmware's TCG event log (securityfs), as the action will read it.
mount -t securityfs securityfs /sys/kernel/security || fail "cannot mount securityfs"
LOG=/sys/kernel/security/tpm0/binary_bios_measurements
[ -r "$LOG" ] || fail "no TPM event log at $LOG"
mark "securityfs event log $LOG sha256=$(sha256sum "$LOG" | cut -d' ' -f1) bytes=$(cat "$LOG" | wc -c)"
[ -c /dev/tpmrm0 ] || fail "no /dev/tpmrm0"

# Modules (Debian-signed; the kernel's lockdown accepts them), in dependency order (build.sh wrote the list).
while read -r m; do
  insmod "/modules/$m.ko" || fail "insmod $m"
done </modules/order

ip link set lo up
IFACE=
for i in 1 2 3 4 5 6 7 8 9 10; do
  for n in /sys/class/net/*; do
    n=${n##*/}
    [ "$n" = lo ] && continue
    IFACE=$n
    break
  done
  [ -n "$IFACE" ] && break
  sleep 0.2
done
[ -n "$IFACE" ] || fail "no network interface"
ip link set "$IFACE" up
udhcpc -i "$IFACE" -s /udhcpc.sh -t 10 -T 2 -n -q -f >/tmp/udhcpc.log 2>&1 || fail "no DHCP lease on $IFACE: $(tail -3 /tmp/udhcpc.log)"
. /tmp/lease.env
mark "network $IFACE $(cat /sys/class/net/$IFACE/address) $LEASE_IP boot server $LEASE_SERVER"

# The runtime (Node.js 24, lldpd, their libraries), read-only over virtio-9p.
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose fleetd-runtime /runtime || fail "cannot mount the runtime share"
ln -s /runtime/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu
ln -s /runtime/lib64 /lib64
for b in /runtime/bin/*; do ln -s "$b" /usr/bin/; done
mkdir -p /run/lldpd /etc
cp /runtime/etc/passwd /runtime/etc/group /etc/
mark "runtime $(node --version)"

# The job: FLEETD_* settings and the action bundle, from the boot server.
cd /tmp || fail "no /tmp"
tftp -g -r job.env -l /tmp/job.env "$LEASE_SERVER" || fail "no job for this machine on $LEASE_SERVER"
tftp -g -r action.mjs -l /tmp/action.mjs "$LEASE_SERVER" || fail "no action bundle on $LEASE_SERVER"
grep -E '^FLEETD_[A-Z0-9_]+=[A-Za-z0-9_.:/@,+=-]*$' /tmp/job.env >/tmp/job.clean
while IFS= read -r line; do export "$line"; done </tmp/job.clean
mark "job mode=${FLEETD_MODE:-?} workflow=${FLEETD_WORKFLOW:-?} action sha256=$(sha256sum /tmp/action.mjs | cut -d' ' -f1)"

# The job's steps, in order, as Tinkerbell runs a Workflow's actions: the first that fails stops the rest.
#   attest      fleetd-tink-action attest --mode $FLEETD_MODE (results in $FLEETD_OUT)
#   write-meta  fleetd-tink-action write-meta --disk /dev/vda --code-file $FLEETD_OUT/install-code
rc=0
for step in $(echo "${FLEETD_STEPS:-attest}" | tr ',' ' '); do
  case "$step" in
    attest) set -- attest --mode "$FLEETD_MODE" ;;
    write-meta) set -- write-meta --disk /dev/vda --code-file "${FLEETD_OUT:-/worker/fleetd}/install-code" ;;
    *)
      mark "unknown step $step"
      rc=2
      break
      ;;
  esac
  mark "action start: $step"
  node /tmp/action.mjs "$@"
  rc=$?
  mark "action end: $step exit=$rc"
  [ "$rc" -eq 0 ] || break
done
mark "action exit=$rc"
poweroff -f
sleep 30
