/**
 * SPIRE end to end, all real and on loopback: the attestation world (NetBox, swtpm, the CA key in SoftHSM2,
 * fleetd's attestation server) issues worker-1 its TPM-resident LDevID; tink-action's own output writer puts the
 * certificate and key blobs where the shipped agent.conf reads them; a real spire-server (the shipped
 * server.conf: tpm_devid with fleetd's CA bundle and the swtpm manufacturer's issuing CA) and a real spire-agent
 * (tpm_devid against worker-1's swtpm, through a Unix socket) run v1.13.3. Entries are made through fleetd's SPIRE
 * adapter (shared/platform/src/spire); the SVID is read through the Workload API.
 */
import { strict as assert } from "node:assert";
import { createHash, X509Certificate } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { certificatesFromPem } from "@fleetd/platform/pki";
import { outageOf } from "@fleetd/platform/outage";
import { SpireApiError, type SpireServerClient, serverId, tpmDevidAgentId, fetchX509Svids, type X509Svid } from "@fleetd/platform/spire";
import { writeSuccess } from "@fleetd/tink-action/outputs";
import { issued, runHonest } from "../attestation/machine.js";
import { NODE, startWorld, type World } from "../attestation/world.js";
import { pollValue } from "../harness/ports.js";
import {
  AGENT_CONF_SUBSTITUTABLE, SERVER_CONF_SUBSTITUTABLE, SHIPPED_AGENT_CONF, SHIPPED_SERVER_CONF, startSpireAgent,
  startSpireServer, type DevidFiles, type SpireAgent, type SpireServer,
} from "../harness/spire.js";
import { tpmUnixSocket, type TpmUnixSocket } from "../harness/tpmUnixSocket.js";
import { changedValues } from "./confDiff.js";
import { TALOS_VERSION } from "../talos/goTools.js";

const sha1 = (der: Uint8Array) => createHash("sha1").update(der).digest("hex");
const cnOf = (x: X509Certificate, field: "subject" | "issuer") => /(?:^|\n)CN=([^\n]+)/.exec(x[field])?.[1] ?? "";

let w: World;
let dir: string;
let server: SpireServer;
let agent: SpireAgent;
let door: TpmUnixSocket;
let spire: SpireServerClient;
/** The LDevID fleetd issued to worker-1, and fleetd's CA. */
let leaf: X509Certificate;
let leafDer: Uint8Array;
let caDer: Uint8Array;
let devidFiles: DevidFiles;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "fleetd-spire-e2e-"));
  w = await startWorld({ talosVersion: TALOS_VERSION });
  // worker-1 is taken in and provisioned: the provision pass issues its LDevID and LAK into its TPM.
  assert.equal((await runHonest(w, "intake")).mode, "intake");
  const r = await runHonest(w, "provision");
  const i = issued(r);
  // The files as tink-action writes them on the workflow's volume (ldevid.crt = certificate + CA bundle).
  const devidDir = join(dir, "devid");
  writeSuccess(devidDir, r, { workflow: "e2e", claims: w.claims({ mode: "provision" }), attempts: 1, tpm: "swtpm" });
  leafDer = i.ldevid.certificate;
  leaf = new X509Certificate(Buffer.from(leafDer));
  const bundle = certificatesFromPem(i.caBundle, "CA bundle");
  assert.equal(bundle.length, 1, "the world has one CA");
  caDer = bundle[0] as Uint8Array;
  const devidCa = join(dir, "devid-ca-bundle.pem");
  writeFileSync(devidCa, i.caBundle);
  server = await startSpireServer({ devidCaPath: devidCa, endorsementCaPath: w.tpm.caCerts.issuer });
  spire = server.client();
  door = await tpmUnixSocket(join(dir, "tpm.sock"), { host: w.tpm.host, port: w.tpm.port });
  devidFiles = { cert: join(devidDir, "ldevid.crt"), pub: join(devidDir, "ldevid.pub"), priv: join(devidDir, "ldevid.priv") };
  agent = await startSpireAgent(server, { tpmSocketPath: door.path, devid: devidFiles });
}, { timeout: 25 * 60_000 });

after(async () => {
  spire?.close();
  await agent?.stop();
  await door?.close();
  await server?.stop();
  await w?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("the server and the agent run the shipped configs; only paths, ports and addresses differ", () => {
  const s = changedValues(readFileSync(SHIPPED_SERVER_CONF, "utf8"), readFileSync(server.configFile, "utf8"));
  for (const k of s.keys()) assert.ok((SERVER_CONF_SUBSTITUTABLE as readonly string[]).includes(k), `server.conf: ${k} changed`);
  assert.equal(s.get("bind_address")?.ran, "127.0.0.1");
  const a = changedValues(readFileSync(SHIPPED_AGENT_CONF, "utf8"), readFileSync(agent.configFile, "utf8"));
  for (const k of a.keys()) assert.ok((AGENT_CONF_SUBSTITUTABLE as readonly string[]).includes(k), `agent.conf: ${k} changed`);
  assert.equal(a.get("tpm_device_path")?.ran, door.path);
});

test("the agent attested with tpm_devid using worker-1's LDevID: agent ID from the leaf's SHA-1, selectors CN, issuer CN, CA fingerprint", async () => {
  const agents = await spire.listAgents({ byAttestationType: "tpm_devid" });
  assert.equal(agents.length, 1, JSON.stringify(agents));
  const a = agents[0] as (typeof agents)[number];
  assert.equal(a.id, tpmDevidAgentId(server.trustDomain, leafDer));
  assert.equal(a.id, `spiffe://${server.trustDomain}/spire/agent/tpm_devid/${sha1(leafDer)}`);
  assert.equal(a.banned, false);
  assert.equal(a.canReattest, true);
  assert.match(cnOf(leaf, "subject"), new RegExp(`^${NODE}\\.g\\d+$`), "fleetd's LDevID CN is <node>.g<generation>");
  const selectors = a.selectors.map((s) => `${s.type}:${s.value}`).sort();
  assert.deepEqual(selectors, [`tpm_devid:ca:fingerprint:${sha1(caDer)}`, `tpm_devid:issuer:cn:${cnOf(leaf, "issuer")}`, `tpm_devid:subject:cn:${cnOf(leaf, "subject")}`].sort());
  assert.ok(door.connections() > 10, "the agent spoke to worker-1's TPM (credential activation, certify, the DevID signature)");
});

test("a node entry made through the adapter makes the agent that node: a workload entry parented to it yields an X.509-SVID through the Workload API", async () => {
  const td = server.trustDomain;
  const nodeId = `spiffe://${td}/node/${NODE}`;
  const workloadId = `spiffe://${td}/workload/${NODE}/e2e`;
  const uid = process.getuid?.() ?? 0;
  const created = await spire.batchCreateEntry([
    {
      id: `fleetd.node.${NODE}`,
      spiffeId: nodeId,
      parentId: serverId(td),
      selectors: [
        { type: "tpm_devid", value: `subject:cn:${cnOf(leaf, "subject")}` },
        { type: "tpm_devid", value: `ca:fingerprint:${sha1(caDer)}` },
      ],
    },
    { spiffeId: workloadId, parentId: nodeId, selectors: [{ type: "unix", value: `uid:${uid}` }] },
    // a node no agent is (another CN) and a workload under it: never this agent's
    { spiffeId: `spiffe://${td}/node/decoy`, parentId: serverId(td), selectors: [{ type: "tpm_devid", value: "subject:cn:decoy.g1" }] },
    { spiffeId: `spiffe://${td}/workload/decoy`, parentId: `spiffe://${td}/node/decoy`, selectors: [{ type: "unix", value: `uid:${uid}` }] },
  ]);
  assert.deepEqual(created.map((c) => c.status.codeName), ["OK", "OK", "OK", "OK"], JSON.stringify(created));
  assert.equal(created[0]?.entry?.id, `fleetd.node.${NODE}`, "the client-chosen ID is kept");

  // SPIRE propagates eventually (server cache reload and agent sync, about 5 s each): wait for the SVID.
  const svids = await pollValue(
    "the workload's X.509-SVID through the Workload API",
    async () => {
      const got = await fetchX509Svids(agent.socketPath);
      return got.some((s) => s.spiffeId === workloadId) ? got : undefined;
    },
    { timeoutMs: 90_000, intervalMs: 500, context: () => agent.process.tail(20) },
  );
  assert.deepEqual(
    svids.map((s) => s.spiffeId),
    [workloadId],
    "exactly the workload under this node: not the alias itself, not the decoy's",
  );
  const svid = svids[0] as X509Svid;
  const cert = new X509Certificate(Buffer.from(svid.certificates[0] as Uint8Array));
  assert.equal(cert.subjectAltName, `URI:${workloadId}`, "the SVID's URI SAN is its SPIFFE ID");
  const authorities = svid.bundle.map((b) => new X509Certificate(Buffer.from(b)));
  const serverBundle = certificatesFromPem(await server.bundlePem(), "server bundle").map((b) => Buffer.from(b).toString("hex"));
  assert.deepEqual(svid.bundle.map((b) => Buffer.from(b).toString("hex")).sort(), serverBundle.sort(), "the bundle is the server's");
  const chain = [...svid.certificates.slice(1).map((c) => new X509Certificate(Buffer.from(c))), ...authorities];
  assert.ok(chain.some((c) => cert.checkIssued(c) && cert.verify(c.publicKey)), "the SVID is signed by the server's CA (or an intermediate it sent)");
  assert.ok(Date.parse(cert.validTo) > Date.now());
});

test("BanAgent, found by the agent ID SPIRE derives from the LDevID leaf; an unknown agent is a refusal, not an outage", async () => {
  const id = tpmDevidAgentId(server.trustDomain, leafDer);
  const unknown = tpmDevidAgentId(server.trustDomain, new Uint8Array([1, 2, 3]));
  await assert.rejects(spire.banAgent(unknown), (e: unknown) => e instanceof SpireApiError && e.code === "spire-refused" && e.grpcCode === 5 && outageOf(e) === undefined);
  await spire.banAgent(id);
  const banned = await spire.listAgents({ byBanned: true });
  assert.deepEqual(
    banned.map((a) => [a.id, a.banned]),
    [[id, true]],
  );
  assert.deepEqual(await spire.listAgents({ byBanned: false }), []);
  // The banned agent's next call to the server is refused (PERMISSION_DENIED, AGENT_BANNED): it removes its SVID
  // and exits (SPIRE pkg/agent/manager/manager.go).
  await pollValue("the banned agent to shut down", async () => agent.process.exit, { timeoutMs: 120_000, intervalMs: 500, context: () => agent.process.tail(20) });
  assert.match(readFileSync(agent.process.logFile, "utf8"), /Agent is banned: removing SVID and shutting down/);
  // A banned agent stays banned until it is deleted; deleting it forgets it, and the same LDevID attests again.
  await spire.deleteAgent(id);
  assert.deepEqual(await spire.listAgents({ byAttestationType: "tpm_devid" }), []);
  await agent.stop();
  agent = await startSpireAgent(server, { tpmSocketPath: door.path, devid: devidFiles });
  assert.deepEqual((await spire.listAgents({ byAttestationType: "tpm_devid" })).map((a) => [a.id, a.banned]), [[id, false]]);
});
