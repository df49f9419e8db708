/**
 * A quarantine end to end, all real and on loopback: the attestation world (NetBox with its event rules, swtpm, the
 * CA key in SoftHSM2, fleetd's server with renewal, a real kube-apiserver as the workload cluster) provisions
 * worker-1; a real spire-server and spire-agent (v1.13.3, the shipped confs, tpm_devid over a Unix socket to
 * worker-1's swtpm) attest with its LDevID; worker-1 reboots into Talos and the node agent's client passes a runtime
 * attestation through /v1/renew/*, whose verdict in NetBox reaches SPIRE through fleetd's sync (NetBox event rule →
 * netbox-script publishes spire-nodes.json → spire-plugin makes the node entry). Then worker-1 reboots with a
 * tampered log and sends that runtime quote through the renewal endpoint: renewal refused, the Node cordoned in the
 * kube-apiserver, NetBox `runtime_verdict: fail` with a journal naming the event, and — with no further step by the
 * test — the change-triggered sync removes its SPIRE entry and bans its agent, and the banned spire-agent shuts down.
 * The links one by one: attestation/renew.it (quarantine, cordon), spire/spire.it (sync, decommission → ban),
 * spire/renewAgent.it (the agent).
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { readDevice, patchDevice, readJournal } from "@fleetd/platform/netbox";
import { runtimeAttest, type HeldKey } from "@fleetd/platform/protocol/client";
import { QUARANTINE_LABEL, QUARANTINE_TAINT } from "@fleetd/platform/fleet";
import { nodeEntryId, parseSyncStatus, tpmDevidAgentId } from "@fleetd/platform/spire";
import { issued, refusal, runHonest } from "../attestation/machine.js";
import { NODE, startWorld, type World, type WorldMachine } from "../attestation/world.js";
import { TALOS_VERSION } from "../talos/goTools.js";
import { cnOf, nodeEntries, pollValue, sha1, startSpireStack, startSync, stopSpireStack, syncContext, type SpireStack, type Sync } from "./syncRig.js";

let w: World;
let dir: string;
let stack: SpireStack | undefined;
let sync: Sync | undefined;
let held: { ldevid: HeldKey; lak: HeldKey };
let deviceId: number;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "fleetd-spire-quarantine-"));
  w = await startWorld({ talosVersion: TALOS_VERSION });
  await w.kube.core.createNode({ body: { metadata: { name: NODE } } });
  assert.equal((await runHonest(w, "intake")).mode, "intake");
  const r = await runHonest(w, "provision");
  const i = issued(r);
  held = { ldevid: { certificate: i.ldevid.certificate, blobs: i.ldevid.blobs }, lak: { certificate: i.lak.certificate, blobs: i.lak.blobs } };
  stack = await startSpireStack(w, dir, r);
  deviceId = await w.deviceId(NODE);
}, { timeout: 25 * 60_000 });

after(async () => {
  await sync?.stop();
  await stopSpireStack(stack);
  await w?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The node agent's runtime attestation on worker-1's TPM, through the renewal endpoint. */
function runtime(eventLog: Uint8Array, purpose: "attest" | "renew") {
  const tpm = (w.machines[NODE] as WorldMachine).client();
  return runtimeAttest({ tpm, server: w.transport, ldevid: held.ldevid, lak: held.lak, eventLog, purpose }).finally(() => tpm.close());
}

/** The NetBox outbox delivered what the server committed for worker-1. */
async function delivered(): Promise<void> {
  await pollValue("the outbox to deliver everything for worker-1", async () => ((await w.store.listOutbox(deviceId)).length === 0 ? true : undefined), { timeoutMs: 15_000, intervalMs: 100 });
}

test("a tampered runtime quote through the renewal endpoint quarantines worker-1: cordoned, refused, NetBox `fail` naming the event, and its SPIRE entry removed and its agent banned by the change-triggered sync", async () => {
  const s = stack as SpireStack;
  const td = s.server.trustDomain;
  const agentId = tpmDevidAgentId(td, s.leafDer);
  assert.deepEqual((await s.spire.listAgents({ byAttestationType: "tpm_devid" })).map((a) => [a.id, a.banned]), [[agentId, false]], "spire-agent attested with worker-1's LDevID");

  // The sync runs (netbox-script at NetBox's webhook target, spire-plugin on its list); worker-1 is in service.
  sync = await startSync(w, dir, s);
  if ((await readDevice(w.admin, deviceId)).device.status !== "active") await patchDevice(w.admin, deviceId, { status: "active" }, null, "test: worker-1 in service");

  // worker-1 boots the installed Talos; the node agent's runtime attestation passes through the renewal endpoint,
  // the server records the verdict in NetBox, and the sync makes its node entry.
  const good = await w.reboot(NODE, "talos");
  assert.deepEqual(await runtime(good, "attest"), { verdict: "pass" });
  await delivered();
  const entry = await pollValue("the sync's node entry for worker-1", async () => (await nodeEntries(s))[0], { timeoutMs: 30_000, intervalMs: 100, context: () => syncContext(sync) });
  assert.equal(entry.id, nodeEntryId(NODE, sha1(s.caDer)), "made by fleetd's sync");
  assert.deepEqual(entry.selectors.map((x) => `${x.type}:${x.value}`).sort(), [`tpm_devid:ca:fingerprint:${sha1(s.caDer)}`, `tpm_devid:subject:cn:${cnOf(s.leaf, "subject")}`]);

  // worker-1 reboots into a boot chain with a tampered log and sends that runtime quote as a renewal.
  const tampered = await w.reboot(NODE, "talos", { tamperAuthority: true });
  const signed = w.signatures();
  const t0 = Date.now();
  const e = await refusal(runtime(tampered, "renew"));
  assert.equal(e.status, 403, "renewal refused");
  const policy = e.refusal.reasons.filter((r) => r.check.startsWith("policy."));
  assert.ok(policy.some((r) => r.event !== undefined), JSON.stringify(e.refusal.reasons));
  assert.equal(w.signatures(), signed, "nothing signed on a failed quote");
  assert.ok(w.quarantines.includes(NODE), "quarantined");

  // Cordoned in the workload cluster's kube-apiserver.
  await delivered();
  const n = await w.kube.core.readNode({ name: NODE });
  assert.equal(n.spec?.unschedulable, true);
  assert.ok(n.spec?.taints?.some((t) => t.key === QUARANTINE_TAINT && t.effect === "NoSchedule"), JSON.stringify(n.spec?.taints));
  assert.equal(n.metadata?.labels?.[QUARANTINE_LABEL], "fleetd");

  // NetBox: runtime_verdict fail, the journal naming the event.
  assert.equal((await readDevice(w.admin, deviceId)).device.cf["runtime_verdict"], "fail");
  const j = (await readJournal(w.admin, deviceId)).map((x) => x.comments).find((x) => /runtime attestation FAILED/.test(x));
  assert.ok(j, "journalled");
  assert.match(j, /event \d+/i, "the journal names the event");

  // The verdict's change reaches SPIRE with no further step: the entry is removed and the agent banned.
  const doneAt = await pollValue("worker-1's entry gone and its agent banned", async () => {
    const [entries, banned] = await Promise.all([nodeEntries(s), s.spire.listAgents({ byBanned: true })]);
    return entries.length === 0 && banned.some((a) => a.id === agentId) ? Date.now() : undefined;
  }, { timeoutMs: 30_000, intervalMs: 50, context: () => syncContext(sync) });
  process.stdout.write(`# quarantine → entry removed and agent banned: ${doneAt - t0} ms after the tampered quote was sent\n`);
  const published = JSON.parse(readFileSync(sync.list.file, "utf8")) as { nodes: { name: string }[] };
  assert.ok(!published.nodes.some((x) => x.name === NODE), "spire-nodes.json no longer lists worker-1");
  assert.ok((sync.handler.spireNodes?.last?.excluded ?? []).some((x) => JSON.stringify(x).includes("quarantined")), JSON.stringify(sync.handler.spireNodes?.last?.excluded));
  const st = await pollValue("spire-plugin's status naming the ban", async () => {
    const v = parseSyncStatus(readFileSync(sync?.status.file ?? ""));
    return v.bans.some((b) => b.node === NODE) ? v : undefined;
  }, { timeoutMs: 5_000, intervalMs: 50 });
  assert.deepEqual(st.bans.find((b) => b.node === NODE)?.agents, [agentId]);
  // worker-1's spire-agent learns it on its next call to the server: it removes its SVID and exits.
  await pollValue("the banned spire-agent to shut down", async () => s.agent.process.exit, { timeoutMs: 120_000, intervalMs: 500, context: () => s.agent.process.tail(20) });
  assert.match(readFileSync(s.agent.process.logFile, "utf8"), /Agent is banned: removing SVID and shutting down/);

  // The renewal stays refused: a good quote does not release a quarantined worker.
  const again = await refusal(runtime(await w.reboot(NODE, "talos"), "renew"));
  assert.deepEqual(again.refusal.reasons.map((r) => r.check), ["quarantine"]);
  assert.equal(w.signatures(), signed);
});
