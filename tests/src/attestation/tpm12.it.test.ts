/**
 * The TPM 1.2 variant of the attestation protocol through the HTTP API, on the real world (NetBox with the nodes
 * file applied, kube-apiserver with Tinkerbell's CRDs for the Workflow gate, SoftHSM2 CA, and a real swtpm TPM 1.2
 * whose EK certificate the world's manufacturer CA issued and whose SHA-1 PCRs carry a HookOS boot):
 *  - a TPM 1.2 node's intake passes and records the boot MAC (attributed to the attestation account), and nothing
 *    is issued: the CA signs nothing, no install code is stored;
 *  - its wipe passes (the wipe Workflow's first action) and releases nothing;
 *  - refused, journalled, nothing issued: an unapproved EK (pending), a wrong boot state, a replayed nonce, a
 *    TPM 2.0 mode (provision, attest) on a TPM 1.2 node, a TPM 2.0 node's EK on the TPM 1.2 path, a secret for
 *    another session, a TPM 1.2 session's evidence sent to the TPM 2.0 endpoint.
 */
import { strict as assert } from "node:assert";
import { randomBytes } from "node:crypto";
import { readFileSync, mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { EXIT } from "@fleetd/platform/cmd";
import { readDevice, readJournal } from "@fleetd/platform/netbox";
import { encode } from "@fleetd/verify/codec";
import { readCertificate } from "@fleetd/verify/ek";
import {
  type ServerTransport, attest12, ATTEST12_PATHS, readEkCertificate12, type Challenge12Wire, type Evidence12Wire,
  TPM12_QUOTE_PCRS,
} from "@fleetd/platform/protocol/client";
import { claimsHash, quoteExternalData12, type Claims, type Refusal, type Tpm12ChallengeResponse } from "@fleetd/platform/protocol";
import { TPM_PUBKEY, TPM_RSA_KEY_PARMS, TPM12 } from "@fleetd/verify/tpm12";
import { activateIdentity, createAik, quote, withLoadedAik, Tpm12Client } from "@fleetd/platform/tpm12client";
import { startSwtpm12, type Swtpm12 } from "../harness/swtpm12.js";
import { startLldpSwitchPort } from "../harness/lldp.js";
import { runProcess } from "../harness/process.js";
import { pollValue } from "../harness/ports.js";
import { writeFakeRoot } from "@fleetd/tink-action/testing/fakeRoot";
import { OpenApiValidator, Recorder } from "./openapi.js";
import { NODE, startWorld, type World, type World12Machine } from "./world.js";
import { TcpTransport } from "@fleetd/platform/tpmclient";
import { TALOS_VERSION } from "../talos/goTools.js";

const repo = resolve(fileURLToPath(import.meta.url), "../../../..");
const LEGACY = "legacy-12";
/** A TPM 1.2 machine whose firmware ran with Secure Boot off (its TPM measured that boot). */
const WRONG_BOOT = "legacy-12-wrongboot";

const rnd = (n: number) => new Uint8Array(randomBytes(n));
const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");
const unb64 = (s: string) => new Uint8Array(Buffer.from(s, "base64"));

let w: World;
let stranger: Swtpm12;
before(async () => {
  w = await startWorld({ talosVersion: TALOS_VERSION, tpm12Machines: { [LEGACY]: {}, [WRONG_BOOT]: { boot: { secureBoot: 0 } } } });
  stranger = await startSwtpm12({ caDir: w.tpm.caDir });
}, { timeout: 20 * 60_000 });
after(async () => {
  await stranger?.stop();
  await w?.stop();
});

const m12 = (name: string): World12Machine => w.tpm12[name] as World12Machine;
const journal = async (name: string) => (await readJournal(w.admin, await w.deviceId(name))).map((j) => ({ kind: j.kind, text: j.comments }));

async function post(t: ServerTransport, path: string, body: unknown): Promise<{ status: number; body: unknown }> {
  return t.post(path, body);
}

/** An honest TPM 1.2 machine's challenge, then the evidence body it would send (not sent). */
async function challengeAndEvidence(m: World12Machine, claims: Claims, opts: { tpm?: Swtpm12; transport?: ServerTransport; log?: Uint8Array } = {}) {
  const t = opts.tpm ?? m.tpm;
  const secrets = { ownerAuth: t.ownerAuth, srkAuth: t.srkAuth };
  const c = new Tpm12Client(new TcpTransport(t.host, t.port));
  try {
    const ek = (await c.ownerReadEk(secrets.ownerAuth)).bytes;
    const cert = await readEkCertificate12(c);
    const aik = await createAik(c, secrets, rnd);
    const body: Challenge12Wire = { claims, ek: { pubkey: b64(ek), ...(cert ? { certificate: b64(cert) } : {}) }, aik: { pubkey: b64(aik.pubkey), identityBinding: b64(aik.identityBinding) } };
    const ch = await post(opts.transport ?? w.transport, ATTEST12_PATHS.challenge, body);
    if (ch.status !== 200) return { challenge: ch, evidence: undefined };
    const r = ch.body as Tpm12ChallengeResponse;
    const ext = quoteExternalData12(unb64(r.nonce), r.sessionId, claimsHash(claims));
    const ev = await withLoadedAik(c, secrets, aik, async (h) => {
      const secret = await activateIdentity(c, secrets, aik, h, unb64(r.credential.blob));
      const q = await quote(c, aik, h, ext, TPM12_QUOTE_PCRS);
      const e: Evidence12Wire = { sessionId: r.sessionId, secret: b64(secret), quote: { pcrComposite: b64(q.pcrComposite), signature: b64(q.signature) }, eventLog: b64(opts.log ?? m.eventLog) };
      return e;
    });
    return { challenge: ch, evidence: ev };
  } finally {
    await c.close();
  }
}

/** The honest client end to end (attest12), on a connection closed afterwards (swtpm serves one at a time). */
async function honest12(m: World12Machine, claims: Claims) {
  const tpm = m.client();
  try {
    return await attest12({ tpm, secrets: m.secrets, server: w.transport, claims, eventLog: m.eventLog, random: rnd });
  } finally {
    await tpm.close();
  }
}

const checks = (r: { body: unknown }) => (r.body as Refusal).reasons.map((x) => x.check);

test("a TPM 1.2 node's intake passes through the HTTP API: boot MAC and UUID recorded, journalled, nothing issued", async () => {
  const m = m12(LEGACY);
  const signatures = w.signatures();
  const codes = w.installCodesIssued();
  const claims = m.claims({ mode: "intake" });
  const out = await honest12(m, claims);
  assert.deepEqual(out, { mode: "intake", issued: "none" });
  const d = (await readDevice(w.admin, await w.deviceId(LEGACY))).device;
  assert.equal(d.cf["boot_mac"], claims.bootMac, "the TPM-proven boot MAC is recorded");
  assert.equal(d.cf["attested_uuid"], claims.uuid);
  assert.equal(w.signatures(), signatures, "the CA signed nothing");
  assert.equal(w.installCodesIssued(), codes, "no install code");
  assert.ok((await journal(LEGACY)).some((j) => j.kind === "success" && /intake \(TPM 1\.2\): TPM evidence passed .*profile hookos-tpm12\); nothing issued/.test(j.text)), JSON.stringify(await journal(LEGACY)));
  // The TPM 2.0 confirm has nothing to confirm for it (no certificate was issued).
});

test("a TPM 1.2 node's wipe passes (the wipe Workflow's first action) and releases nothing", async () => {
  const m = m12(LEGACY);
  const signatures = w.signatures();
  const out = await honest12(m, m.claims({ mode: "wipe" }));
  assert.deepEqual(out, { mode: "wipe", issued: "none" });
  assert.equal(w.signatures(), signatures);
  assert.ok((await journal(LEGACY)).some((j) => j.kind === "success" && /wipe \(TPM 1\.2\): TPM evidence passed/.test(j.text)));
});

test("a TPM 2.0 mode on a TPM 1.2 node is refused at the challenge and journalled: provision and attest", async () => {
  const m = m12(LEGACY);
  for (const mode of ["provision", "attest"] as const) {
    const before = (await journal(LEGACY)).length;
    const r = await challengeAndEvidence(m, m.claims({ mode }));
    assert.equal(r.challenge.status, 403);
    assert.deepEqual(checks(r.challenge), ["tpm12.mode"], mode);
    assert.equal(r.evidence, undefined, "no session was opened");
    const after = await journal(LEGACY);
    assert.ok(after.length > before, `${mode}: journalled`);
    assert.ok(after.some((j) => j.text.includes("tpm12 challenge refused") && j.text.includes("tpm12.mode")), JSON.stringify(after));
  }
});

test("an unapproved TPM 1.2 EK is pending (listed for an operator), nothing opened", async () => {
  const claims = m12(LEGACY).claims({ mode: "intake" });
  const r = await challengeAndEvidence(m12(LEGACY), claims, { tpm: stranger });
  assert.equal(r.challenge.status, 403);
  assert.equal((r.challenge.body as Refusal).error, "pending");
  assert.deepEqual(checks(r.challenge), ["ek.unknown"]);
  const pending = await w.store.listPendingEks();
  const cert = readCertificate(new Uint8Array(readFileSync(stranger.ekCertFile))).cert;
  const { ekBindingFromCertificate } = await import("@fleetd/verify/ek");
  assert.ok(pending.some((p) => p.binding === ekBindingFromCertificate(cert)));
});

test("a wrong boot state is refused after activation, journalled as the TPM-proven node failing; the boot MAC is not recorded", async () => {
  const m = m12(WRONG_BOOT);
  const signatures = w.signatures();
  const r = await challengeAndEvidence(m, m.claims({ mode: "intake" }));
  assert.equal(r.challenge.status, 200);
  const ev = await post(w.transport, ATTEST12_PATHS.evidence, r.evidence);
  assert.equal(ev.status, 403);
  assert.ok(checks(ev).some((c) => c.startsWith("policy.")), JSON.stringify(ev.body));
  assert.ok(!checks(ev).includes("quote12.signature"));
  const d = (await readDevice(w.admin, await w.deviceId(WRONG_BOOT))).device;
  assert.ok(!d.cf["boot_mac"], "no boot MAC recorded");
  assert.equal(w.signatures(), signatures);
  assert.ok((await journal(WRONG_BOOT)).some((j) => j.kind === "danger" && j.text.includes("tpm12 evidence refused: ") && j.text.includes("policy.")));
});

test("a replayed nonce, a secret for another session, a changed log and a TPM 1.2 session at the TPM 2.0 endpoint are refused", async () => {
  const m = m12(LEGACY);
  const a = await challengeAndEvidence(m, m.claims({ mode: "intake" }));
  assert.ok(a.evidence);
  const ok = await post(w.transport, ATTEST12_PATHS.evidence, a.evidence);
  assert.equal(ok.status, 200, JSON.stringify(ok.body));
  // The same evidence again (a machine that lost the answer): its kept answer; nothing recorded twice.
  const entries = (await journal(LEGACY)).length;
  const retried = await post(w.transport, ATTEST12_PATHS.evidence, a.evidence);
  assert.equal(retried.status, 200);
  assert.deepEqual(retried.body, ok.body);
  // Other evidence over the spent nonce (here another boot's log) is a reuse.
  const replay = await post(w.transport, ATTEST12_PATHS.evidence, { ...a.evidence, eventLog: b64(m12(WRONG_BOOT).eventLog) });
  assert.equal(replay.status, 409);
  assert.deepEqual(checks(replay), ["nonce.reused"]);
  const id = await w.deviceId(LEGACY);
  await pollValue("the outbox delivered", async () => ((await w.outbox.flush(id)) ? true : undefined), { timeoutMs: 60_000, intervalMs: 500 });
  assert.equal((await journal(LEGACY)).length, entries + 1, "the retry journalled nothing; the reuse once");

  const b = await challengeAndEvidence(m, m.claims({ mode: "intake" }));
  const c = await challengeAndEvidence(m, m.claims({ mode: "intake" }));
  assert.ok(b.evidence && c.evidence);
  const swapped = await post(w.transport, ATTEST12_PATHS.evidence, { ...b.evidence, secret: c.evidence.secret });
  assert.equal(swapped.status, 403);
  assert.ok(checks(swapped).includes("activation.secret"));
  const atTpm2 = await post(w.transport, "/v1/attest/evidence", { sessionId: c.evidence.sessionId, secrets: [c.evidence.secret], quote: { message: "AA==", signature: "AA==", pcrs: [{ bank: "sha1", pcr: 0, value: "00".repeat(20) }] }, eventLog: "AA==", ldevid: { public: "AA==", private: "AA==", certifyInfo: "AA==", signature: "AA==" }, lak: { public: "AA==", private: "AA==", certifyInfo: "AA==", signature: "AA==" } });
  assert.equal(atTpm2.status, 409);
  assert.deepEqual(checks(atTpm2), ["session.tpm"]);

  // the log of another boot does not replay against the quoted PCRs
  const d = await challengeAndEvidence(m, m.claims({ mode: "intake" }), { log: m12(WRONG_BOOT).eventLog });
  const bad = await post(w.transport, ATTEST12_PATHS.evidence, d.evidence);
  assert.equal(bad.status, 403);
  assert.ok(checks(bad).some((x) => x.startsWith("policy.")));
  // a claim changed after the challenge changes the externalData: the quote does not verify
  const e = await challengeAndEvidence(m, m.claims({ mode: "intake" }));
  assert.ok(e.evidence);
  const q = unb64(e.evidence.quote.signature);
  q[5] = (q[5] ?? 0) ^ 1;
  const tampered = await post(w.transport, ATTEST12_PATHS.evidence, { ...e.evidence, quote: { ...e.evidence.quote, signature: b64(q) } });
  assert.equal(tampered.status, 403);
  assert.deepEqual(checks(tampered), ["quote12.signature"]);
});

test("a TPM 2.0 node's EK presented on the TPM 1.2 path is refused (node.tpm) and journalled on that node", async () => {
  // worker-1's RSA EK as a TPM_PUBKEY: the binding finds worker-1, which is recorded with a TPM 2.0
  const cert = readCertificate(new Uint8Array(readFileSync(w.tpm.ek.rsa.certFile as string))).cert;
  const jwk = (await import("node:crypto")).createPublicKey({ key: Buffer.from(cert.spki.der), format: "der", type: "spki" }).export({ format: "jwk" });
  const n = new Uint8Array(Buffer.from(jwk.n as string, "base64url"));
  const pubkey = encode(TPM_PUBKEY, {
    algorithmParms: { algorithmID: TPM12.ALG_RSA, encScheme: TPM12.ES_RSAESOAEP_SHA1_MGF1, sigScheme: TPM12.SS_NONE, parms: encode(TPM_RSA_KEY_PARMS, { keyLength: 2048, numPrimes: 2, exponent: new Uint8Array(0) }) },
    pubKey: n,
  });
  const m = m12(LEGACY);
  const c = m.client();
  let aik;
  try {
    aik = await createAik(c, m.secrets, rnd);
  } finally {
    await c.close();
  }
  const claims = w.claims({ mode: "intake" });
  const r = await post(w.transport, ATTEST12_PATHS.challenge, { claims, ek: { pubkey: b64(pubkey) }, aik: { pubkey: b64(aik.pubkey), identityBinding: b64(aik.identityBinding) } });
  assert.equal(r.status, 403);
  assert.ok(checks(r).includes("node.tpm"), JSON.stringify(r.body));
  assert.ok((await readJournal(w.admin, await w.deviceId(NODE))).some((j) => j.comments.includes("tpm12 challenge refused") && j.comments.includes("node.tpm")));
});

test("tink-action attest on a TPM 1.2 machine (a separate process, real LLDP): detects the TPM 1.2 and passes intake and wipe with nothing issued; provision exits 1 (refused) before any session; no owner secret exits 2 (usage)", async () => {
  const m = m12(LEGACY);
  const c0 = m.claims();
  const lldp = c0.lldp as { chassisId: string; portId: string };
  const sw = await startLldpSwitchPort({ device: lldp.chassisId, port: lldp.portId });
  try {
    const mac = c0.macs[0] as string;
    const root = writeFakeRoot(join(w.dir, "root-tpm12"), { serial: c0.serial, uuid: c0.uuid.toUpperCase(), nics: [{ name: sw.iface, mac }], defaultRoute: sw.iface, eventLog: m.eventLog });
    const secretFile = (name: string, b: Uint8Array) => {
      const p = join(w.dir, name);
      writeFileSync(p, Buffer.from(b).toString("hex") + "\n", { mode: 0o600 });
      return p;
    };
    const env = (out: string, over: Record<string, string> = {}) => ({
      PATH: process.env["PATH"] ?? "/usr/bin:/bin",
      FLEETD_SERVER: w.baseUrl,
      FLEETD_ALLOW_HTTP: "lab",
      FLEETD_TPM: `swtpm:${m.tpm.host}:${m.tpm.port}`,
      FLEETD_OUT: out,
      FLEETD_ROOT: root,
      FLEETD_BOOT_INTERFACE: sw.iface,
      FLEETD_LLDP_WAIT_SECONDS: "30",
      FLEETD_TIMEOUT_SECONDS: "60",
      FLEETD_TPM12_OWNER_AUTH: `file:${secretFile("tpm12-owner.hex", m.secrets.ownerAuth)}`,
      FLEETD_TPM12_SRK_AUTH: `file:${secretFile("tpm12-srk.hex", m.secrets.srkAuth)}`,
      ...over,
    });
    const run = async (mode: Claims["mode"], over: Record<string, string> = {}) => {
      const claims = m.claims({ mode });
      await w.ensureWorkflow(LEGACY, claims);
      const out = join(w.dir, `out-tpm12-${mode}-${Object.keys(over).length}`);
      mkdirSync(out, { recursive: true });
      const r = await runProcess(process.execPath, [join(repo, "tink-action/dist/cli.js"), "attest", "--mode", mode], { env: { ...env(out, over), FLEETD_WORKFLOW: claims.workflow }, timeoutMs: 180_000 });
      return { code: r.code, stdout: r.stdout.toString("utf8"), stderr: r.stderr.toString("utf8") };
    };
    const signatures = w.signatures();
    for (const mode of ["intake", "wipe"] as const) {
      const r = await run(mode);
      assert.equal(r.code, 0, `${mode}: ${r.stderr.slice(-3000)}`);
      const report = JSON.parse(r.stdout) as Record<string, unknown>;
      assert.match(r.stderr, /"msg":"a TPM 1\.2: the TPM 1\.2 protocol \(intake and wipe only\)"/);
      assert.equal(report["verdict"], "pass");
      assert.equal(report["mode"], mode);
      assert.ok(!("ldevid" in report) && !("lak" in report), "no LDevID, no LAK");
      assert.equal(report["installCode"], false);
      assert.ok(!r.stderr.includes(Buffer.from(m.secrets.ownerAuth).toString("hex")), "the owner secret is never logged");
    }
    assert.equal(w.signatures(), signatures, "nothing signed");
    const p = await run("provision");
    assert.equal(p.code, EXIT.refused, p.stderr.slice(-2000));
    assert.match(p.stderr, /a TPM 1\.2 machine attests only for intake or wipe/);
    const n = await run("intake", { FLEETD_TPM12_OWNER_AUTH: "" });
    assert.equal(n.code, EXIT.usage, n.stderr.slice(-2000));
    assert.match(n.stderr, /FLEETD_TPM12_OWNER_AUTH: required for a TPM 1\.2/);
  } finally {
    await sw.stop();
  }
});

test("the TPM 1.2 exchanges — an honest intake, a refused TPM 2.0 mode, a retried and a replayed evidence — are what openapi.yaml documents", async () => {
  const rec = new Recorder(w.baseUrl);
  const doc = OpenApiValidator.fromFile();
  const t = w.withWorkflows(rec.transport());
  const m = m12(LEGACY);
  const tpm = m.client();
  try {
    await attest12({ tpm, secrets: m.secrets, server: t, claims: m.claims({ mode: "intake" }), eventLog: m.eventLog, random: rnd });
  } finally {
    await tpm.close();
  }
  await challengeAndEvidence(m, m.claims({ mode: "provision" }), { transport: t });
  const again = await challengeAndEvidence(m, m.claims({ mode: "intake" }), { transport: t });
  await t.post(ATTEST12_PATHS.evidence, again.evidence);
  await t.post(ATTEST12_PATHS.evidence, again.evidence);
  assert.ok(again.evidence);
  await t.post(ATTEST12_PATHS.evidence, { ...again.evidence, eventLog: b64(m12(WRONG_BOOT).eventLog) });
  assert.deepEqual(rec.exchanges.map((e) => `${e.path} ${e.status}`), [
    "/v1/attest/tpm12/challenge 200",
    "/v1/attest/tpm12/evidence 200",
    "/v1/attest/tpm12/challenge 403",
    "/v1/attest/tpm12/challenge 200",
    "/v1/attest/tpm12/evidence 200",
    "/v1/attest/tpm12/evidence 200",
    "/v1/attest/tpm12/evidence 409",
  ]);
  const problems = rec.exchanges.flatMap((ex) => [...doc.responseProblems(ex), ...doc.requestProblems(ex.method, ex.path, ex.requestContentType, ex.requestText)].map((p) => `${ex.path} ${ex.status}: ${p}`));
  assert.deepEqual(problems, [], problems.join("\n"));
});
