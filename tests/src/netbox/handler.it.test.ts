/**
 * netbox-script against a real NetBox 4.7 whose RQ worker really delivers the webhooks: signed deliveries
 * verified and dispatched, forged/stale/replayed/malformed bodies refused, no loops, group authorization
 * by the change log's user, hand-edited EK bindings refused, the design's eligibility rules, a crash after
 * the 2xx, and the reconcile loop after a lost delivery. Platform effects are asserted as recorded intents.
 */
import { strict as assert } from "node:assert";
import { createServer, type Server } from "node:http";
import { after, before, test } from "node:test";
import type { Handler } from "@fleetd/netbox-script";
import { createNetBox, patchDevice, readJournal, signHookBody } from "@fleetd/platform/netbox";
import type { TinkerbellEffects } from "@fleetd/platform/tinkerbell";
import { DEFAULT_LISTENER_LIMITS } from "@fleetd/platform/http";
import { idleConnections } from "../harness/idleConnections.js";
import { changeCount, fleetd, startFleet, type Fleet } from "./fixture.js";
import { device, handlerRig, requestAction, type HandlerRig } from "./handlerFixture.js";
import { startNetBoxProxy } from "./netboxProxy.js";

let f: Fleet;
let rig: HandlerRig;
let h: Handler | undefined;

before(async () => {
  f = await startFleet();
  const adminCfg = f.configFile(f.nb.authorization.replace(/^Bearer /, ""));
  assert.equal(fleetd(["netbox", "setup", "--config", adminCfg]).code, 0);
  rig = handlerRig(f);
  const apply = fleetd(["inventory", "apply", rig.nodesFile, "--config", f.configFile(f.apply.token)]);
  assert.equal(apply.code, 0, apply.stderr);
  // a device fleetd does not know (not in the nodes file)
  const w1 = await device(f, "worker-1");
  const r = await fetch(`${f.nb.url}/api/dcim/devices/`, {
    method: "POST",
    headers: { authorization: f.nb.authorization, "content-type": "application/json" },
    body: JSON.stringify({ name: "stray-1", device_type: w1.device_type.id, role: w1.role.id, site: w1.site.id, status: "planned" }),
  });
  assert.equal(r.status, 201);
  h = await rig.start();
}, { timeout: 20 * 60_000 });

after(async () => {
  await h?.stop();
  await f?.nb.stop();
});

async function post(body: string | Buffer, headers: Record<string, string>): Promise<{ status: number; outcome: string }> {
  try {
    const r = await fetch(`${h?.url}/netbox/events`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body });
    const j = (await r.json().catch(() => ({}))) as { outcome?: string };
    return { status: r.status, outcome: j.outcome ?? "" };
  } catch (e) {
    return { status: -1, outcome: (e as Error).message };
  }
}

function body(deviceId: number, opts: { ts?: Date; legacy?: boolean; user?: string } = {}): string {
  const ts = (opts.ts ?? new Date()).toISOString();
  const common = { event: "updated", timestamp: ts, object_type: "dcim.device", data: { id: deviceId, name: "x", custom_fields: {} }, snapshots: { prechange: null, postchange: null } };
  return JSON.stringify(
    opts.legacy
      ? { ...common, username: opts.user ?? "alice", request_id: "3f1c2b7e-0000-4000-8000-000000000001" }
      : { ...common, request: { id: `req-${Math.random()}`, user: opts.user ?? "alice", method: "PATCH", path: "/api/dcim/devices/1/" } },
  );
}

test("desired_action set via the REST API: NetBox's real webhook is verified and dispatched; the request is cleared", async () => {
  const w1 = await device(f, "worker-1");
  const mark = rig.decisions.events.length;
  await requestAction(f, f.alice.token, "worker-1", "provision");
  const e = await rig.decisions.wait(mark, (x) => x.deviceId === w1.id && x.decision.outcome !== "ignore", "provision worker-1");
  assert.equal(e.job.source, "webhook", "arrived as NetBox's webhook, not by reconcile");
  assert.equal(e.decision.outcome, "dispatch");
  assert.ok(e.decision.outcome === "dispatch" && e.decision.intent.action === "provision" && e.decision.intent.requestedBy === "alice");
  const after = await device(f, "worker-1");
  assert.equal(after.cf["desired_action"], null);
  const intents = ((await h?.intents.all()) ?? []).filter((i) => i.deviceId === w1.id) ?? [];
  assert.deepEqual(intents.map((i) => i.action), ["provision"]);
  const journal = await readJournal(f.admin, w1.id);
  assert.ok(journal.some((j) => j.kind === "success" && /provision of worker-1 accepted \(requested by alice\)/.test(j.comments)), JSON.stringify(journal));
  const ch = await (await fetch(`${f.nb.url}/api/core/object-changes/?changed_object_id=${w1.id}&changed_object_type=dcim.device&ordering=-time&limit=1`, { headers: { authorization: f.nb.authorization } })).json() as { results: { user_name: string; message: string }[] };
  assert.equal(ch.results[0]?.user_name, "fleetd-handler");
  assert.match(ch.results[0]?.message ?? "", /provision taken/);
});

test("the handler's own PATCH does not loop", async () => {
  const w1 = await device(f, "worker-1");
  const e1 = await device(f, "edge-1");
  const mark = rig.decisions.events.length;
  // A barrier: NetBox's single RQ worker delivers in order, so a delivery caused by the handler's clear of
  // worker-1 would arrive before this one's.
  await requestAction(f, f.alice.token, "edge-1", "attest");
  await rig.decisions.wait(mark, (x) => x.deviceId === e1.id && x.decision.outcome === "dispatch", "attest edge-1");
  const forW1 = rig.decisions.events.slice(mark).filter((x) => x.deviceId === w1.id);
  assert.equal(forW1.length, 0, "no job for worker-1 after the handler cleared its desired_action");
  assert.equal(((await h?.intents.all()) ?? []).filter((i) => i.deviceId === w1.id).length, 1);
  // and a body that names the handler as the actor is dropped at the door
  const r = await post(body(w1.id, { user: "fleetd-handler" }), {});
  assert.equal(r.status, 401, "unsigned first");
  const b = body(w1.id, { user: "fleetd-handler" });
  const own = await post(b, { "x-hook-signature": signHookBody(Buffer.from(b), f.webhookSecret) });
  assert.deepEqual(own, { status: 200, outcome: "ignored-own-write" });
});

test("forged signature, stale body and replayed body are refused; both payload generations are accepted", async () => {
  const e1 = await device(f, "edge-1");
  const fresh = body(e1.id);
  const forged = await post(fresh, { "x-hook-signature": signHookBody(Buffer.from(fresh), "not-the-secret-0123456789abcdefghij") });
  assert.deepEqual(forged, { status: 401, outcome: "webhook-signature-mismatch" });
  const tampered = await post(fresh.replace(`"id":${e1.id}`, `"id":${e1.id + 1}`), { "x-hook-signature": signHookBody(Buffer.from(fresh), f.webhookSecret) });
  assert.equal(tampered.outcome, "webhook-signature-mismatch");
  assert.equal((await post(fresh, {})).outcome, "webhook-signature-missing");
  assert.equal((await post(fresh, { "x-hook-signature": "abc" })).outcome, "webhook-signature-malformed");

  const stale = body(e1.id, { ts: new Date(Date.now() - 10 * 60_000) });
  assert.deepEqual(await post(stale, { "x-hook-signature": signHookBody(Buffer.from(stale), f.webhookSecret) }), { status: 409, outcome: "webhook-body-stale" });

  const sig = signHookBody(Buffer.from(fresh), f.webhookSecret);
  assert.deepEqual(await post(fresh, { "x-hook-signature": sig }), { status: 202, outcome: "accepted" });
  assert.deepEqual(await post(fresh, { "x-hook-signature": sig }), { status: 200, outcome: "duplicate" });

  const legacy = body(e1.id, { legacy: true });
  assert.deepEqual(await post(legacy, { "x-hook-signature": signHookBody(Buffer.from(legacy), f.webhookSecret) }), { status: 202, outcome: "accepted" });
});

test("bad bodies: wrong shape, not JSON, 10 MB — a clear error each, nothing changed in NetBox", async () => {
  const before = await changeCount(f);
  const signed = (b: string | Buffer): Record<string, string> => ({ "x-hook-signature": signHookBody(typeof b === "string" ? Buffer.from(b) : b, f.webhookSecret) });
  const shapes: [string, string][] = [
    [JSON.stringify({ event: "updated", timestamp: new Date().toISOString(), object_type: "dcim.device", data: { id: "7" } }), "webhook-body-shape"],
    [JSON.stringify({ event: "exploded", timestamp: new Date().toISOString(), object_type: "dcim.device", data: { id: 7 } }), "webhook-body-shape"],
    [JSON.stringify({ event: "updated", timestamp: "yesterday", object_type: "dcim.device", data: { id: 7 } }), "webhook-body-shape"],
    [JSON.stringify([1, 2, 3]), "webhook-body-shape"],
    ["{not json", "webhook-body-not-json"],
  ];
  for (const [b, want] of shapes) assert.deepEqual(await post(b, signed(b)), { status: 400, outcome: want }, b);
  const huge = Buffer.alloc(10 * 1024 * 1024, 0x20);
  const r = await post(huge, { "x-hook-signature": "0".repeat(128) });
  assert.ok(r.status === 413 || r.status === -1, `10 MB body: ${JSON.stringify(r)}`);
  if (r.status === 413) assert.equal(r.outcome, "webhook-body-too-large");
  const other = JSON.stringify({ event: "updated", timestamp: new Date().toISOString(), object_type: "ipam.ipaddress", data: { id: 1 } });
  assert.deepEqual(await post(other, signed(other)), { status: 202, outcome: "ignored-object-type" });
  assert.equal(await changeCount(f), before);
  const health = await fetch(`${h?.url}/healthz`);
  assert.equal(health.status, 200);
});

test("a wipe requested by a user outside the configured group is refused with a journal entry", async () => {
  const w1 = await device(f, "worker-1");
  const mark = rig.decisions.events.length;
  await requestAction(f, f.mallory.token, "worker-1", "wipe");
  const e = await rig.decisions.wait(mark, (x) => x.deviceId === w1.id && x.decision.outcome !== "ignore", "wipe by mallory");
  assert.equal(e.decision.outcome, "refuse");
  assert.ok(e.decision.outcome === "refuse" && e.decision.code === "not-authorized");
  assert.equal((await device(f, "worker-1")).cf["desired_action"], null, "the refused request is cleared");
  assert.ok(!(((await h?.intents.all()) ?? []).some((i) => i.deviceId === w1.id && i.action === "wipe")));
  const journal = await readJournal(f.admin, w1.id);
  assert.ok(journal.some((j) => j.kind === "danger" && /refused wipe: wipe of worker-1 was requested by mallory, who is not in the group fleetd-operators \[not-authorized\]/.test(j.comments)), JSON.stringify(journal));

  const mark2 = rig.decisions.events.length;
  await requestAction(f, f.alice.token, "worker-1", "wipe");
  const ok = await rig.decisions.wait(mark2, (x) => x.deviceId === w1.id && x.decision.outcome !== "ignore", "wipe by alice");
  assert.ok(ok.decision.outcome === "dispatch" && ok.decision.intent.action === "wipe");
});

test("an EK binding edited by hand in NetBox is refused by the handler", async () => {
  const e1 = await device(f, "edge-1");
  await patchDevice(f.admin, e1.id, { custom_fields: { ek_bindings: [{ alg: "ecc", sha256: "e".repeat(64), chain: false }] } }, null, "hand edit");
  const mark = rig.decisions.events.length;
  await requestAction(f, f.alice.token, "edge-1", "attest");
  const e = await rig.decisions.wait(mark, (x) => x.deviceId === e1.id && x.decision.outcome !== "ignore", "attest edge-1 with forged binding");
  assert.ok(e.decision.outcome === "refuse" && e.decision.code === "ek-binding-unattributed", JSON.stringify(e.decision));
  const journal = await readJournal(f.admin, e1.id);
  assert.ok(journal.some((j) => j.kind === "danger" && /EK bindings were last changed by admin/.test(j.comments)));
  // the apply account restores the file's bindings; the same request is then accepted
  assert.equal(fleetd(["inventory", "apply", rig.nodesFile, "--config", f.configFile(f.apply.token)]).code, 0);
  const mark2 = rig.decisions.events.length;
  await requestAction(f, f.alice.token, "edge-1", "attest");
  const ok = await rig.decisions.wait(mark2, (x) => x.deviceId === e1.id && x.decision.outcome !== "ignore", "attest edge-1 restored");
  assert.equal(ok.decision.outcome, "dispatch");
});

test("eligibility: control planes need the feature flag, a TPM 1.2 provision is refused (fleetd installs nothing on a TPM 1.2), unknown nodes are refused", async () => {
  const cp = await device(f, "cp-1");
  const legacy = await device(f, "legacy-1");
  const stray = await device(f, "stray-1");
  let mark = rig.decisions.events.length;
  await requestAction(f, f.alice.token, "cp-1", "provision");
  const c = await rig.decisions.wait(mark, (x) => x.deviceId === cp.id && x.decision.outcome !== "ignore", "provision cp-1");
  assert.ok(c.decision.outcome === "refuse" && c.decision.code === "control-planes-disabled");

  mark = rig.decisions.events.length;
  await requestAction(f, f.alice.token, "legacy-1", "provision");
  const l = await rig.decisions.wait(mark, (x) => x.deviceId === legacy.id && x.decision.outcome !== "ignore", "provision legacy-1");
  assert.ok(l.decision.outcome === "refuse" && l.decision.code === "tpm12-no-provision", JSON.stringify(l.decision));
  assert.ok(!(((await h?.intents.all()) ?? []).some((i) => i.deviceId === legacy.id)), "nothing started for legacy-1");

  mark = rig.decisions.events.length;
  await requestAction(f, f.alice.token, "stray-1", "provision");
  const s = await rig.decisions.wait(mark, (x) => x.deviceId === stray.id && x.decision.outcome !== "ignore", "provision stray-1");
  assert.ok(s.decision.outcome === "refuse" && s.decision.code === "not-in-inventory");
});

test("device names that every JavaScript object inherits (constructor, __proto__, toString, hasOwnProperty) are not nodes: refused, nothing started", async () => {
  const w1 = await device(f, "worker-1");
  for (const name of ["constructor", "__proto__", "toString", "hasOwnProperty"]) {
    const r = await fetch(`${f.nb.url}/api/dcim/devices/`, {
      method: "POST",
      headers: { authorization: f.nb.authorization, "content-type": "application/json" },
      body: JSON.stringify({ name, device_type: w1.device_type.id, role: w1.role.id, site: w1.site.id, status: "planned" }),
    });
    const text = await r.text();
    assert.equal(r.status, 201, `${name}: ${text}`);
    const d = await device(f, name);
    const mark = rig.decisions.events.length;
    await requestAction(f, f.alice.token, name, "provision");
    const e = await rig.decisions.wait(mark, (x) => x.deviceId === d.id && x.decision.outcome !== "ignore", `provision ${name}`);
    assert.ok(e.decision.outcome === "refuse" && e.decision.code === "not-in-inventory", `${name}: ${JSON.stringify(e.decision)}`);
    assert.ok(!(((await h?.intents.all()) ?? []).some((i) => i.deviceId === d.id)), `${name}: no intent`);
    assert.ok((await readJournal(f.admin, d.id)).some((j) => j.kind === "danger" && j.comments.includes(`\`${name}\` is not in the nodes file`)), name);
  }
});

test("a TPM 1.2 node's wipe: refused without a boot MAC the attestation account proved, refused for a non-member, dispatched for a group member; its provision never", async () => {
  const legacy = await device(f, "legacy-1");
  const mac = "b0:7b:25:00:12:80";
  const ask = async (who: string, token: string, action: string) => {
    const mark = rig.decisions.events.length;
    const before = (await readJournal(f.admin, legacy.id)).length;
    await requestAction(f, token, "legacy-1", action);
    const e = await rig.decisions.wait(mark, (x) => x.deviceId === legacy.id && x.decision.outcome !== "ignore", `${action} legacy-1 by ${who}`);
    return { e, added: (await readJournal(f.admin, legacy.id)).slice(before) };
  };
  // No boot MAC proven yet (no TPM 1.2 intake passed): nothing starts, whoever asks.
  const a = await ask("alice", f.alice.token, "wipe");
  assert.ok(a.e.decision.outcome === "refuse" && a.e.decision.code === "boot-mac-unproven", JSON.stringify(a.e.decision));
  assert.equal((await device(f, "legacy-1")).cf["desired_action"], null, "the refused request is cleared");
  assert.ok(a.added.some((j) => j.kind === "danger" && /^fleetd refused wipe: the wipe of legacy-1 \(TPM 1\.2\) targets only a boot MAC proven by a passing TPM 1\.2 intake, and there is none: .*Run its intake first.*\[boot-mac-unproven\]$/.test(j.comments)), JSON.stringify(a.added));
  // A boot MAC a NetBox user typed is not proof.
  await patchDevice(f.client(f.alice.token), legacy.id, { custom_fields: { boot_mac: "b0:7b:25:00:12:99" } }, null, "test: alice types a boot MAC");
  const typed = await ask("alice", f.alice.token, "wipe");
  assert.ok(typed.e.decision.outcome === "refuse" && typed.e.decision.code === "boot-mac-unproven", JSON.stringify(typed.e.decision));
  assert.match(typed.e.decision.outcome === "refuse" ? typed.e.decision.reason : "", /last changed by alice .* not by the account fleetd-handler/);
  // The attestation account (here the handler's, as the site configures no separate one) recorded it after a passing TPM 1.2 intake.
  await patchDevice(f.client(f.handler.token), legacy.id, { custom_fields: { boot_mac: mac } }, null, "fleetd: TPM 1.2 intake passed");
  const m = await ask("mallory", f.mallory.token, "wipe");
  assert.ok(m.e.decision.outcome === "refuse" && m.e.decision.code === "not-authorized", JSON.stringify(m.e.decision));
  for (const [who, token] of [["mallory", f.mallory.token], ["alice", f.alice.token]] as const) {
    const p = await ask(who, token, "provision");
    assert.ok(p.e.decision.outcome === "refuse" && p.e.decision.code === "tpm12-no-provision", `${who}: ${JSON.stringify(p.e.decision)}`);
    assert.ok(p.added.some((j) => j.kind === "danger" && /^fleetd refused provision: legacy-1 has a TPM 1\.2 \(nodes file\): fleetd does not install it .*\[tpm12-no-provision\]$/.test(j.comments)), JSON.stringify(p.added));
  }
  assert.deepEqual(((await h?.intents.all()) ?? []).filter((i) => i.deviceId === legacy.id), [], "nothing started so far");
  const ok = await ask("alice", f.alice.token, "wipe");
  assert.ok(ok.e.decision.outcome === "dispatch" && ok.e.decision.intent.action === "wipe", JSON.stringify(ok.e.decision));
  assert.ok(ok.added.some((j) => /wipe of legacy-1 \(TPM 1\.2\) accepted \(requested by alice\): the Workflow proves the TPM 1\.2 EK and boot, then wipes the disk/.test(j.comments)), JSON.stringify(ok.added));
  assert.deepEqual(((await h?.intents.all()) ?? []).filter((i) => i.deviceId === legacy.id).map((i) => i.action), ["wipe"], "one wipe intent, for the group member");
  // Back to unproven for the retirement test below (an operator clears it).
  await patchDevice(f.admin, legacy.id, { custom_fields: { boot_mac: null } }, null, "test: clear boot MAC");
});

test("status → decommissioning: dispatched for a group member, refused for anyone else; a TPM 1.2 node's retirement (a wipe) is refused without a TPM-proven boot MAC", async () => {
  const legacy = await device(f, "legacy-1");
  const cp = await device(f, "cp-1");
  const stray = await device(f, "stray-1");
  let mark = rig.decisions.events.length;
  await patchDevice(f.client(f.alice.token), cp.id, { status: "decommissioning" }, null, "retire");
  const ok = await rig.decisions.wait(mark, (x) => x.deviceId === cp.id && x.decision.outcome !== "ignore", "decommission cp-1");
  assert.ok(ok.decision.outcome === "dispatch" && ok.decision.intent.action === "decommission");
  mark = rig.decisions.events.length;
  await patchDevice(f.client(f.alice.token), legacy.id, { status: "decommissioning" }, null, "retire");
  const l = await rig.decisions.wait(mark, (x) => x.deviceId === legacy.id && x.decision.outcome !== "ignore", "decommission legacy-1");
  assert.ok(l.decision.outcome === "refuse" && l.decision.code === "boot-mac-unproven", JSON.stringify(l.decision));
  assert.ok((await readJournal(f.admin, legacy.id)).some((j) => /^fleetd refused decommissioning: the retirement's wipe of legacy-1 \(TPM 1\.2\) targets only a boot MAC proven/.test(j.comments)));
  mark = rig.decisions.events.length;
  await patchDevice(f.client(f.mallory.token), stray.id, { status: "decommissioning" }, null, "retire");
  const no = await rig.decisions.wait(mark, (x) => x.deviceId === stray.id && x.decision.outcome !== "ignore", "decommission stray-1");
  assert.ok(no.decision.outcome === "refuse" && no.decision.code === "not-authorized");
  assert.ok((await readJournal(f.admin, stray.id)).some((j) => /refused decommissioning: .*mallory/.test(j.comments)));
});

test("authorization race: a request reverted by another user between fleetd's read and its effect runs nothing, and is journalled", async () => {
  // The handler reaches NetBox through a pass-through proxy that lets another user's edit (straight to NetBox)
  // land at the exact moment the handler sends a given request.
  await h?.stop();
  const proxy = await startNetBoxProxy(f.nb.url);
  h = await rig.start({ netboxUrl: proxy.url });
  try {
    const w1 = await device(f, "worker-1");
    const e1 = await device(f, "edge-1");
    const intentsOf = async (id: number, action: string): Promise<number> => ((await h?.intents.all()) ?? []).filter((i) => i.deviceId === id && i.action === action).length;
    const race = async (o: {
      what: string; id: number; request: () => Promise<unknown>; when: (m: string, p: string) => boolean; revert: () => Promise<unknown>;
      action: string; journal: RegExp;
    }): Promise<void> => {
      const intentsBefore = await intentsOf(o.id, o.action);
      const journalBefore = (await readJournal(f.admin, o.id)).length;
      const mark = rig.decisions.events.length;
      const reverted = proxy.once(o.when, async () => void (await o.revert()));
      await o.request();
      await reverted;
      const e = await rig.decisions.wait(mark, (x) => x.deviceId === o.id, o.what);
      assert.ok(e.decision.outcome === "refuse" && e.decision.code === "request-changed", `${o.what}: ${JSON.stringify(e.decision)}`);
      assert.equal(await intentsOf(o.id, o.action), intentsBefore, `${o.what}: nothing started`);
      const added = (await readJournal(f.admin, o.id)).slice(journalBefore);
      assert.ok(added.some((j) => o.journal.test(j.comments) && /nothing was started.*\[request-changed\]$/.test(j.comments)), `${o.what}: ${JSON.stringify(added.map((j) => j.comments))}`);
    };
    const changesOf = (id: number) => (m: string, p: string) => m === "GET" && p.startsWith("/api/core/object-changes/") && p.includes(`changed_object_id=${id}`);
    const groupsLookup = (m: string, p: string) => m === "GET" && p.startsWith("/api/users/users/");
    const theTake = (id: number) => (m: string, p: string) => m === "PATCH" && p === `/api/dcim/devices/${id}/`;
    const revertAction = (token: string, name: string) => () => requestAction(f, token, name, null);

    // Mallory asks for a wipe; fleetd reads the device; alice (an operator) reverts it before fleetd reads the
    // change log. The revert is the newest change of desired_action, but it did not set "wipe": no authorization.
    await race({
      what: "wipe by mallory, reverted by alice before the change log is read", id: w1.id, action: "wipe",
      request: () => requestAction(f, f.mallory.token, "worker-1", "wipe"), when: changesOf(w1.id), revert: revertAction(f.alice.token, "worker-1"),
      journal: /^fleetd did not act on wipe: desired_action was set to \(empty\) by alice at .* \(change #\d+\) after fleetd read it/,
    });
    // Alice asks for a wipe (authorized); mallory reverts it after fleetd decided, before the effect.
    await race({
      what: "wipe by alice, reverted by mallory after the decision", id: w1.id, action: "wipe",
      request: () => requestAction(f, f.alice.token, "worker-1", "wipe"), when: groupsLookup, revert: revertAction(f.mallory.token, "worker-1"),
      journal: /^fleetd did not act on wipe: desired_action was changed from `wipe` to \(empty\) by mallory at .* while fleetd was deciding/,
    });
    // The revert lands between fleetd's last read and its take: the conditional write is refused (412).
    await race({
      what: "wipe by alice, reverted by mallory just before the take", id: w1.id, action: "wipe",
      request: () => requestAction(f, f.alice.token, "worker-1", "wipe"), when: theTake(w1.id), revert: revertAction(f.mallory.token, "worker-1"),
      journal: /^fleetd did not act on wipe: desired_action was changed from `wipe` to \(empty\) by mallory/,
    });
    // Retirement (no conditional write of its own): status set back to planned after the decision.
    await race({
      what: "decommissioning by alice, reverted by mallory after the decision", id: e1.id, action: "decommission",
      request: () => patchDevice(f.client(f.alice.token), e1.id, { status: "decommissioning" }, null, "retire"), when: groupsLookup,
      revert: () => patchDevice(f.client(f.mallory.token), e1.id, { status: "planned" }, null, "not so fast"),
      journal: /^fleetd did not act on decommissioning: the status was changed from `decommissioning` to `planned` by mallory/,
    });
    assert.equal((await device(f, "worker-1")).cf["desired_action"], null);
    assert.equal((await device(f, "edge-1")).status, "planned");

    // Without a race the same requests go through the proxy as before.
    const mark = rig.decisions.events.length;
    await requestAction(f, f.alice.token, "worker-1", "wipe");
    const ok = await rig.decisions.wait(mark, (x) => x.deviceId === w1.id && x.decision.outcome !== "ignore", "wipe by alice, no race");
    assert.ok(ok.decision.outcome === "dispatch" && ok.decision.intent.action === "wipe", JSON.stringify(ok.decision));
    assert.equal((await device(f, "worker-1")).cf["desired_action"], null);
  } finally {
    await h?.stop();
    await proxy.stop();
    h = await rig.start();
  }
});

test("the effect runs only after the take, and an effect that fails after the take is resumed once (claim + NetBox's record of that take)", async () => {
  // The platform side stands in for Tinkerbell (NetBox is real): its first start fails like an API server that
  // is down, and it records what it was asked and what NetBox held at that moment.
  const starts: { mode: string; requestId: string; desiredAction: unknown }[] = [];
  const w1 = await device(f, "worker-1");
  const stand = {
    namespace: "tinkerbell",
    bootRetries: 0,
    objects: undefined,
    syncTemplates: async () => ({ templates: { created: [], updated: [], deleted: [], unchanged: [], refused: [] }, ruleSets: { created: [], updated: [], deleted: [], unchanged: [], refused: [] } }),
    start: async (_node: unknown, req: { mode: string; requestId: string }) => {
      starts.push({ ...req, desiredAction: (await device(f, "worker-1")).cf["desired_action"] });
      if (starts.length === 1) throw new Error("connect ECONNREFUSED (the API server is down)");
      return { name: `fleetd-worker-1-${req.mode}-x`, created: true, deleted: [] };
    },
  } as unknown as TinkerbellEffects;
  await h?.stop();
  h = await rig.start({ tinkerbell: stand });
  try {
    const mark = rig.decisions.events.length;
    await requestAction(f, f.alice.token, "worker-1", "wipe");
    const e = await rig.decisions.wait(mark, (x) => x.deviceId === w1.id && x.decision.outcome !== "ignore", "wipe of worker-1, resumed");
    assert.equal(e.decision.outcome, "dispatch");
    assert.equal(starts.length, 2, JSON.stringify(starts));
    assert.equal(starts[0]?.requestId, starts[1]?.requestId, "the same request, so the same Workflow");
    assert.deepEqual(starts.map((x) => x.desiredAction), [null, null], "started only after the take cleared desired_action");
    const key = starts[0]!.requestId;
    const rec = (await h.intents.all()).filter((i) => i.key === key);
    assert.equal(rec.length, 1);
    assert.deepEqual(rec[0]?.effect, { effect: "workflow", workflow: "fleetd-worker-1-wipe-x", created: true, deleted: [] });
    const journal = await readJournal(f.admin, w1.id);
    assert.ok(journal.some((j) => j.comments === `fleetd: wipe of worker-1 (taken earlier, requested by alice) resumed; Tinkerbell Workflow fleetd-worker-1-wipe-x created`), JSON.stringify(journal.slice(-3)));
    const ch = (await (await fetch(`${f.nb.url}/api/core/object-changes/?changed_object_id=${w1.id}&changed_object_type=dcim.device&ordering=-time&limit=1`, { headers: { authorization: f.nb.authorization } })).json()) as { results: { user_name: string; message: string }[] };
    assert.equal(ch.results[0]?.message, `fleetd: wipe taken (request ${key})`);
  } finally {
    await h?.stop();
    h = await rig.start();
  }
});

test("a crash after the 2xx loses nothing: the accepted job is in the durable queue and runs after restart", async () => {
  await h?.stop();
  h = await rig.start({ startWorker: false });
  const w1 = await device(f, "worker-1");
  const accepted = h.metrics.webhooks;
  const before = (await accepted.get()).values.find((v) => v.labels["outcome"] === "accepted")?.value ?? 0;
  await requestAction(f, f.alice.token, "worker-1", "attest");
  for (let i = 0; i < 300; i++) {
    const now = (await accepted.get()).values.find((v) => v.labels["outcome"] === "accepted")?.value ?? 0;
    if (now > before) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const webhookJobs = async (q: Handler["queue"]): Promise<number> => (await q.pending()).filter((x) => x.id.startsWith("wh:")).length;
  assert.equal(await webhookJobs(h.queue), 1, "one accepted job in the store");
  await h.stop(); // "crash": the job was answered 202 but never run
  const mark = rig.decisions.events.length;
  h = await rig.start();
  const e = await rig.decisions.wait(mark, (x) => x.deviceId === w1.id && x.decision.outcome !== "ignore", "attest worker-1 after restart");
  assert.equal(e.job.source, "webhook");
  assert.ok(e.decision.outcome === "dispatch" && e.decision.intent.action === "attest");
  assert.equal(await webhookJobs(h.queue), 0, "the webhook job is done");
});

test("with the handler stopped, a desired_action set meanwhile is picked up by the reconcile after restart", async () => {
  await h?.stop();
  h = undefined;
  // Stand in for the stopped handler on its port so we know NetBox's one delivery attempt happened (and failed).
  let deliveries = 0;
  const down: Server = createServer((req, res) => {
    deliveries++;
    req.resume();
    res.writeHead(503).end();
  });
  await new Promise<void>((r) => down.listen(f.handlerPort, "127.0.0.1", () => r()));
  const e1 = await device(f, "edge-1");
  await requestAction(f, f.alice.token, "edge-1", "attest");
  for (let i = 0; i < 600 && deliveries === 0; i++) await new Promise((r) => setTimeout(r, 100));
  await new Promise<void>((r) => down.close(() => r()));
  assert.equal(deliveries, 1, "NetBox tried once and gave up (no retries by default)");
  const mark = rig.decisions.events.length;
  h = await rig.start();
  const e = await rig.decisions.wait(mark, (x) => x.deviceId === e1.id && x.decision.outcome !== "ignore", "attest edge-1 via reconcile");
  assert.equal(e.job.source, "reconcile");
  assert.ok(e.decision.outcome === "dispatch" && e.decision.intent.action === "attest");
  assert.equal((await device(f, "edge-1")).cf["desired_action"], null);
  assert.ok((await h.intents.all()).some((i) => i.deviceId === e1.id && i.action === "attest"), "the intent is recorded in the store");
  // Nothing left: a second reconcile queues nothing.
  assert.deepEqual(await h.reconcile(), []);
  void createNetBox;
});

test("the webhook listener closes idle connections beyond the per-source cap at once (not Node's unlimited default)", async () => {
  const cap = DEFAULT_LISTENER_LIMITS.maxConnectionsPerSource;
  const r = await idleConnections(h!.url, cap + 8);
  // this process may hold a kept-alive connection of its own to the handler (fetch's pool): at most `cap` stay open
  assert.ok(r.open <= cap && r.open >= cap - 2 && r.closed >= 8, JSON.stringify(r));
  // and serves again once the server has seen those connections close
  await new Promise((r) => setTimeout(r, 300));
  assert.equal((await fetch(`${h!.url}/healthz`)).status < 500, true);
});
