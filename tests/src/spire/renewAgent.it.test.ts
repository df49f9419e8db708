/**
 * The node agent (`fleetd-tink-action renew`) on the real platform: the attestation world (NetBox, swtpm, the CA
 * key in SoftHSM2, fleetd's server with renewal) provisions worker-1; its seed directory is written from the Talos
 * config the server rendered (machine.files of the one-time config fetch); worker-1 reboots into Talos (the swtpm
 * power-cycled, its PCRs carrying a Talos boot); a real spire-server and spire-agent (v1.13.3, the shipped confs,
 * tpm_devid over a Unix socket to worker-1's swtpm, a data_dir kept across its restarts as a node's volume is)
 * attest with the files in the agent's devid directory; spire-plugin's sync (EntrySync, passes run by the test)
 * keeps worker-1's node entry at the CN of the list it reads.
 *
 *  1. start: the seed is copied once, the runtime attestation passes; spire-agent attests with the seed's LDevID;
 *     the sync makes worker-1's node entry and a workload under it gets an X.509-SVID;
 *  2. renewal when due (certificates of minutes, the server's and the agent's clocks moved less than the issuer's
 *     5-minute backdating, so every certificate stays valid by the real clock SPIRE checks): the next generation
 *     in the devid directory, the seed untouched, spire-agent signalled (pidfile) and started again on its kept
 *     data_dir — it loads its agent SVID and does not attest (SPIRE still lists the seed's agent only); the list
 *     names the renewed CN, the sync moves the entry and deletes the seed's agent, and spire-agent attests again
 *     with the renewed LDevID: its agent ID is the SHA-1 of the renewed leaf, its selectors carry `…g<n+1>` and
 *     not the old CN, the seed's agent is gone, the sync's re-attestation is done, and the workload's SVID comes
 *     again;
 *  3. a tampered log on the next start: refused (exit 1) with the server's reasons, nothing swapped.
 * The agent runs in this process (runRenew, one attempt per start as after a container restart) so its clock can
 * follow the server's test clock.
 */
import { strict as assert } from "node:assert";
import { createHash, X509Certificate } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { Writable } from "node:stream";
import { after, before, test } from "node:test";
import pino from "pino";
import { parse as parseYaml } from "yaml";
import { certificatesFromPem, renewalTime } from "@fleetd/platform/pki";
import { fetchX509Svids, fileDocument, nodeSpiffeId, parseSyncStatus, rootFingerprintsOfFile, serverId, type SpireServerClient, tpmDevidAgentId } from "@fleetd/platform/spire";
import { SEED_FILES } from "@fleetd/platform/talos/config";
import { certificateToPem } from "@fleetd/verify/x509";
import { EXIT } from "@fleetd/platform/cmd";
import { createSyncMetrics, EntrySync } from "@fleetd/spire-plugin";
import { runRenew } from "@fleetd/tink-action/renewCommand";
import { loadRenewConfig, type RenewConfig } from "@fleetd/tink-action/renewConfig";
import { issued, runHonest } from "../attestation/machine.js";
import { NODE, startWorld, type World } from "../attestation/world.js";
import { pollValue } from "../harness/ports.js";
import { startSpireAgent, startSpireServer, type SpireAgent, type SpireServer } from "../harness/spire.js";
import { tpmUnixSocket, type TpmUnixSocket } from "../harness/tpmUnixSocket.js";
import { TALOS_VERSION } from "../talos/goTools.js";

/** 15 minutes: renewal due 5 minutes after issuance (notBefore is backdated 5 minutes), valid 10 minutes after. */
const LIFETIME_DAYS = 15 / 1440;
/** The server backdates notBefore by 5 minutes: a clock moved by less than that still issues valid certificates. */
const MAX_CLOCK_SHIFT_MS = 4.5 * 60_000;

const sha1 = (der: Uint8Array) => createHash("sha1").update(der).digest("hex");
const cnOf = (der: Uint8Array) => /(?:^|\n)CN=([^\n]+)/.exec(new X509Certificate(Buffer.from(der)).subject)?.[1] ?? "";
const leafOf = (pemFile: string) => certificatesFromPem(readFileSync(pemFile, "utf8"), pemFile)[0] as Uint8Array;

let w: World;
let dir: string;
let seedDir: string;
let devidDir: string;
let eventLogFile: string;
let pidFile: string;
let server: SpireServer;
let spire: SpireServerClient;
let door: TpmUnixSocket;
let agent: SpireAgent | undefined;
let cfg: RenewConfig;
let seedLeaf: Uint8Array;
let agentData: string;
let sync: EntrySync;
let listFile: string;
let statusFile: string;
let root: string;
let workloadId: string;
/** The agent's and the server's clock offset (ms). */
let offset = 0;

function snapshot(d: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of readdirSync(d, { recursive: true, withFileTypes: true })) {
    const p = join(e.parentPath, e.name);
    if (e.isSymbolicLink()) out[p] = `-> ${readlinkSync(p)}`;
    else if (e.isFile()) out[p] = createHash("sha256").update(readFileSync(p)).digest("hex");
  }
  return out;
}

/** One start of the agent (as after a container restart): one attempt, its log lines and exit code. */
async function start(): Promise<{ code: number; lines: Record<string, unknown>[] }> {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString("utf8").split("\n").filter(Boolean)) lines.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  const code = await runRenew(cfg, { once: true, log: pino({ level: "debug" }, sink), deps: { now: () => new Date(Date.now() + offset) } });
  return { code, lines };
}

async function tpmDevidAgents() {
  return spire.listAgents({ byAttestationType: "tpm_devid" });
}

/** spire-nodes.json naming worker-1 with `leaf`'s CN (what netbox-script publishes after a runtime pass). */
function publishList(leaf: Uint8Array): void {
  const x = new X509Certificate(Buffer.from(leaf));
  const at = new Date().toISOString();
  writeFileSync(listFile, JSON.stringify({
    apiVersion: "fleetd.io/spire-nodes/v1",
    trustDomain: server.trustDomain,
    caFingerprints: [root],
    nodes: [{ name: NODE, spiffeId: nodeSpiffeId(server.trustDomain, NODE), cn: cnOf(leaf), verdict: "pass", verdictAt: at, role: "worker", ldevidNotAfter: new Date(x.validTo).toISOString() }],
  }));
}

/** The workload's X.509-SVID through the agent's Workload API (SPIRE propagates in about 5 s per cache). */
async function workloadSvid(): Promise<void> {
  await pollValue("the workload's X.509-SVID through the Workload API", async () => {
    const got = await fetchX509Svids((agent as SpireAgent).socketPath).catch(() => []);
    return got.some((x) => x.spiffeId === workloadId) ? true : undefined;
  }, { timeoutMs: 90_000, intervalMs: 500, context: () => agent?.process.tail(20) ?? "" });
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "fleetd-renew-agent-it-"));
  seedDir = join(dir, "seed");
  devidDir = join(dir, "devid");
  eventLogFile = join(dir, "binary_bios_measurements");
  pidFile = join(dir, "spire-agent.pid");
  agentData = join(dir, "spire-agent-data");
  listFile = join(dir, "spire-nodes.json");
  statusFile = join(dir, "spire-sync-status.json");
  mkdirSync(seedDir);
  w = await startWorld({ talosVersion: TALOS_VERSION, ldevidLifetimeDays: LIFETIME_DAYS });
  await w.kube.core.createNode({ body: { metadata: { name: NODE } } });
  assert.equal((await runHonest(w, "intake")).mode, "intake");
  const r = await runHonest(w, "provision");
  const i = issued(r);
  assert.ok(r.installCode, "provision released the install code");
  // The seed directory as Talos writes it: machine.files of the config the server rendered for worker-1.
  const res = await fetch(`${w.baseUrl}/talos/config?uuid=${w.claims().uuid}&code=${r.installCode}`);
  assert.equal(res.status, 200);
  const config = parseYaml(await res.text()) as { machine: { files: { path: string; content: string; permissions: number }[] } };
  for (const f of config.machine.files) {
    assert.ok(f.path.startsWith("/var/lib/fleetd/seed/"), f.path);
    writeFileSync(join(seedDir, basename(f.path)), f.content, { mode: f.permissions });
  }
  // the seed carries the LAK certificate the provision issued (SEED_FILES.lakCertPem): the agent presents it
  assert.equal(Buffer.from(readFileSync(join(seedDir, SEED_FILES.lakCertPem), "utf8"), "base64").toString(), certificateToPem(i.lak.certificate));
  seedLeaf = i.ldevid.certificate;
  // worker-1 boots the installed Talos: the runtime attestation judges that boot
  writeFileSync(eventLogFile, await w.reboot(NODE, "talos"));
  const devidCa = join(dir, "devid-ca-bundle.pem");
  writeFileSync(devidCa, i.caBundle);
  server = await startSpireServer({ devidCaPath: devidCa, endorsementCaPath: w.tpm.caCerts.issuer });
  spire = server.client();
  root = rootFingerprintsOfFile(devidCa)[0] as string;
  sync = new EntrySync({
    client: spire, trustDomain: server.trustDomain, trustedRoots: () => rootFingerprintsOfFile(devidCa), list: fileDocument(listFile), status: fileDocument(statusFile),
    log: pino({ level: process.env["FLEETD_TEST_LOG"] ?? "silent" }), metrics: createSyncMetrics(), intervalMs: 3_600_000, maxListBytes: 1 << 20,
  });
  door = await tpmUnixSocket(join(dir, "tpm.sock"), { host: w.tpm.host, port: w.tpm.port });
  cfg = loadRenewConfig({
    FLEETD_SERVER: w.baseUrl,
    FLEETD_ALLOW_HTTP: "lab",
    FLEETD_SEED_DIR: seedDir,
    FLEETD_DEVID_DIR: devidDir,
    FLEETD_TPM: `swtpm:${w.tpm.host}:${w.tpm.port}`,
    FLEETD_EVENT_LOG: eventLogFile,
    FLEETD_SPIRE_SIGNAL: `pidfile:${pidFile}`,
    FLEETD_STATUS_FILE: join(dir, "status.json"),
    FLEETD_RENEW_OUTAGE_SECONDS: "30",
  });
}, { timeout: 25 * 60_000 });

after(async () => {
  spire?.close();
  await agent?.stop();
  await door?.close();
  await server?.stop();
  await w?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const devidFiles = () => ({ cert: join(devidDir, "ldevid.crt"), pub: join(devidDir, "ldevid.pub"), priv: join(devidDir, "ldevid.priv") });
const status = () => JSON.parse(readFileSync(cfg.statusFile, "utf8")) as { verdict: string; ready: boolean; generation: number; refused: boolean; reasons: { check: string }[] };

test("start: the seed is copied into the devid directory once and the runtime attestation passes; spire-agent attests with the seed's LDevID", async (t) => {
  const seedBefore = snapshot(seedDir);
  const first = await start();
  assert.equal(first.code, EXIT.ok, JSON.stringify(first.lines.filter((l) => (l["level"] as number) >= 40)));
  assert.ok(first.lines.some((l) => /copied the seed/.test(String(l["msg"]))));
  assert.ok(first.lines.some((l) => l["msg"] === "runtime verdict pass" && l["purpose"] === "attest"), "purpose attest: the seed's LDevID is not due yet");
  assert.deepEqual(leafOf(join(devidDir, "ldevid.crt")), seedLeaf);
  assert.deepEqual([status().verdict, status().ready], ["pass", true]);
  // a second start (the next boot) copies nothing and attests again
  const devidBefore = snapshot(devidDir);
  const second = await start();
  assert.equal(second.code, EXIT.ok);
  assert.ok(second.lines.some((l) => /the seed is not copied again/.test(String(l["msg"]))));
  assert.deepEqual(snapshot(devidDir), devidBefore, "the devid directory is unchanged");
  assert.deepEqual(snapshot(seedDir), seedBefore, "the seed is untouched");

  agent = await startSpireAgent(server, { tpmSocketPath: door.path, devid: devidFiles(), dataDir: agentData });
  const agents = await tpmDevidAgents();
  assert.deepEqual(agents.map((a) => a.id), [tpmDevidAgentId(server.trustDomain, seedLeaf)]);
  assert.ok(agents[0]?.selectors.some((s) => s.value === `subject:cn:${cnOf(seedLeaf)}`));

  // the sync makes worker-1's node entry; a workload under it gets its SVID through this agent
  workloadId = `spiffe://${server.trustDomain}/workload/${NODE}/renew`;
  const made = await spire.batchCreateEntry([{ spiffeId: workloadId, parentId: nodeSpiffeId(server.trustDomain, NODE), selectors: [{ type: "unix", value: `uid:${process.getuid?.() ?? 0}` }] }]);
  assert.deepEqual(made.map((m) => m.status.codeName), ["OK"]);
  publishList(seedLeaf);
  const p = await sync.pass(false);
  assert.deepEqual([p.outcome, p.creates, p.reattested], ["converged", 1, []], JSON.stringify(p));
  const [entry] = await spire.listEntriesPage({ byParentId: serverId(server.trustDomain) }, 10, "").then((r) => r.entries);
  assert.ok(entry?.selectors.some((s) => s.value === `subject:cn:${cnOf(seedLeaf)}`), JSON.stringify(entry));
  await workloadSvid();
});

test("renewal when due: the next generation in the devid directory, the seed untouched; spire-agent restarted on its kept data_dir loads its SVID, the sync moves the entry and deletes the old agent, and spire-agent attests again with the renewed LDevID", async () => {
  assert.ok(agent, "spire-agent runs");
  const seedBefore = snapshot(seedDir);
  // due at two thirds of the lifetime: move both clocks there (by less than the backdating), waiting if needed
  let shift = renewalTime(seedLeaf).getTime() - Date.now() + 2_000;
  if (shift > MAX_CLOCK_SHIFT_MS) {
    await new Promise((r) => setTimeout(r, shift - MAX_CLOCK_SHIFT_MS));
    shift = MAX_CLOCK_SHIFT_MS;
  }
  if (shift > 0) {
    offset += shift;
    w.advanceClock(shift);
  }
  writeFileSync(pidFile, `${agent.process.child.pid}\n`);
  const r = await start();
  assert.equal(r.code, EXIT.ok, JSON.stringify(r.lines.filter((l) => (l["level"] as number) >= 40)));
  assert.ok(r.lines.some((l) => l["purpose"] === "renew"), "purpose renew");
  const renewed = leafOf(join(devidDir, "ldevid.crt"));
  const g = Number(/\.g(\d+)$/.exec(cnOf(seedLeaf))?.[1]);
  assert.equal(cnOf(renewed), `${NODE}.g${g + 1}`);
  assert.equal(cnOf(leafOf(join(devidDir, "lak.crt"))), `${NODE}.g${g + 1}.lak`);
  assert.equal(readlinkSync(join(devidDir, "current")), `g${g + 1}`);
  assert.ok(new X509Certificate(Buffer.from(renewed)).publicKey.equals(new X509Certificate(Buffer.from(seedLeaf)).publicKey), "the same TPM key");
  assert.deepEqual(snapshot(seedDir), seedBefore, "the seed is untouched");
  assert.equal(status().generation, g + 1);
  assert.ok(r.lines.some((l) => /signalled spire-agent/.test(String(l["msg"]))));
  const text = r.lines.map((l) => JSON.stringify(l)).join("\n");
  for (const f of ["ldevid.priv", "lak.priv"]) {
    const blob = readFileSync(join(devidDir, f));
    assert.ok(!text.includes(blob.toString("base64")) && !text.includes(blob.toString("hex")), `no ${f} in the logs`);
  }

  // the agent's SIGTERM stops spire-agent; "the kubelet" starts it again on the same files and the kept data_dir
  await pollValue("spire-agent to exit on the agent's signal", async () => agent?.process.exit, { timeoutMs: 60_000, intervalMs: 200, context: () => agent?.process.tail(20) ?? "" });
  await agent.stop();
  agent = await startSpireAgent(server, { tpmSocketPath: door.path, devid: devidFiles(), dataDir: agentData });
  // the restart alone does not attest: spire-agent loads the agent SVID it kept (SPIRE's selectors stay the seed's)
  const seedId = tpmDevidAgentId(server.trustDomain, seedLeaf);
  assert.match(readFileSync(join(agent.dir, "agent.log"), "utf8"), /SVID loaded/, "the restarted spire-agent loaded its kept SVID");
  assert.deepEqual((await tpmDevidAgents()).map((x) => x.id), [seedId], "no attestation with the renewed leaf yet");

  // the list names the renewed CN (NetBox's ldevid_cn after the renewal): the sync moves the entry and deletes the
  // agent still carrying the seed's CN, and spire-agent attests again with the renewed LDevID it loaded at its start
  publishList(renewed);
  const moved = await sync.pass(false);
  assert.deepEqual([moved.outcome, moved.updates, moved.reattested], ["converged", 1, [seedId]], JSON.stringify(moved));
  assert.deepEqual(parseSyncStatus(readFileSync(statusFile)).pendingReattests?.map((r) => r.node), [NODE], "pending until the renewed CN's agent is listed");
  const renewedId = tpmDevidAgentId(server.trustDomain, renewed);
  assert.equal(renewedId, `spiffe://${server.trustDomain}/spire/agent/tpm_devid/${sha1(renewed)}`);
  const t0 = Date.now();
  const a = await pollValue("spire-agent to attest again with the renewed leaf", async () => (await tpmDevidAgents()).find((x) => x.id === renewedId), { timeoutMs: 90_000, intervalMs: 500, context: () => agent?.process.tail(30) ?? "" });
  console.log(`[renewAgent.it] re-attested ${((Date.now() - t0) / 1000).toFixed(1)} s after the sync deleted the seed's agent`);
  const reattestedAt = Date.now();
  assert.notEqual(renewedId, seedId, "not the seed's");
  const selectors = a.selectors.map((s) => s.value);
  assert.ok(selectors.includes(`subject:cn:${NODE}.g${g + 1}`), selectors.join(", "));
  assert.ok(!selectors.includes(`subject:cn:${cnOf(seedLeaf)}`), "the old CN no longer appears");
  assert.deepEqual((await tpmDevidAgents()).map((x) => x.id), [renewedId], "the seed's agent is gone");
  assert.match(readFileSync(join(agent.dir, "agent.log"), "utf8"), /Successfully reattested node/, "the running spire-agent re-attested (no restart)");
  // the next pass finds the renewed CN's agent: nothing deleted, the re-attestation is done
  const done = await sync.pass(false);
  assert.deepEqual([done.outcome, done.updates, done.reattested], ["converged", 0, []], JSON.stringify(done));
  assert.equal(parseSyncStatus(readFileSync(statusFile)).pendingReattests, undefined);
  // spire-agent attested through worker-1's TPM with the renewed files, and serves the workload under the moved entry:
  // asked after two of its syncs (5 s each) past the re-attestation, so an agent SPIRE no longer authorised for the
  // entry would have dropped it by then (what the VM saw without the deletion: "no identity issued")
  assert.ok(existsSync(agent.socketPath));
  await new Promise((r) => setTimeout(r, Math.max(0, 11_000 - (Date.now() - reattestedAt))));
  await workloadSvid();
});

test("a tampered log on the next start: the agent reports the server's refusal (exit 1) and swaps nothing", async () => {
  writeFileSync(eventLogFile, await w.reboot(NODE, "talos", { tamperAuthority: true }));
  const before = snapshot(devidDir);
  const r = await start();
  assert.equal(r.code, EXIT.refused);
  const line = r.lines.find((l) => l["code"] === "refused");
  assert.ok(line, "the refusal is logged");
  assert.equal(line["status"], 403);
  const reasons = line["reasons"] as { check: string; event?: number }[];
  assert.ok(reasons.some((x) => x.check.startsWith("policy.") && x.event !== undefined), JSON.stringify(reasons));
  assert.deepEqual(snapshot(devidDir), before, "nothing swapped");
  const s = status();
  assert.deepEqual([s.verdict, s.ready, s.refused], ["failed", false, true]);
  assert.ok(!r.lines.some((l) => /signalled spire-agent/.test(String(l["msg"]))), "spire-agent is not restarted");
});
