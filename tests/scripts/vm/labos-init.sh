#!/bin/busybox sh
# /init of the lab OS (the UKI on the lab OS disk image that build.sh makes, signed with the lab's Talos key): what
# Talos does at its first boot, as far as the lab has it: read the install code from META key 0x0b with Talos's
# own reader (advread: github.com/siderolabs/go-adv, tests/go/talos), fetch the machine config from the
# `talos.config=` URL of its kernel command line with Talos's variables substituted (${uuid}: SMBIOS UUID,
# ${code}: the META code), and validate it with Talos's machinery (validate-config, metal mode); then what the
# node does with it:
#  - writes the config's machine.files as Talos does at boot (validate-config --write-files: op create under
#    /var), i.e. fleetd's seed files in /var/lib/fleetd/seed/;
#  - the kubelet's TLS bootstrap: the same CSR flow a kubelet's first start runs, not a kubelet (served as
#    kubelet-bootstrap.mjs, tests/src/vm/kubeletBootstrap.ts): a fresh EC P-256 key, a CSR for
#    O=system:nodes CN=system:node:<the config's hostname> posted as a CertificateSigningRequest (signer
#    kubernetes.io/kube-apiserver-client-kubelet) to the config's cluster endpoint with the config's per-node
#    bootstrap token, approved by fleetd's CSR gate, signed by kube-controller-manager, and proven by a
#    SelfSubjectReview with the issued certificate (the API server names it system:node:<hostname>);
#  - runs fleetd's node agent (the action bundle's `renew`, fetched from the boot server with the DaemonSet's
#    FLEETD_* env as labos.env): `--seed-only` copies the seed once into /var/lib/fleetd/devid/ (the init
#    container), then `renew` runs (the main container): a runtime attestation with the LDevID and LAK at its
#    start (the `talos` profile judges it), a renewal when due, then a restart of spire-agent;
#  - runs spire-agent (the shipped agent.conf with the site's server address, served as agent.conf, and the
#    server's bundle), restarted whenever it exits, attesting with tpm_devid on /dev/tpmrm0 and the devid
#    directory's files, and fetches a workload's X.509-SVID through the Workload API; after the renewal it waits
#    for spire-agent's restart and tries the SVID again (reported). The restarted agent loads the agent SVID its
#    data_dir kept and does not attest again: SPIRE goes on naming it by the provision pass's LDevID (README).
# Markers go to the serial console ("[fleetd-labos] …"); the install code, keys and blobs are never printed.
#
# Not here yet: a kubelet (its certificate rotation, its Node object), Talos's own services (this is a busybox
# stand-in for Talos, not Talos), anything that survives a reboot (/var is the initramfs's).
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
# Talos's machinery validates the config and, valid, writes its machine.files as Talos's machined does at boot
# (op create, under /var): fleetd's seed files in /var/lib/fleetd/seed/. The JSON names paths and sizes only.
validate-config --write-files / /tmp/config.yaml >/tmp/validate.json 2>&1
rc=$?
mark "config validated exit=$rc $(head -c 2000 /tmp/validate.json | tr '\n' ' ')"
[ "$rc" -eq 0 ] || fail "the config is not valid (or its files could not be written)"
SEED=/var/lib/fleetd/seed
mark "seed files written: $(cd "$SEED" && for f in *; do printf '%s(%s) ' "$f" "$(wc -c <"$f")"; done)"

# What the node's DaemonSet gets (its env, the SPIRE agent's config and trust bundle) and fleetd's action bundle
# (the same file the HookOS ran; the node agent is its `renew` command), from the boot server.
cd /tmp || fail "no /tmp"
for f in labos.env action.mjs agent.conf spire-bundle.pem kubelet-bootstrap.mjs; do
  tftp -g -r "$f" -l "/tmp/$f" "$LEASE_SERVER" || fail "no $f for this machine on $LEASE_SERVER"
done
grep -E '^FLEETD_[A-Z0-9_]+=[A-Za-z0-9_.:/@,+=-]*$' /tmp/labos.env >/tmp/labos.clean
while IFS= read -r line; do export "$line"; done </tmp/labos.clean
mkdir -p /etc
cp /runtime/etc/passwd /runtime/etc/group /etc/

# The kubelet's TLS bootstrap, before the DaemonSets' parts (on Talos the kubelet runs them): the same CSR flow a
# kubelet's first start runs — not a kubelet binary (no container runtime here; tests/src/vm/kubeletBootstrap.ts):
# with the config's cluster endpoint, Kubernetes CA and per-node bootstrap token (cluster.token), a fresh EC P-256
# key and a CSR O=system:nodes CN=system:node:<hostname> (signer kube-apiserver-client-kubelet, usages digital
# signature + client auth), posted with the token, approved by fleetd's CSR gate, issued by
# kube-controller-manager, then proven by a SelfSubjectReview with the issued certificate. Its lines say each step;
# the token's secret and the key are never printed (the key and certificate go to /var/lib/kubelet/pki/).
node /tmp/kubelet-bootstrap.mjs --config /tmp/config.yaml --out /var/lib/kubelet/pki --timeout-seconds 240 >/tmp/kubelet-bootstrap.out 2>&1
rc=$?
while IFS= read -r line; do
  case "$line" in '{"result":'*) ;; *) mark "$line" ;; esac
done </tmp/kubelet-bootstrap.out
mark "kubelet bootstrap exit=$rc"
[ "$rc" -eq 0 ] || fail "the kubelet's TLS bootstrap got no client certificate"

mark "node agent: action sha256=$(sha256sum /tmp/action.mjs | cut -d' ' -f1) server=${FLEETD_SERVER:-?}"

# The renewal agent's one-time seed copy (the DaemonSet's init container): seed → /var/lib/fleetd/devid/.
node /tmp/action.mjs renew --seed-only
rc=$?
mark "renew --seed-only exit=$rc"
[ "$rc" -eq 0 ] || fail "the seed was not copied"
DEVID=/var/lib/fleetd/devid
mark "devid directory: $(cd "$DEVID" && for f in *; do if [ -L "$f" ]; then printf '%s->%s ' "$f" "$(readlink "$f")"; else printf '%s ' "$f"; fi; done)"
# The LDevID leaf spire-agent presents (a public certificate): its SHA-1 names the agent in SPIRE.
leaf() {
  node -e 'const {X509Certificate}=require("node:crypto");const c=new X509Certificate(require("node:fs").readFileSync(process.argv[1]));const nb=Date.parse(c.validFrom),na=Date.parse(c.validTo);console.log(`sha1=${c.fingerprint.replaceAll(":","").toLowerCase()} subject=${c.subject.replace(/\n/g,",")} renewal-due=${new Date(nb+Math.floor((na-nb)*2/3)).toISOString()}`)' "$DEVID/ldevid.crt"
}
sha1of() { echo "$1" | sed 's/^sha1=\([0-9a-f]*\) .*/\1/'; }
LEAF1=$(leaf) || fail "cannot read $DEVID/ldevid.crt"
mark "devid leaf $LEAF1"

# The node agent, running (the renew DaemonSet's main container): a runtime attestation with the LDevID and LAK
# at its start (quote signed by the LAK, judged by the `talos` profile; its pass is what puts the node into SPIRE's
# node list), a renewal when due, and then a restart of spire-agent (FLEETD_SPIRE_SIGNAL from labos.env).
node /tmp/action.mjs renew &
STATUS=${FLEETD_STATUS_FILE:-/run/fleetd-renew/status.json}
ok=
for i in $(seq 1 300); do
  if grep -q '"lastPassAt": *"' "$STATUS" 2>/dev/null; then ok=1; break; fi
  grep -q '"verdict": *"failed"' "$STATUS" 2>/dev/null && break
  sleep 1
done
[ -n "$ok" ] || fail "the node agent's runtime attestation did not pass: $(head -c 1500 "$STATUS" 2>/dev/null)"
mark "node agent: runtime attestation passed ($(grep -o '"generation": *[0-9]*' "$STATUS"))"

# spire-agent with tpm_devid on /dev/tpmrm0 and the devid directory's files (the shipped agent.conf; the site's
# values: the server's address and port), restarted whenever it exits (as the kubelet restarts its container).
mkdir -p /var/lib/spire/agent /run/spire/agent/public /etc/spire/agent
cp /tmp/spire-bundle.pem /etc/spire/agent/bundle.pem
SOCK=/run/spire/agent/public/api.sock
(
  n=0
  while :; do
    n=$((n + 1))
    echo "$n" >/tmp/spire-agent.starts
    spire-agent run -config /tmp/agent.conf >>/tmp/spire-agent.log 2>&1
    rc=$?
    # why it ended: the last error or warning it logged (SPIRE's messages; no secrets)
    mark "spire-agent exited rc=$rc (start $n); starting it again; its last error: $(grep -E '"level":"(error|warning)"' /tmp/spire-agent.log | tail -1 | grep -o '"msg":"[^"]*"\|"error":"[^"]*"' | tr '\n' ' ' | cut -c1-400)"
    sleep 1
  done
) &
healthy() {
  for i in $(seq 1 300); do
    spire-agent healthcheck -socketPath "$SOCK" >/dev/null 2>&1 && return 0
    sleep 1
  done
  fail "spire-agent did not become healthy: $(tail -c 1500 /tmp/spire-agent.log | tr '\n' ' ')"
}
# svid TRIES: the first SPIFFE ID the Workload API serves (SVID), 2 s between tries; 1 when none came.
svid() {
  SVID=
  for i in $(seq 1 "$1"); do
    spire-agent api fetch x509 -socketPath "$SOCK" -timeout 5s >/tmp/svid.txt 2>&1 && SVID=$(sed -n 's/^SPIFFE ID:[[:space:]]*//p' /tmp/svid.txt | head -1)
    [ -n "$SVID" ] && return 0
    sleep 2
  done
  return 1
}
# How the latest start got its agent SVID: node attestation (tpm_devid), or the SVID its data_dir kept.
how() { grep -E '"msg":"(SVID loaded|Node attestation was successful)"' /tmp/spire-agent.log | tail -1 | grep -o '"msg":"[^"]*"\|"spiffe_id":"[^"]*"' | tr '\n' ' '; }
healthy
mark "spire-agent healthy (start $(cat /tmp/spire-agent.starts)): $(how)"
svid 120 || fail "no X.509-SVID from the Workload API: $(tail -c 600 /tmp/svid.txt | tr '\n' ' ')"
STARTS=$(cat /tmp/spire-agent.starts)
mark "svid $SVID devid leaf sha1=$(sha1of "$LEAF1")"

# The renewal: the node agent renews when due (two thirds of the LDevID's lifetime), swaps the devid directory's
# current generation and restarts spire-agent, which attests again with the renewed LDevID.
mark "waiting for the node agent's renewal (${LEAF1##* })"
LEAF2=
for i in $(seq 1 180); do
  l=$(leaf) && [ "$(sha1of "$l")" != "$(sha1of "$LEAF1")" ] && LEAF2=$l && break
  sleep 5
done
[ -n "$LEAF2" ] || fail "the devid directory's LDevID was not renewed: $(head -c 1500 "$STATUS" 2>/dev/null)"
mark "renewed: devid leaf $LEAF2"
for i in $(seq 1 120); do
  [ "$(cat /tmp/spire-agent.starts)" -gt "$STARTS" ] && break
  sleep 1
done
[ "$(cat /tmp/spire-agent.starts)" -gt "$STARTS" ] || fail "spire-agent was not restarted after the renewal"
healthy
# A restart alone keeps the agent SVID its data_dir holds ("SVID loaded": SPIRE's agent attests only without one).
# What makes SPIRE see the renewed LDevID is fleetd's sync: it moves the node entry to the renewed CN and deletes
# the agent that carries the old one, so SPIRE answers that agent's next call "not attested" and the agent attests
# again (tpm_devid is re-attestable) with the devid directory's current, renewed LDevID.
mark "spire-agent healthy (start $(cat /tmp/spire-agent.starts)): $(how)"
REATTESTED=
for i in $(seq 1 240); do
  REATTESTED=$(grep -E '"msg":"(Successfully reattested node|Node attestation was successful)"' /tmp/spire-agent.log | grep -F "$(sha1of "$LEAF2")" | tail -1 | grep -o '"msg":"[^"]*"\|"spiffe_id":"[^"]*"' | tr '\n' ' ')
  [ -n "$REATTESTED" ] && break
  sleep 1
done
[ -n "$REATTESTED" ] || fail "spire-agent did not attest again with the renewed LDevID: $(grep -E 'attest|SVID|PermissionDenied' /tmp/spire-agent.log | tail -c 1500 | tr '\n' ' ')"
mark "spire-agent attested again: $REATTESTED"
svid 60 || fail "no X.509-SVID after the renewal: $(tail -c 600 /tmp/svid.txt | tr '\n' ' ')"
mark "svid after renewal $SVID devid leaf sha1=$(sha1of "$LEAF2")"
mark "done"
# A node keeps running (the lab's continuous story retires it later: FLEETD_LABOS_KEEP_RUNNING=yes in labos.env);
# its node agent and spire-agent go on until the machine is powered off.
if [ "${FLEETD_LABOS_KEEP_RUNNING:-}" = yes ]; then
  mark "running until powered off"
  while :; do sleep 3600; done
fi
poweroff -f
sleep 30
