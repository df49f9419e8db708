/**
 * Real firmware, real boot: lab machines (QEMU/TCG + OVMF with the lab's Secure Boot keys + swtpm) netboot the lab
 * HookOS from the boot network (dnsmasq DHCP/TFTP in a network namespace, the firmware's own PXE), and fleetd's
 * action, run by the HookOS under Node.js 24, reads the firmware's event log from securityfs, talks to
 * /dev/tpmrm0 and attests (intake) against the real attestation server of the world (NetBox 4.7, SoftHSM2 CA,
 * the express server; tests/src/attestation/world.ts) through the boot network's gateway. The server judges the
 * boot by the `hookos` profile with the lab kit's certificates as its site authorities.
 *
 * Good and bad machines differ only in what really happened at boot:
 *  - good: Secure Boot on, the HookOS signed by the lab's HookOS key, a TPM its node approves → pass, certificates;
 *  - Secure Boot off in its variable store → the action runs and the server refuses it by policy, journalled;
 *  - HookOS signed by a key no db lists, or not signed → the firmware refuses to load it: no HookOS ever runs;
 *  - a TPM its node does not approve → the action waits as pending; the server lists its EK.
 * Boot times and QEMU's CPU seconds are printed (never judged: no timing in pass/fail).
 */
import { strict as assert } from "node:assert";
import { createHash, randomBytes, randomUUID, X509Certificate } from "node:crypto";
import { closeSync, copyFileSync, mkdtempSync, openSync, readFileSync, rmSync, truncateSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { parseEventLog, interpretLog, EV } from "@fleetd/verify/eventlog";
import { EXIT } from "@fleetd/platform/cmd";
import { listDevices, readJournal } from "@fleetd/platform/netbox";
import { enrollmentWorkflowName } from "@fleetd/platform/tinkerbell";
import { nodeEntryId, tpmDevidAgentId, type SpireServerClient } from "@fleetd/platform/spire";
import { certificatesFromPem } from "@fleetd/platform/pki";
import { SEED_FILES } from "@fleetd/platform/talos/config";
import { KubeBootstrapTokens, KUBELET_CLIENT_SIGNER } from "@fleetd/platform/kube";
import { APPROVED_REASON, DENIED_REASON } from "@fleetd/talos-config-server/csrGate";
import { startWorld, type World } from "../attestation/world.js";
import { advread, TALOS_VERSION } from "../talos/goTools.js";
import { runProcess, waitFor } from "../harness/process.js";
import { AGENT_CONF_SUBSTITUTABLE, renderSpireConf, SHIPPED_AGENT_CONF, startSpireServer, type SpireServer } from "../harness/spire.js";
import { cnOf, nodeEntries, pollValue, sha1, startSync, syncContext, type Sync } from "../spire/syncRig.js";
import { authenticodeSha256 } from "./authenticode.js";
import { LAB_API_PORT, LAB_SEGMENT, startBootNetwork, type BootNetwork, type Gateway, type SwitchPort } from "./bootNetwork.js";
import { actionBundle, declareNodes, kubeletBootstrapBundle, serveHookos, serveLabos, type DeclaredNode, type HookosJob } from "./hookos.js";
import { bootstrapResultOf, inputsFromTalosConfig } from "./kubeletBootstrap.js";
import { startWorkloadCluster, type WorkloadCluster } from "./workloadCluster.js";
import { labKit, type HookosImage, type LabKit, type VarsStore } from "./kit.js";
import { startMachine, type Machine } from "./machine.js";
import { manufactureMachineTpm, type MachineTpm } from "./machineTpm.js";

const BOOT_FILE = "hookos.efi";
/**
 * A hang guard, not a judgement: a boot takes about 1 min of wall time (50 s of CPU) here on a quiet machine, and
 * several times that when four machines share the two cores with a loaded suite (a Secure Boot off boot took 8 min
 * at a load average of 21).
 */
const BOOT_TIMEOUT_MS = 15 * 60_000;
const EXIT_MARKER = /^\[fleetd-hookos\] action exit=(\d+) /m;
const FIRMWARE_REFUSED = /BdsDxe: failed to load Boot\d+ "UEFI PXEv4[^"]*" from .*: Access Denied/;

let kit: LabKit;
let w: World;
let net: BootNetwork;
let gw: Gateway;
let dir: string;
let bundle: string;
/** The kubelet's TLS bootstrap client the lab OS runs (tests/src/vm/kubeletBootstrap.ts, bundled). */
let kubeletBundle: string;
const machines: Machine[] = [];
/** The good machine of the first test, which the provision test boots again: same TPM, disk, NIC, SMBIOS. */
let good: { node: DeclaredNode; tpm: MachineTpm; mac: string; uuid: string; disk: string; port: SwitchPort } | undefined;
const tpms: MachineTpm[] = [];
const timings: string[] = [];
/** SPIRE for the lab OS (the provision test): the server, its admin client, fleetd's sync. */
let spireServer: SpireServer | undefined;
let spireClient: SpireServerClient | undefined;
let sync: Sync | undefined;
/** The port machines reach the SPIRE server's agent API on (10.99.0.1:8081, agent.conf's server_port). */
const LAB_SPIRE_PORT = 8081;
/**
 * Where machines reach the world's kube-apiserver, their workload cluster (a TCP relay: TLS end to end): the
 * rendered configs' cluster endpoint (the world's `workloadCluster` option: site configuration of this test).
 */
const LAB_KUBE_PORT = 6443;
const LAB_KUBE_ADDRESS = `${LAB_SEGMENT}.1`;
/** The world's cluster as the workload cluster: fleetd's CSR gate on it (the provision test starts it). */
let workload: WorkloadCluster | undefined;
/**
 * LDevID certificates of 15 minutes (notBefore is backdated 5 minutes, so renewal is due 5 minutes after issuance
 * and the certificate expires 10 minutes after it): the lab OS's node agent renews in real time, every certificate
 * valid by the real clock that SPIRE checks. The lab OS's first runtime attestation must come before that (it
 * comes 1–3 minutes after the provision pass here).
 */
const LDEVID_LIFETIME_DAYS = 15 / 1440;
/** The lab OS's console markers (printed at the end: what it did, when). */
const labosMarkers: string[] = [];

before(
  async () => {
    kit = await labKit();
    w = await startWorld({
      talosVersion: TALOS_VERSION,
      siteAuthoritiesDir: kit.siteAuthoritiesDir,
      ldevidLifetimeDays: LDEVID_LIFETIME_DAYS,
      workloadCluster: { endpoint: `https://${LAB_KUBE_ADDRESS}:${LAB_KUBE_PORT}`, apiserverSans: [`IP:${LAB_KUBE_ADDRESS}`] },
    });
    net = await startBootNetwork({ bootFile: BOOT_FILE });
    gw = await net.expose(w.baseUrl, LAB_API_PORT);
    dir = mkdtempSync(join(tmpdir(), "fleetd-vm-it-"));
    bundle = await actionBundle(join(dir, "fleetd-tink-action.mjs"));
    kubeletBundle = await kubeletBootstrapBundle(join(dir, "kubelet-bootstrap.mjs"));
  },
  { timeout: 20 * 60_000 },
);
after(async () => {
  for (const m of machines) await m.stop().catch(() => undefined);
  for (const m of machines) m.remove();
  for (const t of tpms) t.remove();
  await sync?.stop();
  await workload?.stop();
  spireClient?.close();
  await spireServer?.stop();
  await net?.stop();
  await w?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
  if (timings.length) console.log(`lab machine boots (QEMU/TCG, 1 vCPU, OVMF, swtpm; kernel ${kit.kernelRelease}):\n${timings.join("\n")}`);
  if (labosMarkers.length) console.log(`the lab OS's console markers (time since QEMU started):\n${labosMarkers.join("\n")}`);
});

/** A machine's TPM, made by the world's manufacturer (the server's EK CA store trusts it). */
async function machineTpm(): Promise<MachineTpm> {
  const t = await manufactureMachineTpm({ caDir: w.tpm.caDir });
  tpms.push(t);
  return t;
}

const macOf = (n: number) => `52:54:00:fd:00:${n.toString(16).padStart(2, "0")}`;
const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
const fileSha256 = (f: string) => sha256(readFileSync(f));

interface BootSpec {
  name: string;
  n: number;
  tpm: MachineTpm;
  node?: DeclaredNode;
  vars: VarsStore;
  image: HookosImage;
  job?: Partial<HookosJob>;
  /** The disk image (default: a new one, see newDisk). */
  disk?: string;
  /** The same machine again: its switch port, SMBIOS UUID and disk. */
  again?: { port: SwitchPort; uuid: string; disk: string };
}

/** A 64 MiB disk image with random bytes in its first and last MiB: "untouched" compares them all. */
function newDisk(name: string): string {
  const f = join(dir, `${name}.img`);
  const mib = 1 << 20;
  const fd = openSync(f, "w");
  try {
    writeSync(fd, randomBytes(mib), 0, mib, 0);
    writeSync(fd, randomBytes(mib), 0, mib, 63 * mib);
  } finally {
    closeSync(fd);
  }
  truncateSync(f, 64 * mib);
  return f;
}

/** Serves the machine its HookOS (and job), gives it a switch port cabled as NetBox says, and powers it on. */
async function boot(s: BootSpec): Promise<Machine> {
  const mac = macOf(s.n);
  const mode = s.job?.mode ?? "intake";
  const workflow = s.job?.workflow ?? enrollmentWorkflowName(mac);
  // The Workflow the machine runs in: the enrollment Workflow tink-server creates for an unknown agent, or the
  // node's fleetd Workflow of the mode the handler creates (the server's Workflow gate reads it).
  if (s.node) await w.ensureWorkflow(s.node.name, { workflow, mode, macs: [mac], bootMac: mac });
  serveHookos(net, mac, {
    image: kit.image(s.image),
    bootFile: BOOT_FILE,
    job: { server: gw.url, ...s.job, mode, workflow },
    bundle,
  });
  const port = s.again?.port ?? (await net.addPort(s.node ? { lldp: s.node.switch } : {}));
  const smbios = { serial: s.node?.serial ?? `LAB-VM-${s.n}`, uuid: s.again?.uuid ?? randomUUID() };
  const m = await startMachine({ name: s.name, kit, network: net, port, tpm: s.tpm, vars: s.vars, mac, smbios, disk: s.again?.disk ?? s.disk ?? newDisk(s.name) });
  machines.push(m);
  return m;
}

/** The action's pino lines on the console. */
function actionLogs(m: Machine): Record<string, unknown>[] {
  return m.lines().flatMap((l) => {
    const i = l.text.indexOf('{"level":');
    if (i < 0) return [];
    try {
      return [JSON.parse(l.text.slice(i)) as Record<string, unknown>];
    } catch {
      return [];
    }
  });
}

/** Boot times from the console: firmware's PXE start, the image downloaded, HookOS's /init, the action's start and end. */
function recordTimes(m: Machine, what: string): void {
  const s = (ms: number | undefined) => (ms === undefined ? "   -  " : `${(ms / 1000).toFixed(1).padStart(5)}s`);
  const mk = (t: string) => m.markers().find((k) => k.text.startsWith(t))?.atMs;
  timings.push(
    `  ${m.name.padEnd(18)} ${what.padEnd(34)} PXE ${s(m.firstLine(/Start PXE over IPv4/))}  image ${s(m.firstLine(/NBP file downloaded|Access Denied/))}  /init ${s(mk("init:"))}  action ${s(mk("action start"))}  end ${s(mk("action exit="))}  total ${s(m.elapsedMs())}  QEMU CPU ${m.cpuSeconds().toFixed(1)}s`,
  );
}

async function deviceId(name: string): Promise<number> {
  const [d] = await listDevices(w.admin, { name });
  assert.ok(d, `device ${name} exists`);
  return d.id;
}

/** The node's journal, once an entry matches `re` (NetBox may hear of a verdict after the machine does); at most 60 s. */
async function journalUntil(name: string, re: RegExp): Promise<string> {
  const id = await deviceId(name);
  const read = async () => (await readJournal(w.admin, id)).map((j) => j.comments).join("\n");
  await waitFor(`no journal entry of ${name} matches ${re}`, async () => re.test(await read()), { timeoutMs: 60_000, intervalMs: 500 }).catch(() => undefined);
  return read();
}

/** The challenges a machine claiming `serial` sent through the gateway. */
const challengeOf = (serial: string) => gw.requests.filter((r) => r.path === "/v1/attest/challenge" && (JSON.parse(r.requestBody.toString()) as { claims: { serial: string } }).claims.serial === serial);
/** The evidence requests of the sessions those challenges opened. */
function evidenceOf(serial: string) {
  const sessions = new Set(challengeOf(serial).flatMap((r) => (r.status === 200 ? [(JSON.parse(r.responseBody.toString()) as { sessionId: string }).sessionId] : [])));
  return gw.requests.filter((r) => r.path === "/v1/attest/evidence" && sessions.has((JSON.parse(r.requestBody.toString()) as { sessionId: string }).sessionId));
}

test("a lab machine netboots the signed HookOS; the action attests with the firmware's event log from securityfs and /dev/tpmrm0, and passes `hookos`", { timeout: BOOT_TIMEOUT_MS + 60_000 }, async () => {
  const t0 = Date.now();
  const tpm = await machineTpm();
  const t1 = Date.now();
  const { "lab-good": node } = declareNodes(w, { "lab-good": { n: 71, ek: tpm.ek } });
  assert.ok(node);
  timings.push(`  (lab-good: TPM manufactured in ${((t1 - t0) / 1000).toFixed(1)}s, node declared and applied in ${((Date.now() - t1) / 1000).toFixed(1)}s)`);
  const signaturesBefore = w.signatures();
  const goodDisk = newDisk("lab-good");
  const disk = fileSha256(goodDisk);
  const m = await boot({ name: "lab-good", n: 71, tpm, node, vars: "secureboot", image: "hookos", disk: goodDisk });
  const end = await m.waitForConsole(EXIT_MARKER, "end of the action", BOOT_TIMEOUT_MS);
  await m.qemu.exited;
  recordTimes(m, "Secure Boot on, HookOS key: pass");
  assert.equal(end.match[1], String(EXIT.ok), `the action exits 0; its log:\n${actionLogs(m).map((l) => JSON.stringify(l)).join("\n")}`);

  // The firmware verified the image and the kernel saw Secure Boot on.
  const con = m.console();
  assert.match(con, /NBP file downloaded successfully/);
  assert.match(con, /EFI stub: UEFI Secure Boot is enabled/);

  // The event log the server judged is the one securityfs held in the machine.
  const marker = m.markers().find((k) => k.text.startsWith("securityfs event log"));
  assert.ok(marker, "the HookOS printed the securityfs log's digest");
  const [, logSha] = /sha256=([0-9a-f]{64})/.exec(marker.text) ?? [];
  const mine = evidenceOf(node.serial);
  assert.deepEqual(mine.map((r) => r.status), [200], "one evidence request, passed");
  const evidence = JSON.parse((mine[0] as { requestBody: Buffer }).requestBody.toString()) as { eventLog: string };
  const logBytes = new Uint8Array(Buffer.from(evidence.eventLog, "base64"));
  assert.equal(sha256(logBytes), logSha, "the evidence carries exactly the firmware log read from /sys/kernel/security/tpm0/binary_bios_measurements");
  const claimed = actionLogs(m).find((l) => l["msg"] === "claims collected") as { eventLogBytes: number; claims: { serial: string; uuid: string } } | undefined;
  assert.ok(claimed, "the action collected its claims");
  assert.equal(claimed.eventLogBytes, logBytes.length);
  assert.equal(claimed.claims.serial, node.serial, "the SMBIOS serial QEMU set");

  // What the firmware measured: Secure Boot on, the lab's PK/KEK/db, and PCR 7 naming the lab's HookOS db certificate.
  const log = parseEventLog(logBytes);
  const mb = interpretLog(log, new Set([0, 1, 2, 3, 4, 5, 6, 7]));
  const sb = mb.secureBoot;
  assert.ok(sb, "PCR 7 interpreted");
  assert.equal(sb.enabled, true, "SecureBoot = 1 in EV_EFI_VARIABLE_DRIVER_CONFIG");
  const der = (pem: string) => sha256(new Uint8Array(new X509Certificate(pem).raw));
  assert.deepEqual(sb.pk?.certs.map((c) => c.sha256), [der(kit.certs.pk)]);
  assert.deepEqual(sb.kek?.certs.map((c) => c.sha256), [der(kit.certs.kek)]);
  assert.deepEqual(sb.db?.certs.map((c) => c.sha256).sort(), [der(kit.certs.hookos), der(kit.certs.talos)].sort());
  assert.deepEqual(
    sb.postSeparatorAuthorities.map((a) => a.cert?.sha256),
    [der(kit.certs.hookos)],
    "PCR 7's EV_EFI_VARIABLE_AUTHORITY names exactly the lab's HookOS db certificate",
  );
  const apps = log.events.filter((e) => e.pcr === 4 && e.type === EV.EFI_BOOT_SERVICES_APPLICATION);
  assert.equal(apps.length, 1, "one boot application: the UKI");
  const served = authenticodeSha256(new Uint8Array(readFileSync(kit.image("hookos"))));
  assert.deepEqual(
    apps[0]?.digests.map((d) => Buffer.from(d.digest).toString("hex")),
    [served],
    "PCR 4's boot application is the signed HookOS UKI the boot server served (its Authenticode SHA-256)",
  );

  // The server's verdict and what it released.
  assert.equal(w.signatures() - signaturesBefore, 2, "LDevID and LAK signed");
  const done = actionLogs(m).find((l) => typeof l["msg"] === "string" && (l["msg"] as string).startsWith("attested"));
  assert.ok(done, "the action reports attested");
  assert.equal(done["node"], "lab-good");
  const journal = await journalUntil("lab-good", /pass/i);
  assert.match(journal, /pass/i, `the node's journal records the pass:\n${journal}`);
  assert.equal(fileSha256(m.disk), disk, "intake never touches the disk");
  assert.equal(claimed.claims.uuid, m.smbios.uuid, "the SMBIOS UUID QEMU set");
  good = { node, tpm, mac: m.mac, uuid: m.smbios.uuid, disk: m.disk, port: m.port };
});

describe("bad machines, booted side by side: each is refused for what really happened at its boot, its disk untouched", () => {
  interface Bad {
    m: Machine;
    node: DeclaredNode;
    tpm: MachineTpm;
    disk: string;
    /** Machines the firmware refuses: resolves once the console shows it and the machine was powered off (OVMF
     * would go on trying its other boot options and take CPU from the machines that do boot). */
    refused?: Promise<void>;
  }
  const bad = {} as Record<"sbOff" | "rogue" | "unsigned" | "pending", Bad>; // filled by before()
  let signaturesBefore = 0;
  before(
    async () => {
      const [sbOff, rogue, unsigned, pending, approved] = await Promise.all([machineTpm(), machineTpm(), machineTpm(), machineTpm(), machineTpm()]);
      // One nodes-file apply for all four. lab-pending approves another TPM's EKs (as after a motherboard swap): the
      // machine that claims it has a TPM nobody approved.
      const nodes = declareNodes(w, {
        "lab-sb-off": { n: 72, ek: sbOff.ek },
        "lab-rogue": { n: 73, ek: rogue.ek },
        "lab-unsigned": { n: 74, ek: unsigned.ek },
        "lab-pending": { n: 75, ek: approved.ek },
      });
      signaturesBefore = w.signatures();
      const start = async (key: keyof typeof bad, name: string, n: number, tpm: MachineTpm, vars: VarsStore, image: HookosImage, job?: Partial<HookosJob>) => {
        const node = nodes[name] as DeclaredNode;
        const disk = newDisk(name);
        const hash = fileSha256(disk);
        const m = await boot({ name, n, tpm, node, vars, image, disk, ...(job ? { job } : {}) });
        const refused = image === "hookos" ? undefined : m.waitForConsole(FIRMWARE_REFUSED, "the firmware's refusal", BOOT_TIMEOUT_MS).then(() => m.stop());
        refused?.catch(() => undefined); // judged by its test
        bad[key] = { m, node, tpm, disk: hash, ...(refused ? { refused } : {}) };
      };
      await Promise.all([
        start("sbOff", "lab-sb-off", 72, sbOff, "secureboot-off", "hookos"),
        start("rogue", "lab-rogue", 73, rogue, "secureboot", "hookos-rogue"),
        start("unsigned", "lab-unsigned", 74, unsigned, "secureboot", "hookos-unsigned"),
        start("pending", "lab-pending", 75, pending, "secureboot", "hookos", { timeoutSeconds: 3600 }),
      ]);
    },
    { timeout: BOOT_TIMEOUT_MS },
  );

  test("Secure Boot off in the machine's variable store: the action runs and the server refuses it by the `hookos` profile, journalled", { timeout: BOOT_TIMEOUT_MS + 60_000 }, async () => {
    const { m, disk } = bad.sbOff;
    const end = await m.waitForConsole(EXIT_MARKER, "end of the action", BOOT_TIMEOUT_MS);
    await m.qemu.exited;
    recordTimes(m, "Secure Boot off: refused (policy)");
    assert.equal(end.match[1], String(EXIT.refused), `exit ${EXIT.refused}: refused by the server`);
    assert.doesNotMatch(m.console(), /EFI stub: UEFI Secure Boot is enabled/);
    const refusal = actionLogs(m).find((l) => l["code"] === "refused") as { step: string; reasons: { check: string; detail: string }[] } | undefined;
    assert.ok(refusal, "the action logs the refusal");
    assert.equal(refusal.step, "evidence");
    assert.ok(
      refusal.reasons.some((r) => r.check === "policy.secure-boot"),
      `the reason is the profile's Secure Boot check: ${JSON.stringify(refusal.reasons)}`,
    );
    assert.equal(w.signatures(), signaturesBefore, "nothing signed");
    const journal = await journalUntil("lab-sb-off", /policy\.secure-boot/);
    assert.match(journal, /policy\.secure-boot/, `the refusal is in the node's journal:\n${journal}`);
    assert.equal(fileSha256(m.disk), disk, "disk untouched");
  });

  test("HookOS signed by a key no db lists, or not signed at all: the firmware refuses to load it and no HookOS runs", { timeout: BOOT_TIMEOUT_MS + 60_000 }, async () => {
    for (const [key, what] of [["rogue", "unlisted key"], ["unsigned", "unsigned"]] as const) {
      const { m, node, disk, refused } = bad[key];
      await refused;
      recordTimes(m, `${what}: refused (firmware)`);
      assert.match(m.console(), /NBP file downloaded successfully/, `${m.name}: the image was downloaded, then refused`);
      assert.doesNotMatch(m.console(), /EFI stub|\[fleetd-hookos\]|Linux version/, `${m.name}: nothing of the image ran`);
      assert.equal(challengeOf(node.serial).length, 0, `${m.name} never reached the server`);
      assert.equal(fileSha256(m.disk), disk, `${m.name}: disk untouched`);
    }
  });

  test("a TPM its node does not approve: the action waits as pending and the server lists its EK", { timeout: BOOT_TIMEOUT_MS + 60_000 }, async () => {
    const { m, tpm, disk } = bad.pending;
    await m.waitForConsole(/"msg":"pending: the server does not know this machine's TPM yet/, "a pending retry", BOOT_TIMEOUT_MS);
    const pending = await w.store.listPendingEks();
    for (const b of [tpm.ek.rsa.binding, tpm.ek.ecc.binding]) assert.ok(pending.some((p) => p.binding === b), `the server lists EK ${b} as pending`);
    // Still waiting: the action has not ended.
    assert.equal(m.markers().find((k) => k.text.startsWith("action exit=")), undefined, "the action is still waiting");
    await m.stop();
    recordTimes(m, "unapproved TPM: pending (stopped)");
    assert.equal(w.signatures(), signaturesBefore, "nothing signed");
    assert.equal(fileSha256(m.disk), disk, "disk untouched");
  });
});

test("the same machine is provisioned: HookOS attests in provision mode and writes the install code into META of the lab OS disk; the lab OS boots from disk, reads META 0x0b with Talos's reader, fetches its config once, Talos's machinery validates it and writes its seed files, the kubelet's TLS bootstrap (the CSR flow a kubelet runs, not a kubelet) gets a client certificate approved by fleetd's CSR gate with the config's bootstrap token, fleetd's node agent copies the seed and passes a runtime attestation (`talos`), and spire-agent attests with tpm_devid on /dev/tpmrm0 and fetches a workload SVID under the node's entry", { timeout: 2 * BOOT_TIMEOUT_MS + 120_000 }, async () => {
  assert.ok(good, "the first test's machine passed intake");
  const g = good;
  // The install action's part, done by the harness until the agent runs the Workflow's containers (the
  // images/agent issue): the lab OS image is written over the machine's disk.
  copyFileSync(kit.labos.disk, g.disk);
  const installed = fileSha256(g.disk);
  const workflow = "fleetd-lab-good-provision-vm";
  const signaturesBefore = w.signatures();
  const requestsBefore = gw.requests.length;
  const prov = await boot({ name: "lab-good-provision", n: 71, tpm: g.tpm, node: g.node, vars: "secureboot", image: "hookos", job: { mode: "provision", workflow, steps: ["attest", "write-meta"] }, again: g });
  const end = await prov.waitForConsole(EXIT_MARKER, "end of the provision job", BOOT_TIMEOUT_MS);
  await prov.qemu.exited;
  recordTimes(prov, "provision: attest + write-meta");
  assert.equal(end.match[1], String(EXIT.ok), `attest and write-meta exit 0; the action's log:\n${actionLogs(prov).map((l) => JSON.stringify(l)).join("\n")}`);
  assert.ok(w.signatures() - signaturesBefore >= 2, "provision re-issued the LDevID and LAK");
  assert.notEqual(fileSha256(g.disk), installed, "write-meta changed the disk");
  const meta = advread(g.disk);
  const code = meta.tags["0x0b"]?.text ?? "";
  assert.match(code, /^[0-9a-f]{64}$/, "META 0x0b holds the install code (Talos's reader, on the host)");

  // The LDevID fleetd issued in this provision pass: the evidence response the machine got through the gateway.
  const issuedNow = evidenceOf(g.node.serial)
    .filter((r) => gw.requests.indexOf(r) >= requestsBefore && r.status === 200)
    .map((r) => JSON.parse(r.responseBody.toString()) as { issued: string; ldevidCertificate?: string; caBundle?: string })
    .filter((b) => b.issued === "new");
  assert.equal(issuedNow.length, 1, "one LDevID/LAK pair issued in the provision pass");
  const provIssued = issuedNow[0] as { ldevidCertificate: string; caBundle: string };
  const leafDer = new Uint8Array(Buffer.from(provIssued.ldevidCertificate, "base64"));
  const leaf = new X509Certificate(Buffer.from(leafDer));
  const [caDer] = certificatesFromPem(provIssued.caBundle, "the provision pass's CA bundle");
  assert.ok(caDer);

  // SPIRE for the node, as the site runs it: spire-server from the shipped server.conf (fleetd's CA bundle as the
  // devid CA, the TPM manufacturer's issuing CA as the endorsement CA), reachable from the boot network by a TCP
  // relay; fleetd's sync (netbox-script publishing spire-nodes.json from NetBox, spire-plugin reconciling it); a
  // workload entry under the node's entry, as an operator registers one (the node's entry itself is the sync's).
  const devidCa = join(dir, "devid-ca-bundle.pem");
  writeFileSync(devidCa, provIssued.caBundle);
  spireServer = await startSpireServer({ devidCaPath: devidCa, endorsementCaPath: w.tpm.caCerts.issuer });
  spireClient = spireServer.client();
  const td = spireServer.trustDomain;
  const spireGw = await net.exposeTcp(`127.0.0.1:${spireServer.port}`, LAB_SPIRE_PORT);
  sync = await startSync(w, dir, { server: spireServer, devidCa });
  const workloadId = `spiffe://${td}/workload/${g.node.name}/labos`;
  const made = await spireClient.batchCreateEntry([{ spiffeId: workloadId, parentId: `spiffe://${td}/node/${g.node.name}`, selectors: [{ type: "unix", value: "uid:0" }] }]);
  assert.deepEqual(made.map((c) => c.status.codeName), ["OK"], JSON.stringify(made));
  assert.deepEqual(await spireClient.listAgents({ byAttestationType: "tpm_devid" }), [], "no agent before the lab OS boots");
  // The workload cluster for the kubelet's bootstrap: fleetd's CSR gate on the world's kube-apiserver (the
  // provision pass made the node's bootstrap token a Secret there), reachable at the configs' cluster endpoint.
  workload = await startWorkloadCluster(w);
  const kubeGw = await net.exposeTcp(new URL(w.cp.server).host, LAB_KUBE_PORT);
  serveLabos(net, g.mac, {
    // the shipped DaemonSet's signal (its containers share the pod's process namespace); the lab OS restarts it
    env: { FLEETD_SERVER: gw.url, FLEETD_ALLOW_HTTP: "lab", FLEETD_LOG_LEVEL: "info", FLEETD_SPIRE_SIGNAL: "process:spire-agent" },
    bundle,
    agentConf: renderSpireConf(readFileSync(SHIPPED_AGENT_CONF, "utf8"), { server_address: net.serverAddress, server_port: String(LAB_SPIRE_PORT) }, AGENT_CONF_SUBSTITUTABLE),
    spireBundle: await spireServer.bundlePem(),
    kubeletBootstrap: kubeletBundle,
  });

  // The BMC's next boot device: the disk. The firmware boots the lab OS (signed by the Talos key) from its ESP.
  const os = await startMachine({ name: "lab-good-os", kit, network: net, port: g.port, tpm: g.tpm, vars: "secureboot", mac: g.mac, smbios: { serial: g.node.serial, uuid: g.uuid }, disk: g.disk, bootFrom: "disk" });
  machines.push(os);
  const done = await os.waitForConsole(/^\[fleetd-labos\] (done|error: .*) \(uptime/m, "the lab OS's end", BOOT_TIMEOUT_MS);
  await os.qemu.exited;
  const marks = os.lines().filter((l) => l.text.startsWith("[fleetd-labos]"));
  const at = (t: string) => marks.find((l) => l.text.includes(t))?.atMs;
  const sec = (ms: number | undefined) => (ms === undefined ? "-" : `${(ms / 1000).toFixed(1)}s`);
  timings.push(
    `  ${"lab-good-os".padEnd(18)} ${"lab OS: config → kubelet → SVID → renewal".padEnd(34)} /init ${sec(at("init:"))}  config ${sec(at("config fetched"))}  kubelet cert ${sec(at("kubelet bootstrap: authenticated"))}  seed ${sec(at("renew --seed-only exit="))}  runtime ${sec(at("runtime attestation passed"))}  spire-agent ${sec(at("spire-agent healthy"))}  svid ${sec(at("] svid spiffe"))}  renewed ${sec(at("renewed: devid leaf"))}  svid again ${sec(at("svid after renewal") ?? at("no svid after renewal"))}  end ${sec(at("] done"))}  total ${sec(os.elapsedMs())}  QEMU CPU ${os.cpuSeconds().toFixed(1)}s`,
  );
  labosMarkers.push(...marks.map((l) => `  ${(l.atMs / 1000).toFixed(1).padStart(6)}s ${l.text}`));
  const context = () => `its console markers:\n${marks.map((l) => l.text).join("\n")}\nsync: ${syncContext(sync)}`;
  assert.equal(done.match[1], "done", `the lab OS finished; ${context()}`);
  const con = os.console();
  assert.match(con, /EFI stub: UEFI Secure Boot is enabled/, "the firmware verified the lab OS (Talos key) with Secure Boot on");
  assert.match(con, /\[fleetd-labos\] META 0x0b: an install code of 64 characters/);
  assert.doesNotMatch(con, new RegExp(code), "the code never appears on the console");
  assert.match(con, /\[fleetd-labos\] config validated exit=0 /, "Talos's machinery validates the fetched config");
  const fetches = gw.requests.filter((r) => r.path.startsWith("/talos/config?"));
  assert.deepEqual(fetches.map((r) => r.status), [200], "one config fetch, served");
  // Fetched once: the same code again is refused.
  const again = await fetch(`${w.baseUrl}/talos/config?uuid=${g.uuid}&code=${code}`);
  assert.equal(again.status, 404, "a second fetch fails");
  // The server marks the device active once the response has gone out (after it, not before): wait for NetBox.
  const status = async () => (await listDevices(w.admin, { name: g.node.name }))[0]?.status;
  await waitFor("the device did not become active", async () => (await status()) === "active", { timeoutMs: 60_000, intervalMs: 250 }).catch(() => undefined);
  assert.equal(await status(), "active", "the device is active once its config was delivered");

  // The kubelet's TLS bootstrap, as the lab OS runs it: the same CSR flow a kubelet's first start runs (no kubelet
  // binary: tests/src/vm/kubeletBootstrap.ts), with the config's per-node bootstrap token, against the real
  // kube-apiserver at the config's cluster endpoint; fleetd's CSR gate approves, kube-controller-manager signs.
  const served = inputsFromTalosConfig((fetches[0] as { responseBody: Buffer }).responseBody.toString("utf8"));
  assert.equal(served.endpoint, `https://${LAB_KUBE_ADDRESS}:${LAB_KUBE_PORT}`, "the config names the exposed API server as the cluster endpoint");
  assert.equal(served.node, g.node.name, "the config's hostname is the node's name");
  const [tokenId, tokenSecret] = served.token.split(".") as [string, string];
  assert.doesNotMatch(con, new RegExp(tokenSecret), "the bootstrap token's secret never appears on the console");
  const csrLine = new RegExp(`\\[fleetd-labos\\] kubelet bootstrap: CSR (csr-[a-z0-9]+) created, requester system:bootstrap:${tokenId}, signer ${KUBELET_CLIENT_SIGNER.replaceAll(".", "\\.")}`).exec(con);
  assert.ok(csrLine, `the lab OS created its CSR with the config's bootstrap token ${tokenId}; ${context()}`);
  const csrName = csrLine[1] as string;
  const csr = await w.kube.certificates.readCertificateSigningRequest({ name: csrName });
  assert.equal(csr.spec.username, `system:bootstrap:${tokenId}`, "the API server recorded the bootstrap token's identity as the requester");
  assert.equal(csr.spec.signerName, KUBELET_CLIENT_SIGNER);
  assert.deepEqual(csr.spec.usages, ["digital signature", "client auth"]);
  const approval = csr.status?.conditions?.find((c) => c.type === "Approved");
  assert.equal(approval?.reason, APPROVED_REASON, `approved by fleetd's CSR gate: ${JSON.stringify(csr.status?.conditions)}`);
  assert.match(approval?.message ?? "", new RegExp(`bootstrap token ${tokenId} was rendered for node ${g.node.name};`));
  assert.equal(csr.status?.conditions?.filter((c) => c.type === "Approved").length, 1, "one approval (kube-controller-manager's approver is refused by fleetd's admission policy)");
  assert.ok(csr.status?.certificate, "kube-controller-manager issued the certificate");
  const kubeletCert = new X509Certificate(Buffer.from(csr.status.certificate, "base64"));
  assert.ok(kubeletCert.verify(new X509Certificate(w.cp.caPem).publicKey), "issued by the cluster CA");
  assert.equal(kubeletCert.subject, `O=system:nodes\nCN=system:node:${g.node.name}`);
  const kubeletCertSha = kubeletCert.fingerprint256.replaceAll(":", "").toLowerCase();
  assert.match(con, new RegExp(`\\[fleetd-labos\\] kubelet bootstrap: certificate issued: .* sha256 ${kubeletCertSha}`), "the lab OS got exactly that certificate");
  assert.match(con, new RegExp(`\\[fleetd-labos\\] kubelet bootstrap: authenticated with the issued certificate as system:node:${g.node.name} groups system:nodes,system:authenticated `), "the API server authenticated the lab OS's client certificate as the node (SelfSubjectReview)");
  assert.ok(kubeGw.connections() > 0, "the lab OS reached the API server through the boot network's relay");
  const kubeJournal = await journalUntil(g.node.name, new RegExp(`kubelet bootstrap CSR ${csrName} approved`));
  assert.match(kubeJournal, new RegExp(`kubelet bootstrap CSR ${csrName} approved: client certificate for system:node:${g.node.name} \\(bootstrap token ${tokenId}, now spent\\)`), `the node's journal records the approval:\n${kubeJournal}`);
  // The negative, on loopback with the same client: another node's fleetd token (edge-1's, as its provision
  // renders one) in lab-good's config asks for system:node:lab-good: denied by the gate, no certificate.
  const other = { id: randomBytes(3).toString("hex"), secret: randomBytes(8).toString("hex") };
  const otherExpiry = new Date(Date.now() + 3600_000);
  await new KubeBootstrapTokens(w.kube).create("edge-1", other, otherExpiry);
  await w.store.setBootstrapToken({ deviceId: await w.deviceId("edge-1"), name: "edge-1" }, other.id, otherExpiry.getTime());
  const otherConfig = join(dir, "lab-good-with-edge-1-token.yaml");
  writeFileSync(otherConfig, (fetches[0] as { responseBody: Buffer }).responseBody.toString("utf8").replace(served.token, `${other.id}.${other.secret}`).replace(served.endpoint, w.cp.server), { mode: 0o600 });
  const neg = await runProcess(process.execPath, [kubeletBundle, "--config", otherConfig, "--timeout-seconds", "120"], { timeoutMs: 180_000 });
  const negResult = bootstrapResultOf(neg.stdout.toString());
  assert.equal(neg.code, 2, `denied: ${neg.stdout.toString()}${neg.stderr.toString()}`);
  assert.equal(negResult?.requester, `system:bootstrap:${other.id}`);
  assert.equal(negResult?.outcome, "denied");
  assert.equal(negResult?.reason, DENIED_REASON);
  assert.match(negResult?.message ?? "", new RegExp(`csr\\.subject\\.cn: subject CN is "system:node:${g.node.name}"; the token was rendered for "system:node:edge-1"`));
  assert.equal((await w.kube.certificates.readCertificateSigningRequest({ name: negResult?.csr ?? "" })).status?.certificate, undefined, "no certificate for the denied CSR");

  // The seed files are the config's machine.files, written under their paths; the node agent copied them once.
  const seedLine = marks.find((l) => l.text.includes("seed files written:"))?.text ?? "";
  for (const f of Object.values(SEED_FILES)) assert.match(seedLine, new RegExp(`${f.replaceAll(".", "\\.")}\\(\\d+\\)`), `${f} written from machine.files`);
  assert.match(con, /\[fleetd-labos\] renew --seed-only exit=0 /, "the node agent copied the seed");
  assert.match(con, /\[fleetd-labos\] devid directory: .*ldevid\.crt->/, "the devid directory's fixed names are links to a generation");
  assert.match(con, new RegExp(`\\[fleetd-labos\\] devid leaf sha1=${sha1(leafDer)} `), "the devid directory holds exactly the LDevID leaf of this provision pass");
  // The node agent's runtime attestation (quote signed by the LAK) passed, judged by the `talos` profile.
  assert.match(con, /\[fleetd-labos\] node agent: runtime attestation passed /, "the node agent's runtime attestation passed");
  const journal = await journalUntil(g.node.name, /runtime attestation passed \(profile talos\)/);
  assert.match(journal, /runtime attestation passed \(profile talos\)/, `the node's journal records the runtime pass:\n${journal}`);

  // The renewal: the node agent's runtime attestations through the gateway — the first asks `attest` (not due), a
  // later one `renew`, whose pass issued the next generation for the same TPM key.
  const renewals = gw.requests.filter((r) => r.path === "/v1/renew/challenge" && r.status === 200).map((r) => (JSON.parse(r.requestBody.toString()) as { purpose: string }).purpose);
  assert.equal(renewals[0], "attest", `the first runtime attestation is not a renewal: ${JSON.stringify(renewals)}`);
  assert.ok(renewals.includes("renew"), `a renewal was asked: ${JSON.stringify(renewals)}`);
  const renewedNow = gw.requests
    .filter((r) => r.path === "/v1/renew/evidence" && r.status === 200)
    .map((r) => JSON.parse(r.responseBody.toString()) as { issued: string; ldevidCertificate?: string })
    .filter((b) => b.issued === "new");
  assert.equal(renewedNow.length, 1, "one renewal issued");
  const renewedDer = new Uint8Array(Buffer.from((renewedNow[0] as { ldevidCertificate: string }).ldevidCertificate, "base64"));
  const renewed = new X509Certificate(Buffer.from(renewedDer));
  assert.equal(gw.requests.filter((r) => r.path === "/v1/renew/confirm").map((r) => r.status).join(","), "200", "the renewal was confirmed once");
  const gen = (x: X509Certificate) => Number(/\.g(\d+)$/.exec(cnOf(x, "subject"))?.[1]);
  assert.equal(gen(renewed), gen(leaf) + 1, `the renewed LDevID is the next generation: ${cnOf(leaf, "subject")} → ${cnOf(renewed, "subject")}`);
  assert.ok(renewed.publicKey.equals(leaf.publicKey), "renewed for the same TPM key");
  assert.match(con, new RegExp(`\\[fleetd-labos\\] renewed: devid leaf sha1=${sha1(renewedDer)} `), "the devid directory's current generation is the renewed LDevID");
  const renewJournal = await journalUntil(g.node.name, /issued for the same key/);
  assert.match(renewJournal, /runtime attestation passed \(profile talos\); LDevID g\d+ issued for the same key/, `the node's journal records the renewal:\n${renewJournal}`);

  // spire-agent in the machine attested with tpm_devid as the agent ID SPIRE derives from exactly the provision
  // pass's leaf (its console; SPIRE lists it no more once the renewed LDevID attested, below).
  const provId = tpmDevidAgentId(td, leafDer);
  assert.equal(provId, `spiffe://${td}/spire/agent/tpm_devid/${sha1(leafDer)}`);
  const q = (x: string) => x.replaceAll(".", "\\.");
  assert.match(con, new RegExp(`\\[fleetd-labos\\] spire-agent healthy \\(start 1\\): "msg":"Node attestation was successful" "spiffe_id":"${q(provId)}"`), "the first start attested (tpm_devid) as the provision pass's LDevID");
  assert.match(con, /\[fleetd-labos\] spire-agent exited rc=\d+ \(start 1\)/, "the node agent's signal ended the first spire-agent after the renewal");
  // The restart alone keeps the agent SVID spire-agent's data_dir holds (SPIRE's agent attests only without one:
  // "SVID loaded"); what makes SPIRE see the renewed LDevID is fleetd's sync, which deletes the agent carrying the
  // old CN once it moved the node entry: SPIRE answers that agent "not attested" and it attests again (tpm_devid
  // is re-attestable) with the renewed LDevID, as the agent ID SPIRE derives from the renewed leaf.
  const renewedId = tpmDevidAgentId(td, renewedDer);
  assert.match(con, new RegExp(`\\[fleetd-labos\\] spire-agent attested again: "msg":"(Successfully reattested node|Node attestation was successful)" "spiffe_id":"${q(renewedId)}"`), "spire-agent attested again as the renewed LDevID");
  const spire = spireClient as SpireServerClient;
  const after = await pollValue("SPIRE's agents: only the renewed LDevID's", async () => {
    const list = await spire.listAgents({ byAttestationType: "tpm_devid" });
    return list.length === 1 && list[0]?.id === renewedId ? list : undefined;
  }, { timeoutMs: 60_000, intervalMs: 500, context: () => syncContext(sync) });
  assert.ok(after[0]?.selectors.some((x) => x.value === `subject:cn:${cnOf(renewed, "subject")}`), `the re-attested agent carries the renewed CN: ${JSON.stringify(after[0]?.selectors)}`);
  assert.ok(!after.some((a) => a.banned), "no agent is banned (the old one was deleted, to attest again, not banned)");
  assert.ok(spireGw.connections() > 0, "the agents reached the server through the boot network's relay");
  // The node's entry is fleetd's sync's (its deterministic ID), and the workload's SVID came through the Workload API.
  const [entry] = await pollValue("the sync's node entry", async () => {
    const e = await nodeEntries({ server: spireServer as SpireServer, spire: spireClient as SpireServerClient }, g.node.name);
    return e.length > 0 ? e : undefined;
  }, { timeoutMs: 30_000, intervalMs: 250, context: () => syncContext(sync) });
  assert.equal(entry?.id, nodeEntryId(g.node.name, sha1(caDer)), "the node entry was made by fleetd's sync");
  assert.match(con, new RegExp(`^\\[fleetd-labos\\] svid ${q(workloadId)} devid leaf sha1=${sha1(leafDer)} `, "m"), "the workload's X.509-SVID, fetched in the machine, names the workload under the node's entry");
  // After the renewal fleetd's sync moved the node entry to the renewed LDevID's CN (NetBox's ldevid_cn), and the
  // workload's SVID, fetched in the machine after the agent attested again, still names the workload.
  const moved = await pollValue("the sync's node entry naming the renewed LDevID's CN", async () => {
    const [e] = await nodeEntries({ server: spireServer as SpireServer, spire: spireClient as SpireServerClient }, g.node.name);
    return e?.selectors.some((x) => x.value === `subject:cn:${cnOf(renewed, "subject")}`) ? e : undefined;
  }, { timeoutMs: 60_000, intervalMs: 500, context: () => syncContext(sync) });
  assert.equal(moved.id, entry?.id, "the same entry, updated by the sync");
  assert.match(con, new RegExp(`^\\[fleetd-labos\\] svid after renewal ${q(workloadId)} devid leaf sha1=${sha1(renewedDer)} `, "m"), "the workload's SVID is served again after the renewal");
});
