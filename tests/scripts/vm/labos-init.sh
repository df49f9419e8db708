#!/bin/busybox sh
# /init of the lab OS (the UKI on the lab OS disk image that build.sh makes, signed with the lab's Talos key): what
# Talos does at its first boot, as far as the lab has it: read the install code from META key 0x0b with Talos's
# own reader (advread: github.com/siderolabs/go-adv, tests/go/talos), fetch the machine config from the
# `talos.config=` URL of its kernel command line with Talos's variables substituted (${uuid}: SMBIOS UUID,
# ${code}: the META code), and validate it with Talos's machinery (validate-config, metal mode). Markers go to the
# serial console ("[fleetd-labos] …"); the install code is never printed.
#
# Not here yet (the images/agent and SPIRE issues): writing the seed files, the kubelet's TLS bootstrap, the
# spire-agent with tpm_devid, the renewal agent.
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
export HOME=/root

mark() { echo "[fleetd-labos] $* (uptime $(cut -d' ' -f1 /proc/uptime)s)"; }
fail() {
  mark "error: $*"
  poweroff -f
  sleep 30
}

mkdir -p /proc /sys /dev /tmp /run /root /runtime /lib /usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=0755 tmpfs /run
mark "init: $(uname -r)"
mount -t securityfs securityfs /sys/kernel/security || fail "cannot mount securityfs"
LOG=/sys/kernel/security/tpm0/binary_bios_measurements
[ -r "$LOG" ] && mark "securityfs event log sha256=$(sha256sum "$LOG" | cut -d' ' -f1) bytes=$(cat "$LOG" | wc -c)"

while read -r m; do
  insmod "/modules/$m.ko" || fail "insmod $m"
done </modules/order

# The system disk: the first virtio disk (the lab OS image the install wrote).
DISK=
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
  [ -b /dev/vda ] && DISK=/dev/vda && break
  sleep 0.2
done
[ -n "$DISK" ] || fail "no system disk"

ip link set lo up
IFACE=
for n in /sys/class/net/*; do
  n=${n##*/}
  [ "$n" = lo ] && continue
  IFACE=$n
  break
done
[ -n "$IFACE" ] || fail "no network interface"
ip link set "$IFACE" up
udhcpc -i "$IFACE" -s /udhcpc.sh -t 10 -T 2 -n -q -f >/tmp/udhcpc.log 2>&1 || fail "no DHCP lease on $IFACE: $(tail -3 /tmp/udhcpc.log)"
. /tmp/lease.env
mark "network $IFACE $(cat /sys/class/net/$IFACE/address) $LEASE_IP"

mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose fleetd-runtime /runtime || fail "cannot mount the runtime share"
ln -s /runtime/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu
ln -s /runtime/lib64 /lib64
for b in /runtime/bin/*; do ln -s "$b" /usr/bin/; done

# META key 0x0b, as Talos reads it (copy 1, else copy 2), from the META partition of the system disk.
# advread (a test oracle) reads image files: it sizes the disk by stat, which says 0 for a block device. The lab's
# system disks are small (the lab OS image, tens of MiB), so it reads a copy of the whole disk in memory.
dd if="$DISK" of=/tmp/system-disk.img bs=1M 2>/dev/null || fail "cannot read $DISK"
advread /tmp/system-disk.img >/tmp/meta.json 2>/tmp/advread.err || fail "advread $DISK: $(cat /tmp/advread.err)"
rm -f /tmp/system-disk.img
# The tags Talos's reader returns are the top-level "tags" (before "copies", which checks each copy on its own).
CODE=$(sed '/"copies":/,$d' /tmp/meta.json | tr -d ' \n' | grep -o '"0x0b":{"hex":"[0-9a-f]*","text":"[0-9a-f]*"' | sed 's/.*"text":"//; s/"$//')
[ -n "$CODE" ] || fail "META has no key 0x0b (DownloadURLCode)"
mark "META 0x0b: an install code of ${#CODE} characters"

# talos.config= from the kernel command line, with ${uuid} and ${code} substituted as Talos does.
URL=
for a in $(cat /proc/cmdline); do
  case "$a" in talos.config=*) URL=${a#talos.config=} ;; esac
done
[ -n "$URL" ] || fail "no talos.config= on the kernel command line"
UUID=$(tr 'A-Z' 'a-z' </sys/class/dmi/id/product_uuid)
SHOWN=$(echo "$URL" | sed "s/\${uuid}/$UUID/g; s/\${code}/<code>/g")
URL=$(echo "$URL" | sed "s/\${uuid}/$UUID/g; s/\${code}/$CODE/g")
mark "fetching $SHOWN"
wget -q -O /tmp/config.yaml "$URL" 2>/tmp/wget.err || fail "config fetch failed: $(cat /tmp/wget.err)"
mark "config fetched bytes=$(wc -c </tmp/config.yaml) sha256=$(sha256sum /tmp/config.yaml | cut -d' ' -f1)"
validate-config /tmp/config.yaml >/tmp/validate.json 2>&1
rc=$?
mark "config validated exit=$rc $(head -c 2000 /tmp/validate.json | tr '\n' ' ')"
mark "done"
poweroff -f
sleep 30
