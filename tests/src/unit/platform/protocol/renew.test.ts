/**
 * Renewal with runtime attestation and quarantine (shared/platform/src/protocol/server/renew.ts) against the
 * protocol engine alone: the AttestationService over in-memory adapters (memoryWorld.ts) and machines whose TPM
 * is a node:crypto model. The same cases run on the real platform in tests/src/attestation/renew.it.test.ts
 * (swtpm, NetBox, kube-apiserver); here every refusal's effect on the state is checked too.
 */
import { strict as assert } from "node:assert";
import { after, before, test } from "node:test";
import { parseIssuedCertificate } from "@fleetd/platform/pki";
import { AttestationRefused, type ServerTransport } from "@fleetd/platform/protocol/client";
import { softwareKey } from "@fleetd/testkit/softwareTpm";
import { ldevidTemplate } from "@fleetd/platform/tpmclient";
import { b64 } from "../../../attestation/machineTypes.js";
import * as steps from "./memoryWorld.js";

const DAY = 86_400_000;
let w: steps.MemoryWorld;
let t: ServerTransport;

before(async () => {
  w = await steps.startMemoryWorld({ machines: { "worker-2": {}, "cp-1": {} } });
  t = w.transport;
  const cp = w.deviceId("cp-1");
  w.inventory.update(cp, { role: "control-plane" });
});
after(async () => {
  await w?.stop();
});

/** An honest intake of `name`: its LDevID/LAK g1 and keys. */
async function intake(name: string): Promise<steps.Held> {
  const run = await steps.honest(steps.machineOf(w.machines[name] as steps.WorldMachine, t), (w.machines[name] as steps.WorldMachine).claims({ mode: "intake" }));
  return steps.heldFrom(run);
}

async function refused(p: Promise<unknown>): Promise<AttestationRefused> {
  try {
    await p;
  } catch (e) {
    if (e instanceof AttestationRefused) return e;
    throw e;
  }
  throw new Error("accepted, but it must be refused");
}
const checks = (e: AttestationRefused) => e.refusal.reasons.map((r) => r.check);
const cnOf = (der: Uint8Array) => parseIssuedCertificate(der).subjectCn;

const held: Record<string, steps.Held> = {};
const talos = () => steps.bootedTpm(w, "talos");

test("a good Talos runtime quote passes; `attest` and a renewal not yet due issue nothing; the verdict is recorded", async () => {
  held["worker-1"] = await intake("worker-1");
  const id = w.deviceId("worker-1");
  const boot = talos();
  const a = await steps.renewOnce(t, boot.tpm, held["worker-1"], boot.eventLog, "attest");
  assert.deepEqual(a.response, { verdict: "pass", issued: "none" });
  const r = await steps.renewOnce(t, boot.tpm, held["worker-1"], boot.eventLog, "renew");
  assert.deepEqual(r.response, { verdict: "pass", issued: "none" }, "g1 is fresh: renewal not due");
  const rt = await w.store.getRuntime(id);
  assert.equal(rt?.verdict?.verdict, "pass");
  assert.equal(rt?.quarantine, null);
  assert.equal(w.inventory.get(id)?.runtime?.verdict, "pass");
  assert.ok(w.journalOf("worker-1").some((j) => /runtime attestation passed \(profile talos\)/.test(j)));
});

test("renewal past two thirds of the lifetime: the next generation for the same keys, current only after the confirm", async () => {
  const id = w.deviceId("worker-1");
  const boot = talos();
  const h = held["worker-1"] as steps.Held;
  w.advanceClock(21 * DAY);
  const ch = await steps.renewChallengeOf(t, h);
  assert.deepEqual(ch.pcrSelection, [{ bank: "sha256", pcrs: Array.from({ length: 16 }, (_, i) => i) }], "the talos profile's PCRs");
  const ev = await t.post("/v1/renew/evidence", steps.renewEvidenceOf(boot.tpm, h, ch, boot.eventLog));
  assert.equal(ev.status, 200, JSON.stringify(ev.body));
  const body = ev.body as { issued: string; ldevidCertificate: string; lakCertificate: string };
  assert.equal(body.issued, "new");
  const newLdevid = new Uint8Array(Buffer.from(body.ldevidCertificate, "base64"));
  assert.equal(cnOf(newLdevid), "worker-1.g2");
  assert.equal(cnOf(new Uint8Array(Buffer.from(body.lakCertificate, "base64"))), "worker-1.g2.lak");
  // before the confirm: g1 is current, g2 void
  const before = (await w.store.listIssued(id)).filter((x) => x.kind === "ldevid");
  assert.deepEqual(before.map((x) => [x.generation, x.voided !== undefined]), [[1, false], [2, true]]);
  assert.equal(w.inventory.get(id)?.ldevid, undefined, "NetBox learns of g2 only at the confirm");
  // the same key certified again
  assert.deepEqual(parseIssuedCertificate(newLdevid).spki, parseIssuedCertificate(h.ldevid.certificate).spki);
  // a confirm signed by another key changes nothing; the right one makes g2 current
  const other = softwareKey(ldevidTemplate("rsa"));
  const { renewConfirmMessage } = await import("@fleetd/platform/protocol");
  const msg = renewConfirmMessage(ch.sessionId, newLdevid, new Uint8Array(Buffer.from(body.lakCertificate, "base64")));
  const cross = await t.post("/v1/attest/confirm", { sessionId: ch.sessionId, signature: b64(boot.tpm.sign(h.ldevid.key, msg)) });
  assert.equal(cross.status, 409, "a renewal session is not confirmed by the attestation protocol");
  assert.match(JSON.stringify(cross.body), /session\.kind/);
  const bad = await t.post("/v1/renew/confirm", { sessionId: ch.sessionId, signature: b64(boot.tpm.sign(other, msg)) });
  assert.equal(bad.status, 403);
  assert.ok(JSON.stringify(bad.body).includes("confirm.signature"));
  const ok = await t.post("/v1/renew/confirm", { sessionId: ch.sessionId, signature: b64(boot.tpm.sign(h.ldevid.key, msg)) });
  assert.equal(ok.status, 200, JSON.stringify(ok.body));
  assert.deepEqual(ok.body, {});
  const again = await t.post("/v1/renew/confirm", { sessionId: ch.sessionId, signature: b64(boot.tpm.sign(h.ldevid.key, msg)) });
  assert.equal(again.status, 200, "the same request replays its answer");
  const after = (await w.store.listIssued(id)).filter((x) => x.kind === "ldevid" && !x.voided);
  assert.deepEqual(after.map((x) => x.generation), [1, 2]);
  assert.equal(w.inventory.get(id)?.ldevid?.cn, "worker-1.g2");
  assert.equal(w.inventory.get(id)?.ldevid?.serial, after[1]?.serial);
  held["worker-1"] = { ldevid: { certificate: newLdevid, key: h.ldevid.key }, lak: { certificate: new Uint8Array(Buffer.from(body.lakCertificate, "base64")), key: h.lak.key } };
});

test("stale generation, possession by another key, a replayed nonce, garbage: refused, no verdict changed", async () => {
  const id = w.deviceId("worker-1");
  const boot = talos();
  const h = held["worker-1"] as steps.Held;
  const before = await w.store.getRuntime(id);
  // g1 is no longer current
  const g1 = await intake("worker-2"); // another node's certificates are someone else's: used below
  void g1;
  const stale = await w.store.listIssued(id);
  const g1ldevid = stale.find((x) => x.kind === "ldevid" && x.generation === 1);
  const g1lak = stale.find((x) => x.kind === "lak" && x.generation === 1);
  const e1 = await refused(steps.renewChallengeOf(t, { ldevid: { certificate: Buffer.from(g1ldevid?.der ?? "", "hex"), key: h.ldevid.key }, lak: { certificate: Buffer.from(g1lak?.der ?? "", "hex"), key: h.lak.key } }));
  assert.deepEqual(checks(e1), ["ldevid.stale"]);
  // LDevID of g2 with the LAK of g1: not the same generation
  const e2 = await refused(steps.renewChallengeOf(t, { ldevid: h.ldevid, lak: { certificate: Buffer.from(g1lak?.der ?? "", "hex"), key: h.lak.key } }));
  assert.deepEqual(checks(e2), ["lak.generation"]);
  // possession signed by another key: refused, unauthenticated (no verdict), the session spent
  const ch = await steps.renewChallengeOf(t, h);
  const forged = steps.renewEvidenceOf(boot.tpm, h, ch, boot.eventLog, { possessionKey: softwareKey(ldevidTemplate("rsa")) });
  const r = await t.post("/v1/renew/evidence", forged);
  assert.equal(r.status, 403);
  assert.match(JSON.stringify(r.body), /possession\.signature/);
  assert.deepEqual(await w.store.getRuntime(id), before, "an unauthenticated body changes no verdict");
  const reuse = await t.post("/v1/renew/evidence", steps.renewEvidenceOf(boot.tpm, h, ch, boot.eventLog));
  assert.equal(reuse.status, 409);
  assert.match(JSON.stringify(reuse.body), /nonce\.reused/);
  // a good one, then another body on the same session: nonce single use
  const ch2 = await steps.renewChallengeOf(t, h, "attest");
  assert.equal((await t.post("/v1/renew/evidence", steps.renewEvidenceOf(boot.tpm, h, ch2, boot.eventLog))).status, 200);
  const replay = await t.post("/v1/renew/evidence", steps.renewEvidenceOf(boot.tpm, h, ch2, boot.eventLog));
  assert.equal(replay.status, 409, "a fresh quote for a used nonce");
  // garbage bodies: 400, nothing looked up
  for (const bad of [{}, { ldevidCertificate: "x", lakCertificate: "y", purpose: "renew" }, { ...{ ldevidCertificate: b64(h.ldevid.certificate), lakCertificate: b64(h.lak.certificate) }, purpose: "renew", x: 1 }]) {
    const g = await t.post("/v1/renew/challenge", bad);
    assert.ok(g.status === 400 || g.status === 403, `${JSON.stringify(bad).slice(0, 40)}: ${g.status}`);
  }
  const notCert = await t.post("/v1/renew/challenge", { ldevidCertificate: b64(new Uint8Array(100)), lakCertificate: b64(h.lak.certificate), purpose: "renew" });
  assert.equal(notCert.status, 403);
  assert.match(JSON.stringify(notCert.body), /ldevid\.pki\.leaf\.parse/);
  // an attestation session is not a renewal session, and vice versa
  const wrong = await t.post("/v1/attest/evidence", { ...steps.renewEvidenceOf(boot.tpm, h, await steps.renewChallengeOf(t, h), boot.eventLog) });
  assert.equal(wrong.status, 400, "the attestation evidence schema refuses a renewal body");
});

test("a tampered log quarantines a worker: 403 naming the event, latched, cordoned, NetBox fail; renewal refused afterwards even with a good quote", async () => {
  const id = w.deviceId("worker-1");
  const h = held["worker-1"] as steps.Held;
  const bad = steps.bootedTpm(w, "talos", { tamperAuthority: true });
  const e = await refused(steps.renewOnce(t, bad.tpm, h, bad.eventLog, "renew"));
  assert.equal(e.status, 403);
  assert.ok(checks(e).some((c) => c.startsWith("policy.")), checks(e).join(", "));
  assert.ok(e.refusal.reasons.some((r) => r.event !== undefined), "a reason names the event");
  const rt = await w.store.getRuntime(id);
  assert.equal(rt?.verdict?.verdict, "fail");
  assert.ok(rt?.quarantine, "latched");
  assert.equal(rt?.cordoned, true);
  assert.ok(w.cordoned.has("worker-1"), "the Node is cordoned");
  assert.equal(w.inventory.get(id)?.runtime?.verdict, "fail");
  assert.ok(w.quarantines.includes("worker-1"));
  assert.ok(w.journalOf("worker-1").some((j) => /runtime attestation FAILED .*worker quarantined/.test(j)));
  const signed = w.signatures();
  const good = talos();
  // someone uncordons the Node by hand (or it registers again): the node's next attempt cordons it again
  w.cordoned.delete("worker-1");
  const again = await refused(steps.renewOnce(t, good.tpm, h, good.eventLog, "renew"));
  assert.deepEqual(checks(again), ["quarantine"]);
  assert.equal(w.signatures(), signed, "nothing signed for a quarantined node");
  assert.ok(w.cordoned.has("worker-1"), "cordoned again while the latch holds");
});

test("a control plane whose quote shows an unlisted authority is alerted on: failed verdict, no cordon, no latch; nothing signed", async () => {
  const id = w.deviceId("cp-1");
  held["cp-1"] = await intake("cp-1");
  const h = held["cp-1"];
  w.advanceClock(0);
  const signed = w.signatures();
  const rogue = steps.bootedTpm(w, "talos", { imageAuthority: w.keys.rogue.der });
  const e = await refused(steps.renewOnce(t, rogue.tpm, h, rogue.eventLog, "renew"));
  assert.ok(checks(e).some((c) => c.includes("authority")), checks(e).join(", "));
  const rt = await w.store.getRuntime(id);
  assert.equal(rt?.verdict?.verdict, "fail");
  assert.equal(rt?.quarantine, null);
  assert.equal(rt?.cordoned, false);
  assert.ok(!w.cordoned.has("cp-1"));
  assert.ok(w.alerts.includes("cp-1"));
  assert.equal(w.signatures(), signed);
  assert.ok(w.journalOf("cp-1").some((j) => /control plane: alert only/.test(j)));
  const good = talos();
  assert.equal((await steps.renewOnce(t, good.tpm, h, good.eventLog, "attest")).response.verdict, "pass", "not latched: a good quote passes");
});

test("a decommissioning device's renewal is refused (journalled)", async () => {
  const id = w.deviceId("cp-1");
  w.inventory.update(id, { status: "decommissioning" });
  const e = await refused(steps.renewChallengeOf(t, held["cp-1"] as steps.Held));
  assert.deepEqual(checks(e), ["gate.status"]);
  assert.ok(w.journalOf("cp-1").some((j) => /renew challenge refused/.test(j)));
  w.inventory.update(id, { status: "planned" });
});

test("release: the operator's passing attest clears the latch; the next runtime pass lifts fleetd's cordon", async () => {
  const id = w.deviceId("worker-1");
  w.inventory.update(id, { status: "active", desiredAction: "attest" });
  const wm = w.machines["worker-1"] as steps.WorldMachine;
  const m = steps.machineOf(wm, t);
  const s = await steps.challenge(m, wm.claims({ mode: "attest" }));
  const accepted = await steps.sendEvidence(m, steps.evidence(m, s).body);
  assert.equal(accepted.verdict, "pass");
  assert.equal((await w.store.getRuntime(id))?.quarantine, null, "released");
  assert.ok(w.cordoned.has("worker-1"), "still cordoned until a runtime pass");
  assert.ok(w.journalOf("worker-1").some((j) => /released from quarantine by the operator's attest/.test(j)));
  w.inventory.update(id, { desiredAction: null });
  const good = talos();
  const r = await steps.renewOnce(t, good.tpm, held["worker-1"] as steps.Held, good.eventLog, "attest");
  assert.equal(r.response.verdict, "pass");
  assert.ok(!w.cordoned.has("worker-1"), "uncordoned");
  assert.equal((await w.store.getRuntime(id))?.cordoned, false);
});

test("bad, oversized and garbage bodies: 400 at every renewal step, nothing recorded (fuzzed)", async () => {
  const fc = (await import("fast-check")).default;
  const id = w.deviceId("worker-1");
  const h = held["worker-1"] as steps.Held;
  const snapshot = async () => JSON.stringify({ runtime: await w.store.getRuntime(id), issued: (await w.store.listIssued(id)).length, outbox: (await w.store.listOutbox()).length, journal: w.journalOf("worker-1").length });
  const before = await snapshot();
  const cert = b64(h.ldevid.certificate);
  const bodies: [string, unknown][] = [
    ["/v1/renew/challenge", { ldevidCertificate: "A".repeat(5600), lakCertificate: cert, purpose: "renew" }],
    ["/v1/renew/challenge", { ldevidCertificate: cert, lakCertificate: cert, purpose: "renew", more: 1 }],
    ["/v1/renew/challenge", { ldevidCertificate: "%%%", lakCertificate: cert, purpose: "renew" }],
    ["/v1/renew/challenge", "renew please"],
    ["/v1/renew/evidence", { sessionId: "x", quote: { message: "AAE=", signature: "AAE=", pcrs: [] }, eventLog: "", signature: "AAE=" }],
    ["/v1/renew/evidence", { sessionId: "x", quote: { message: "A".repeat(2000), signature: "AAE=", pcrs: [{ bank: "sha256", pcr: 0, value: "00".repeat(32) }] }, eventLog: "", signature: "AAE=" }],
    ["/v1/renew/confirm", { sessionId: "x", signature: "A".repeat(1500) }],
    ["/v1/renew/confirm", [1, 2, 3]],
  ];
  for (const [path, body] of bodies) {
    const r = await t.post(path, body);
    assert.equal(r.status, 400, `${path} ${JSON.stringify(body).slice(0, 60)}: ${JSON.stringify(r.body).slice(0, 200)}`);
  }
  await fc.assert(
    fc.asyncProperty(fc.constantFrom("/v1/renew/challenge", "/v1/renew/evidence", "/v1/renew/confirm"), fc.jsonValue(), async (path, body) => {
      const r = await t.post(path, body);
      assert.ok([400, 403, 404, 409].includes(r.status), `${path}: ${r.status}`);
    }),
    { numRuns: 150 },
  );
  assert.equal(await snapshot(), before, "nothing was recorded");
});
