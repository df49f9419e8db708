/**
 * Renewal with runtime attestation, and quarantine, on the real platform: the attestation world (NetBox with
 * fleetd's setup and nodes file, swtpm per machine, the CA key in SoftHSM2, the server over HTTP) and its real
 * kube-apiserver as the workload cluster. worker-1, worker-2 and cp-1 each take intake (their LDevID/LAK g1 in their
 * swtpm), then reboot into Talos (the swtpm power-cycled, its PCRs carrying a Talos boot the `talos` profile judges)
 * and run the node agent's client (protocol/client/renew.ts) against /v1/renew/*.
 */
import { strict as assert } from "node:assert";
import { X509Certificate } from "node:crypto";
import { after, before, test } from "node:test";
import type * as k8s from "@kubernetes/client-node";
import { patchDevice, readDeviceIfExists, readJournal } from "@fleetd/platform/netbox";
import {
  AttestationRefused, postStep, RENEW_PATHS, renewEvidenceBody, runtimeAttest, type HeldKey, type RenewChallengeWire,
} from "@fleetd/platform/protocol/client";
import type { RenewChallengeResponse } from "@fleetd/platform/protocol";
import { QUARANTINE_LABEL, QUARANTINE_TAINT } from "@fleetd/platform/fleet";
import type { KeyBlobs } from "@fleetd/platform/tpmclient";
import { issued, refusal, runHonest, uncertifiedKey, withMachine } from "./machine.js";
import { NODE, startWorld, type World, type WorldMachine } from "./world.js";
import { TALOS_VERSION } from "../talos/goTools.js";
import { OpenApiValidator, Recorder } from "./openapi.js";

const DAY = 86_400_000;
let w: World;
/** Every renewal exchange, judged against the OpenAPI document at the end. */
let rec: Recorder;
/** Each node's current certificates and key blobs. */
const held: Record<string, { ldevid: HeldKey; lak: HeldKey }> = {};
/** Each node's current boot log (after a reboot). */
const logs: Record<string, Uint8Array> = {};

const machine = (name: string) => w.machines[name] as WorldMachine;

async function intake(name: string): Promise<void> {
  const i = issued(await runHonest(w, "intake", {}, w.transport, machine(name)));
  held[name] = { ldevid: { certificate: i.ldevid.certificate, blobs: i.ldevid.blobs }, lak: { certificate: i.lak.certificate, blobs: i.lak.blobs } };
}

before(async () => {
  w = await startWorld({ talosVersion: TALOS_VERSION, machines: { "worker-2": {}, "cp-1": {} } });
  rec = new Recorder(w.baseUrl);
  for (const name of [NODE, "worker-2", "cp-1"]) {
    await w.kube.core.createNode({ body: { metadata: { name } } });
    await intake(name);
    logs[name] = await w.reboot(name, "talos");
  }
}, { timeout: 20 * 60_000 });

after(async () => {
  await w?.stop();
});

/** The node agent's run on `name`'s TPM. */
function agent(name: string, purpose: "attest" | "renew", eventLog = logs[name] as Uint8Array) {
  const tpm = machine(name).client();
  return runtimeAttest({ tpm, server: rec.transport(), ldevid: (held[name] as { ldevid: HeldKey }).ldevid, lak: (held[name] as { lak: HeldKey }).lak, eventLog, purpose }).finally(() => tpm.close());
}

async function fields(name: string): Promise<Record<string, unknown>> {
  const r = await readDeviceIfExists(w.admin, await w.deviceId(name));
  assert.ok(r);
  return r.device.cf;
}
async function journal(name: string): Promise<string[]> {
  return (await readJournal(w.admin, await w.deviceId(name))).map((j) => j.comments);
}
async function kubeNode(name: string): Promise<k8s.V1Node> {
  return w.kube.core.readNode({ name });
}
const cn = (der: Uint8Array) => /(?:^|\n)CN=([^\n]+)/.exec(new X509Certificate(Buffer.from(der)).subject)?.[1];
const checks = (e: AttestationRefused) => e.refusal.reasons.map((r) => r.check);

/** The NetBox outbox delivered what the server committed for `name`. */
async function delivered(name: string): Promise<void> {
  const id = await w.deviceId(name);
  for (let i = 0; i < 100 && (await w.store.listOutbox(id)).length > 0; i++) await new Promise((r) => setTimeout(r, 100));
  assert.equal((await w.store.listOutbox(id)).length, 0, "the outbox delivered everything");
}

test("a good Talos runtime quote passes; after two thirds of the lifetime the renewal bumps the generation at the confirm, and NetBox holds it", async () => {
  assert.deepEqual(await agent(NODE, "attest"), { verdict: "pass" });
  assert.deepEqual(await agent(NODE, "renew"), { verdict: "pass" }, "g1 is fresh: not due");
  await delivered(NODE);
  assert.equal((await fields(NODE))["runtime_verdict"], "pass");
  assert.ok((await fields(NODE))["runtime_passed_at"]);

  w.advanceClock(21 * DAY);
  const before = held[NODE] as { ldevid: HeldKey; lak: HeldKey };
  const r = await agent(NODE, "renew");
  assert.ok(r.issued, "issued");
  assert.equal(cn(r.issued.ldevidCertificate), `${NODE}.g2`);
  assert.equal(cn(r.issued.lakCertificate), `${NODE}.g2.lak`);
  assert.ok(new X509Certificate(Buffer.from(r.issued.ldevidCertificate)).publicKey.equals(new X509Certificate(Buffer.from(before.ldevid.certificate)).publicKey), "the same TPM key");
  held[NODE] = { ldevid: { certificate: r.issued.ldevidCertificate, blobs: before.ldevid.blobs }, lak: { certificate: r.issued.lakCertificate, blobs: before.lak.blobs } };
  await delivered(NODE);
  const f = await fields(NODE);
  assert.equal(f["ldevid_cn"], `${NODE}.g2`);
  assert.equal(f["ldevid_serial"], new X509Certificate(Buffer.from(r.issued.ldevidCertificate)).serialNumber.toLowerCase());
  // the attestation account wrote them: the Node reads them back (change-log attribution)
  const node = await w.inventory.reread(await w.deviceId(NODE));
  assert.equal(node?.ldevid?.cn, `${NODE}.g2`, JSON.stringify({ f, unattributed: node?.unattributed }));
  assert.equal(node?.runtime?.verdict, "pass");
  const current = (await w.store.listIssued(await w.deviceId(NODE))).filter((x) => x.kind === "ldevid" && !x.voided).map((x) => x.generation);
  assert.deepEqual(current, [1, 2]);
  // the renewed LDevID renews again (it is current now) and the agent still attests with it
  assert.deepEqual(await agent(NODE, "attest"), { verdict: "pass" });
});

test("refused: the stale generation, a possession signature by another key, a replayed nonce — no verdict changed", async () => {
  const id = await w.deviceId(NODE);
  const h = held[NODE] as { ldevid: HeldKey; lak: HeldKey };
  const g1 = (await w.store.listIssued(id)).filter((x) => x.generation === 1);
  const der = (kind: string) => new Uint8Array(Buffer.from(g1.find((x) => x.kind === kind)?.der ?? "", "hex"));
  const stale = await refusal(postStep(rec.transport(), RENEW_PATHS.challenge, "renew-challenge", { ldevidCertificate: Buffer.from(der("ldevid")).toString("base64"), lakCertificate: Buffer.from(der("lak")).toString("base64"), purpose: "renew" } satisfies RenewChallengeWire));
  assert.deepEqual(checks(stale), ["ldevid.stale"]);

  const runtimeBefore = await w.store.getRuntime(id);
  const challenge = () =>
    postStep<RenewChallengeResponse>(rec.transport(), RENEW_PATHS.challenge, "renew-challenge", { ldevidCertificate: Buffer.from(h.ldevid.certificate).toString("base64"), lakCertificate: Buffer.from(h.lak.certificate).toString("base64"), purpose: "attest" });
  await withMachine(machine(NODE), rec.transport(), async (m) => {
    const other: KeyBlobs = await uncertifiedKey(m);
    const ch = await challenge();
    const forged = await renewEvidenceBody(m.tpm, "rsa", { ldevid: other, lak: h.lak.blobs }, ch, logs[NODE] as Uint8Array);
    const e = await refusal(postStep(rec.transport(), RENEW_PATHS.evidence, "renew-evidence", forged));
    assert.equal(e.status, 403);
    assert.ok(checks(e).every((c) => c.startsWith("possession.signature")), checks(e).join(", "));
    assert.deepEqual(await w.store.getRuntime(id), runtimeBefore, "an unauthenticated body changes no verdict");

    const ch2 = await challenge();
    const good = await renewEvidenceBody(m.tpm, "rsa", { ldevid: h.ldevid.blobs, lak: h.lak.blobs }, ch2, logs[NODE] as Uint8Array);
    await postStep(rec.transport(), RENEW_PATHS.evidence, "renew-evidence", good);
    // a fresh quote for the used nonce
    const again = await renewEvidenceBody(m.tpm, "rsa", { ldevid: h.ldevid.blobs, lak: h.lak.blobs }, ch2, logs[NODE] as Uint8Array);
    const replay = await refusal(postStep(rec.transport(), RENEW_PATHS.evidence, "renew-evidence", again));
    assert.equal(replay.status, 409);
    assert.deepEqual(checks(replay), ["nonce.reused"]);
  });
});

test("a tampered log quarantines a worker: cordoned in the kube-apiserver, NetBox `fail` naming the event, renewal refused afterwards even with a good quote", async () => {
  const tampered = await w.reboot(NODE, "talos", { tamperAuthority: true });
  const signed = w.signatures();
  const e = await refusal(agent(NODE, "renew", tampered));
  assert.equal(e.status, 403);
  const policy = e.refusal.reasons.filter((r) => r.check.startsWith("policy."));
  assert.ok(policy.length > 0 && policy.some((r) => r.event !== undefined), JSON.stringify(e.refusal.reasons));
  assert.equal(w.signatures(), signed, "nothing signed on a failed quote");
  assert.ok(w.quarantines.includes(NODE));
  await delivered(NODE);
  const n = await kubeNode(NODE);
  assert.equal(n.spec?.unschedulable, true);
  assert.ok(n.spec?.taints?.some((t) => t.key === QUARANTINE_TAINT && t.effect === "NoSchedule"));
  assert.equal(n.metadata?.labels?.[QUARANTINE_LABEL], "fleetd");
  assert.equal((await fields(NODE))["runtime_verdict"], "fail");
  const j = (await journal(NODE)).find((x) => /runtime attestation FAILED/.test(x));
  assert.ok(j, "journalled");
  assert.match(j, /event \d+/i, "the journal names the event");
  // the Node leaves the cluster and registers again (a reinstall, `kubectl delete node`): uncordoned, fleetd's
  // marks gone; a good quote does not release the node, and its agent's next attempt cordons the new Node
  await w.kube.core.deleteNode({ name: NODE });
  await w.kube.core.createNode({ body: { metadata: { name: NODE } } });
  assert.notEqual((await kubeNode(NODE)).spec?.unschedulable, true);
  logs[NODE] = await w.reboot(NODE, "talos");
  const again = await refusal(agent(NODE, "renew"));
  assert.deepEqual(checks(again), ["quarantine"]);
  assert.equal(w.signatures(), signed);
  await delivered(NODE);
  const back = await kubeNode(NODE);
  assert.equal(back.spec?.unschedulable, true, "cordoned again while the latch holds");
  assert.ok(back.spec?.taints?.some((t) => t.key === QUARANTINE_TAINT));
});

test("a control plane with an unlisted authority is alerted on: failed verdict, no cordon, no latch", async () => {
  const rogue = await w.reboot("cp-1", "talos", { imageAuthority: w.lab.rogue.der });
  const e = await refusal(agent("cp-1", "renew", rogue));
  assert.ok(checks(e).some((c) => c.includes("authority")), checks(e).join(", "));
  assert.ok(w.alerts.includes("cp-1"));
  await delivered("cp-1");
  const n = await kubeNode("cp-1");
  assert.notEqual(n.spec?.unschedulable, true);
  assert.ok(!(n.spec?.taints ?? []).some((t) => t.key === QUARANTINE_TAINT));
  assert.equal((await fields("cp-1"))["runtime_verdict"], "fail");
  assert.equal((await w.store.getRuntime(await w.deviceId("cp-1")))?.quarantine, null);
  assert.ok((await journal("cp-1")).some((x) => /control plane: alert only/.test(x)));
  logs["cp-1"] = await w.reboot("cp-1", "talos");
  assert.deepEqual(await agent("cp-1", "attest"), { verdict: "pass" }, "no latch: a good quote passes again");
});

test("a decommissioning device's renewal is refused and journalled", async () => {
  const id = await w.deviceId("cp-1");
  await patchDevice(w.admin, id, { status: "decommissioning" }, null, "test: decommission");
  const e = await refusal(agent("cp-1", "renew"));
  assert.deepEqual(checks(e), ["gate.status"]);
  assert.ok((await journal("cp-1")).some((x) => /renew challenge refused/.test(x) && /gate\.status/.test(x)));
});

test("an unlisted authority quarantines worker-2; the operator's attest releases it and the next runtime pass uncordons the Node", async () => {
  const name = "worker-2";
  const rogue = await w.reboot(name, "talos", { imageAuthority: w.lab.rogue.der });
  const e = await refusal(agent(name, "renew", rogue));
  assert.ok(checks(e).some((c) => c.includes("authority")), checks(e).join(", "));
  await delivered(name);
  assert.equal((await kubeNode(name)).spec?.unschedulable, true);
  // the operator fixes the boot and asks for attest: the machine boots HookOS and runs the attest mode
  const id = await w.deviceId(name);
  await patchDevice(w.admin, id, { status: "active", custom_fields: { desired_action: "attest" } }, null, "test: operator asks for attest");
  await w.reboot(name, "hookos");
  const r = await runHonest(w, "attest", {}, w.transport, machine(name));
  if (r.issued) held[name] = { ldevid: { certificate: r.issued.ldevid.certificate, blobs: r.issued.ldevid.blobs }, lak: { certificate: r.issued.lak.certificate, blobs: r.issued.lak.blobs } };
  assert.equal((await w.store.getRuntime(id))?.quarantine, null, "released");
  await delivered(name);
  assert.ok((await journal(name)).some((x) => /released from quarantine by the operator's attest/.test(x)));
  assert.equal((await kubeNode(name)).spec?.unschedulable, true, "still cordoned until a runtime pass");
  await patchDevice(w.admin, id, { custom_fields: { desired_action: null } }, null, "test: the handler clears desired_action");
  logs[name] = await w.reboot(name, "talos");
  assert.equal((await agent(name, "attest")).verdict, "pass");
  await delivered(name);
  const n = await kubeNode(name);
  assert.notEqual(n.spec?.unschedulable, true);
  assert.ok(!(n.spec?.taints ?? []).some((t) => t.key === QUARANTINE_TAINT));
  assert.equal(n.metadata?.labels?.[QUARANTINE_LABEL], undefined);
  assert.equal((await fields(name))["runtime_verdict"], "pass");
});

test("every renewal request and answer exchanged above is what the OpenAPI document says", () => {
  const doc = OpenApiValidator.fromFile();
  const renewals = rec.exchanges.filter((ex) => ex.path.startsWith("/v1/renew/"));
  assert.ok(renewals.length > 20, `${renewals.length} exchanges`);
  assert.ok(new Set(renewals.map((ex) => ex.status)).size >= 3, "answers and refusals");
  const problems = renewals.flatMap((ex) => [
    ...doc.responseProblems(ex).map((p) => `${ex.path} → ${ex.status}: ${p}`),
    ...doc.requestProblems(ex.method, ex.path, ex.requestContentType, ex.requestText).map((p) => `${ex.path} request: ${p}`),
  ]);
  assert.deepEqual(problems, [], problems.join("\n"));
});
