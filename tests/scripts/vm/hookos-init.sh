#!/bin/busybox sh
# /init of the lab HookOS (the initramfs inside the signed UKI that build.sh makes). It stands in for HookOS's
# userland: it brings up the boot interface with DHCP, mounts securityfs, fetches its job from the boot server
# (TFTP, the same server that served the UKI) and runs the real Tinkerbell agent and podman from the read-only
# runtime share (virtio-9p) until the machine is powered off. Every step prints a marker line on the serial console
# ("[fleetd-hookos] …"); the harness (tests/src/vm/machine.ts) waits on them.
#
# The job (FLEETD_* lines; only lines of the form FLEETD_NAME=value, no quotes, no shell syntax, are taken) must be
# the agent mode's:
#  - FLEETD_AGENT=tink-agent: the real Tinkerbell agent (tink-agent, its `docker` runtime) against podman's Docker
#    API (`podman system service`, runc, overlay storage on a tmpfs), both from the runtime share. The agent's ID
#    is the boot NIC's MAC; it asks tink-server at FLEETD_TINK_SERVER (host:port, plaintext gRPC) for its
#    Workflow's actions, pulls each action's image from the lab registry FLEETD_REGISTRY (host:port, plain HTTP)
#    and runs it privileged. Its log lines are copied to the console ("[tink-agent] {…}"); it runs until the
#    machine is powered off (as on HookOS: the Workflow's end does not stop the agent).
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

# The runtime (Node.js 24, lldpd, tink-agent, podman, their libraries), read-only over virtio-9p.
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose fleetd-runtime /runtime || fail "cannot mount the runtime share"
ln -s /runtime/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu
ln -s /runtime/lib64 /lib64
for b in /runtime/bin/*; do ln -s "$b" /usr/bin/; done
mkdir -p /run/lldpd /etc
cp /runtime/etc/passwd /runtime/etc/group /etc/

# The job: FLEETD_* settings, from the boot server.
cd /tmp || fail "no /tmp"
tftp -g -r job.env -l /tmp/job.env "$LEASE_SERVER" || fail "no job for this machine on $LEASE_SERVER"
grep -E '^FLEETD_[A-Z0-9_]+=[A-Za-z0-9_.:/@,+=-]*$' /tmp/job.env >/tmp/job.clean
while IFS= read -r line; do export "$line"; done </tmp/job.clean

# ---- agent mode: podman's Docker API and the real tink-agent ----
[ "${FLEETD_AGENT:-}" = tink-agent ] || fail "the job is not the agent mode's (FLEETD_AGENT=tink-agent)"
mark "runtime $(cat /runtime/etc/agent-versions)"
[ -n "${FLEETD_TINK_SERVER:-}" ] || fail "agent mode: the job names no FLEETD_TINK_SERVER"
[ -n "${FLEETD_REGISTRY:-}" ] || fail "agent mode: the job names no FLEETD_REGISTRY"
ID="$(cat "/sys/class/net/$IFACE/address")"
mark "agent mode: tink-agent id=$ID tink-server=$FLEETD_TINK_SERVER registry=$FLEETD_REGISTRY"
while read -r m; do
  insmod "/modules/$m.ko" || fail "insmod $m"
done </modules/agent-order
# iptables (CNI's NAT) reads its extensions from /usr/lib/x86_64-linux-gnu/xtables.
mkdir -p /usr/lib
ln -s /runtime/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu
mount -t cgroup2 cgroup2 /sys/fs/cgroup || fail "cannot mount cgroup2"
# podman's locks are POSIX shared memory (/dev/shm); containers get their own /dev/pts from runc.
mkdir -p /dev/shm /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm || fail "cannot mount /dev/shm"
mount -t devpts devpts /dev/pts || true
# Controllers for the containers' cgroups (podman's cgroupfs manager makes them below the root).
for c in cpu io memory pids; do echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true; done
# Image storage and podman's scratch space: RAM, as on HookOS. A tmpfs's default size (half the RAM, 476 MiB of
# the lab's 1 GiB) does not hold fleetd's three action images (about 510 MiB unpacked) and a pull's blobs.
mkdir -p /var /lib/firmware /run/podman /etc/containers
mount -t tmpfs -o mode=0755,size=85% tmpfs /var || fail "cannot mount /var"
mkdir -p /var/tmp /var/lib/containers
chmod 1777 /var/tmp
cp /runtime/etc/containers/* /etc/containers/
printf 'unqualified-search-registries = []\n\n[[registry]]\nlocation = "%s"\ninsecure = true\n' "$FLEETD_REGISTRY" >/etc/containers/registries.conf
printf '127.0.0.1 localhost\n' >/etc/hosts
: >/etc/resolv.conf
# Memory as the containers fill the tmpfs (the guest has 1 GiB and no swap).
(
  while :; do
    mark "memory: $(awk '/^(MemTotal|MemAvailable|Shmem):/ {printf "%s %d MiB ", $1, $2 / 1024}' /proc/meminfo)"
    sleep 20
  done
) &
podman system service --time=0 unix:///run/podman/podman.sock >/tmp/podman.log 2>&1 &
PODMAN=$!
i=0
while [ ! -S /run/podman/podman.sock ]; do
  kill -0 "$PODMAN" 2>/dev/null || fail "podman system service exited: $(tail -5 /tmp/podman.log)"
  i=$((i + 1))
  [ "$i" -lt 600 ] || fail "podman system service did not open its socket in 60 s: $(tail -5 /tmp/podman.log)"
  sleep 0.1
done
mark "agent mode: podman system service listening"
mark "agent mode: tink-agent start"
tink-agent --id "$ID" --transport grpc --grpc-server "$FLEETD_TINK_SERVER" --runtime docker \
  --docker-socket /run/podman/podman.sock --backoff-max-interval 1s 2>&1 | while IFS= read -r l; do echo "[tink-agent] $l"; done
mark "error: tink-agent exited; podman's log: $(tail -5 /tmp/podman.log)"
poweroff -f
sleep 30
