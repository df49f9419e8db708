/**
 * Issue 10's identity, disclosure and release findings, end to end on the real world (NetBox, swtpm, SoftHSM2,
 * the server over HTTP). Each test fails on the code before the fix:
 *  - a device renamed by a NetBox user: the name is attributed like the EK bindings, so every step refuses;
 *  - wipe mode releases nothing (no LDevID, no LAK, no CA signature);
 *  - a refusal to an unauthenticated caller names no inventory value (the journal gets them);
 *  - a claimed serial cannot inject Markdown (links, images, HTML) into the NetBox journal;
 *  - evidence from a caller that cannot activate the credential writes no verdict, and its refusals are
 *    journalled at most once per window;
 *  - the SMBIOS UUID is recorded at the first pass and required afterwards;
 *  - a node whose cable was deleted gets nothing released (the switch-port gate does not switch off);
 *  - the pending table has a cap; /v1/attest/* has a per-address budget (HTTP 429);
 *  - the session's mode and Workflow are the machine's claims: without that Workflow in Tinkerbell for this
 *    node and mode (and current), nothing is released.
 */
import { strict as assert } from "node:assert";
import { randomBytes } from "node:crypto";
import { after, before, test } from "node:test";
import { must, patchDevice, readDevice, readJournal } from "@fleetd/platform/netbox";
import { AttestationRefused, call } from "@fleetd/platform/protocol/client";
import type { Claims } from "@fleetd/platform/protocol";
import { LABEL_MODE, ownedLabels, WORKFLOW, Objects } from "@fleetd/platform/tinkerbell";
import {
  challenge, confirmBody, ekFromTemplate, evidence, refusal, runHonest, sendConfirm, sendEvidence, unwrap,
  withMachine, type Machine,
} from "./machine.js";
import { NODE, startWorld, type World, type WorldMachine } from "./world.js";
import { TALOS_VERSION } from "../talos/goTools.js";

/** A machine whose device a NetBox user renames. */
const RENAMED = "worker-renamed";
/** A machine whose cable a NetBox user deletes. */
const UNCABLED = "worker-uncabled";
/** A machine whose evidence comes from someone who cannot activate its credential. */
const IMPOSTOR = "worker-impostor";
/** A machine with three NICs whose boot NIC does not sort first. */
const MULTINIC = "worker-multinic";

let w: World;
before(async () => {
  w = await startWorld({ talosVersion: TALOS_VERSION, machines: { [RENAMED]: {}, [UNCABLED]: {}, [IMPOSTOR]: {}, [MULTINIC]: {} } });
}, { timeout: 20 * 60_000 });
after(async () => {
  await w?.stop();
});

const machine = (name = NODE): WorldMachine => w.machines[name] as WorldMachine;
const run = <T>(fn: (m: Machine) => Promise<T>, name = NODE, server = w.transport): Promise<T> => withMachine(machine(name), server, fn);
const journal = async (id: number) => (await readJournal(w.admin, id)).map((j) => j.comments);
const refused = refusal;

test("wipe mode: the TPM evidence passes and nothing is released — no LDevID, no LAK, no CA signature", async () => {
  const id = await w.deviceId(NODE);
  const before = { issued: (await w.store.listIssued(id)).length, signatures: w.signatures() };
  const r = await runHonest(w, "wipe");
  assert.equal(r.mode, "wipe");
  assert.equal(r.issued, undefined, "no certificates in the answer");
  assert.equal((await w.store.listIssued(id)).length, before.issued, "nothing recorded as issued");
  assert.equal(w.signatures(), before.signatures, "the CA key signed nothing");
  assert.match((await journal(id)).at(-1) ?? "", /wipe: TPM evidence passed .*no certificate issued \(wipe releases nothing\)/);
});

test("the SMBIOS UUID is recorded by the first pass (attributed to the attestation account) and required afterwards", async () => {
  const id = await w.deviceId(NODE);
  const d = (await readDevice(w.admin, id)).device;
  assert.equal(d.cf["attested_uuid"], w.claims().uuid, "recorded at the first passing attestation");
  const other = "4c4c4544-0058-4b10-8032-00000000beef";
  const r = await refused(run((m) => challenge(m, machine().claims({ mode: "intake", uuid: other }))));
  assert.equal(r.status, 403);
  assert.ok(r.refusal.reasons.some((x) => x.check === "claims.uuid"), JSON.stringify(r.refusal.reasons));
  // the same UUID in the other byte order (SMBIOS stores the first three fields little-endian) is the same machine
  const swapped = "44454c4c-5800-104b-8032-b7c04f4d3332";
  assert.equal((await runHonest(w, "wipe", { uuid: swapped })).mode, "wipe");
});

test("a refusal before activation names no inventory value (node name, recorded serial); the journal has them", async () => {
  const id = await w.deviceId(NODE);
  const realSerial = machine().claims().serial;
  const r = await refused(run((m) => challenge(m, machine().claims({ mode: "provision", serial: "WRONG-SERIAL-1" }))));
  assert.ok(r.refusal.reasons.some((x) => x.check === "claims.serial"));
  const body = JSON.stringify(r.refusal);
  assert.ok(!body.includes(realSerial), `the real serial is not disclosed: ${body}`);
  assert.ok(!body.includes(NODE), `the node name is not disclosed: ${body}`);
  assert.ok(!body.includes("internal"), "no journal-only field reaches the machine");
  const entry = (await journal(id)).at(-1) ?? "";
  assert.match(entry, /challenge refused/);
  assert.ok(entry.includes(`recorded serial: ${realSerial}`), entry);
});

test("a claimed serial cannot inject Markdown into the NetBox journal (links, images, HTML are escaped)", async () => {
  const id = await w.deviceId(NODE);
  const evil = "X [click me](http://evil.example/x) ![i](http://evil.example/p.png) <img src=x onerror=alert(1)>";
  await refused(run((m) => challenge(m, machine().claims({ mode: "provision", serial: evil }))));
  const entry = (await journal(id)).at(-1) ?? "";
  assert.ok(entry.includes("\\[click me\\](http://evil.example/x)"), entry);
  assert.ok(!entry.includes("[click me](") && !entry.includes("![i]("), `no live link or image:\n${entry}`);
  assert.ok(!/(^|[^\\])<img/.test(entry) && entry.includes("\\<img"), `no raw HTML:\n${entry}`);
});

test("evidence without the activation secrets writes no verdict; such refusals are journalled once per window", async () => {
  const id = await w.deviceId(IMPOSTOR);
  const extra = await w.serverWith({ unauthenticatedJournalWindowMs: 10 * 60_000 });
  try {
    const verdictBefore = (await readDevice(w.admin, id)).device.cf["attestation_verdict"] ?? null;
    const entriesBefore = (await journal(id)).length;
    for (let i = 0; i < 3; i++) {
      const r = await refused(
        run(async (m) => {
          const s = await challenge(m, machine(IMPOSTOR).claims({ mode: "provision" }));
          const ev = await evidence(m, s);
          ev.body.secrets = ev.body.secrets.map(() => randomBytes(32).toString("base64"));
          return sendEvidence(m, ev.body);
        }, IMPOSTOR, extra.transport),
      );
      assert.equal(r.step, "evidence");
      assert.ok(r.refusal.reasons.some((x) => x.check === "activation.secret"));
    }
    assert.equal((await readDevice(w.admin, id)).device.cf["attestation_verdict"] ?? null, verdictBefore, "no verdict written by an unauthenticated caller");
    const added = (await journal(id)).slice(entriesBefore);
    assert.equal(added.length, 1, `one journal entry for three refusals:\n${added.join("\n")}`);
    assert.match(added[0] ?? "", /unauthenticated/);
  } finally {
    await extra.close();
  }
});

test("a device renamed by a NetBox user: every step refuses (the name is attributed to the apply account)", async () => {
  const id = await w.deviceId(RENAMED);
  await patchDevice(w.admin, id, { name: `${RENAMED}-x` }, null, "a device editor renames the node");
  const before = { issued: (await w.store.listIssued(id)).length, signatures: w.signatures() };
  const r = await refused(withMachine(machine(RENAMED), w.transport, async (m) => challenge(m, machine(RENAMED).claims({ mode: "intake" }))));
  assert.equal(r.status, 403);
  assert.ok(r.refusal.reasons.some((x) => x.check === "attribution.name-unattributed"), JSON.stringify(r.refusal.reasons));
  assert.ok(!JSON.stringify(r.refusal).includes(RENAMED), "the names are not disclosed to the machine");
  assert.equal((await w.store.listIssued(id)).length, before.issued);
  assert.equal(w.signatures(), before.signatures, "the CA key signed nothing");
  const entry = (await journal(id)).at(-1) ?? "";
  assert.match(entry, /attribution\.name-unattributed/);
  assert.match(entry, /device name was last changed by/);
});

test("a node whose cable was deleted gets nothing released: the switch-port gate does not switch off", async () => {
  const id = await w.deviceId(UNCABLED);
  const { data } = await must(w.admin.api.GET("/api/dcim/cables/", { params: { query: { device_id: [id] } as never } }), "cables");
  assert.ok(data.results.length > 0, "inventory apply cabled the node");
  for (const c of data.results) await must(w.admin.api.DELETE("/api/dcim/cables/{id}/", { params: { path: { id: c.id } } }), "delete cable");
  const before = { issued: (await w.store.listIssued(id)).length, signatures: w.signatures() };
  const claims = machine(UNCABLED).claims({ mode: "intake" });
  const r = await refused(
    withMachine(machine(UNCABLED), w.transport, async (m) => {
      const s = await challenge(m, claims);
      return sendEvidence(m, (await evidence(m, s)).body);
    }),
  );
  assert.equal(r.step, "evidence");
  assert.ok(r.refusal.reasons.some((x) => x.check === "gate.switchPort" && /no cable/.test(x.detail)), JSON.stringify(r.refusal.reasons));
  assert.equal((await w.store.listIssued(id)).length, before.issued);
  assert.equal(w.signatures(), before.signatures);
  // wipe releases nothing, so it does not need the cable
  assert.equal((await withMachine(machine(UNCABLED), w.transport, async (m) => {
    const s = await challenge(m, machine(UNCABLED).claims({ mode: "wipe" }));
    return sendEvidence(m, (await evidence(m, s)).body);
  })).issued, "none");
});

test("the pending table has a cap: past it an unknown EK is refused without being recorded", async () => {
  const pending = (await w.store.listPendingEks()).length;
  const extra = await w.serverWith({ maxPendingEks: pending + 1 });
  try {
    const first = await refused(run(async (m) => challenge(m, machine().claims({ serial: "STRANGER-A" }), { present: [await ekFromTemplate(m, "L-2")] }), NODE, extra.transport));
    assert.equal(first.refusal.error, "pending", JSON.stringify(first.refusal));
    // another TPM's P-256 EK from the default template (no node approves it either)
    const second = await refused(run(async (m) => challenge(m, machine().claims({ serial: "STRANGER-B" }), { present: [await ekFromTemplate(m, "L-2")] }), RENAMED, extra.transport));
    assert.equal(second.refusal.error, "pending", JSON.stringify(second.refusal));
    assert.match(second.refusal.reasons[0]?.detail ?? "", /pending list is full/);
    const now = await w.store.listPendingEks();
    assert.equal(now.length, pending + 1, "only the first was recorded");
    assert.ok(!now.some((p) => p.serial === "STRANGER-B"));
  } finally {
    await extra.close();
  }
});

test("/v1/attest/* has a per-address budget in the shared store: past it HTTP 429, nothing looked up", async () => {
  const extra = await w.serverWith({ attestRequestsPerMinute: 3 });
  try {
    let limited: AttestationRefused | undefined;
    for (let i = 0; i < 5 && !limited; i++) {
      try {
        await run((m) => challenge(m, machine().claims({ mode: "wipe" } satisfies Partial<Claims>)), NODE, extra.transport);
      } catch (e) {
        if (!(e instanceof AttestationRefused)) throw e;
        if (e.status === 429) limited = e;
      }
    }
    assert.ok(limited, "refused with 429 within the budget + 1");
    assert.equal(limited.refusal.error, "rate-limited");
    assert.equal(limited.refusal.reasons[0]?.check, "request.rate");
    // a raw call sees the same answer
    const r = await call(extra.transport, "challenge", {}).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(r instanceof AttestationRefused && r.status === 429);
  } finally {
    await extra.close();
  }
});

/** The machine's claims in `mode`, sent through the raw transport: the world creates no Workflow for it. */
async function challengeRaw(claims: Claims, name = NODE): Promise<AttestationRefused> {
  return refused(withMachine(machine(name), w.rawTransport, (m) => challenge(m, claims)));
}

test("Workflow gate: a node asking for provision with no such Workflow in Tinkerbell gets nothing (workflow.unknown)", async () => {
  const before = { signatures: w.signatures(), codes: w.installCodesIssued() };
  const r = await challengeRaw(machine().claims({ mode: "provision", workflow: "fleetd-worker-1-provision-nobody-asked" }));
  assert.equal(r.status, 403);
  assert.ok(r.refusal.reasons.some((x) => x.check === "workflow.unknown"), JSON.stringify(r.refusal.reasons));
  assert.equal(w.signatures(), before.signatures);
  assert.equal(w.installCodesIssued(), before.codes);
});

test("Workflow gate: the claimed Workflow must be of the claimed mode, for this node's Hardware, and the current one", async () => {
  const objects = new Objects(w.kube, w.tinkerbellNamespace);
  const mac = machine().claims().macs[0] as string;
  const wf = (name: string, mode: string, hardware: string) => ({
    apiVersion: "tinkerbell.org/v1alpha1",
    kind: "Workflow",
    metadata: { name, labels: { ...ownedLabels(hardware), [LABEL_MODE]: mode } },
    spec: { templateRef: `fleetd-${mode}`, hardwareRef: hardware, hardwareMap: { device_1: mac, fleetd_workflow: name } },
  });
  // an attest Workflow claimed as provision
  await w.ensureWorkflow(NODE, machine().claims({ mode: "attest", workflow: "fleetd-worker-1-attest-gate" }));
  let r = await challengeRaw(machine().claims({ mode: "provision", workflow: "fleetd-worker-1-attest-gate" }));
  assert.ok(r.refusal.reasons.some((x) => x.check === "workflow.mode"), JSON.stringify(r.refusal.reasons));
  // a Workflow for another node's Hardware (with this machine's MAC in it)
  await objects.create(WORKFLOW, wf("fleetd-other-provision-gate", "provision", RENAMED));
  r = await challengeRaw(machine().claims({ mode: "provision", workflow: "fleetd-other-provision-gate" }));
  assert.ok(r.refusal.reasons.some((x) => x.check === "workflow.hardware"), JSON.stringify(r.refusal.reasons));
  // an older provision Workflow while a newer one runs for the node
  await w.ensureWorkflow(NODE, machine().claims({ mode: "provision", workflow: "fleetd-worker-1-provision-old" }));
  await new Promise((res) => setTimeout(res, 1100)); // creationTimestamp has one-second resolution
  await objects.create(WORKFLOW, wf("fleetd-worker-1-wipe-newer", "wipe", NODE));
  r = await challengeRaw(machine().claims({ mode: "provision", workflow: "fleetd-worker-1-provision-old" }));
  assert.ok(r.refusal.reasons.some((x) => x.check === "workflow.superseded"), JSON.stringify(r.refusal.reasons));
  // control: the current Workflow of the right mode passes the gate
  const ok = await withMachine(machine(), w.transport, (m) => challenge(m, machine().claims({ mode: "wipe", workflow: "fleetd-worker-1-wipe-newer" })));
  assert.ok(ok.response.sessionId);
});

test("three NICs, the boot one not sorting first: the proven boot MAC recorded is the one the machine booted from", async () => {
  const own = machine(MULTINIC).claims().macs[0] as string;
  const macs = ["00:00:5e:00:53:01", "00:00:5e:00:53:02", own].sort();
  assert.notEqual(macs[0], own, "the boot NIC does not sort first");
  const claims = machine(MULTINIC).claims({ mode: "intake", macs, bootMac: own });
  const id = await w.deviceId(MULTINIC);
  const pass = async () => {
    const r = await withMachine(machine(MULTINIC), w.transport, async (m) => {
      const s = await challenge(m, claims);
      return sendEvidence(m, (await evidence(m, s)).body);
    });
    assert.equal(r.verdict, "pass");
  };
  await pass();
  const d = (await readDevice(w.admin, id)).device;
  assert.equal(d.cf["boot_mac"], own, "boot_mac is the boot NIC, not macs[0]");
  assert.equal(await cabledMac(id), own, "the cabled interface's primary MAC is the proven boot MAC");
  // the interface's MAC changed in NetBox (here: cleared): the next pass writes the proven one again
  const iface = await cabledInterface(id);
  await must(w.admin.api.PATCH("/api/dcim/interfaces/{id}/", { params: { path: { id: iface } }, body: { primary_mac_address: null } as never }), "clear the MAC");
  assert.equal(await cabledMac(id), null);
  await pass();
  assert.equal(await cabledMac(id), own, "a MAC that differs is recorded");
  // a bootMac that is not among the claimed MACs is a malformed claim (400)
  const bad = await refused(withMachine(machine(MULTINIC), w.rawTransport, (m) => challenge(m, { ...claims, bootMac: "00:00:5e:00:53:99" })));
  assert.equal(bad.status, 400);
});

/** The device's cabled interface (not management) and its primary MAC address (lower case), as NetBox holds them. */
async function cabled(deviceId: number): Promise<{ id: number; mac: string | null }> {
  const { data } = await must(w.admin.api.GET("/api/dcim/interfaces/", { params: { query: { device_id: [deviceId], cabled: true, fields: "id,mgmt_only,primary_mac_address" } as never } }), "interfaces");
  const rows = data.results as unknown as { id: number; mgmt_only?: boolean; primary_mac_address?: { mac_address?: string } | null }[];
  const i = rows.find((r) => !r.mgmt_only);
  assert.ok(i, "the node has a cabled interface");
  return { id: i.id, mac: i.primary_mac_address?.mac_address?.toLowerCase() ?? null };
}
const cabledMac = async (deviceId: number) => (await cabled(deviceId)).mac;
const cabledInterface = async (deviceId: number) => (await cabled(deviceId)).id;

test("two concurrent provision confirms of one node leave one live install code and one live bootstrap token", async () => {
  const node = IMPOSTOR; // its evidence so far came from someone without its TPM; its own TPM provisions now
  const tokensBefore = [...w.liveTokens()].filter(([, n]) => n === node).length;
  assert.equal(tokensBefore, 0);
  const claims = machine(node).claims({ mode: "provision" });
  const ready = await withMachine(machine(node), w.transport, async (m) => {
    const out = [];
    for (let i = 0; i < 2; i++) {
      const s = await challenge(m, claims);
      const ev = await evidence(m, s);
      const accepted = await sendEvidence(m, ev.body);
      out.push({ s, body: await confirmBody(m, s, ev, accepted) });
    }
    return out;
  });
  const results = await withMachine(machine(node), w.transport, (m) =>
    Promise.allSettled(ready.map(async (r) => unwrap(m, r.s, await sendConfirm(m, r.body)))),
  );
  const codes = results.flatMap((r) => (r.status === "fulfilled" && r.value ? [r.value] : []));
  for (const r of results) if (r.status === "rejected") assert.ok(r.reason instanceof AttestationRefused && r.reason.refusal.reasons.some((x) => x.check === "confirm.concurrent"), String(r.reason));
  assert.ok(codes.length >= 1, "at least one confirm released a code");
  const tokens = [...w.liveTokens()].filter(([, n]) => n === node);
  assert.equal(tokens.length, 1, `one live bootstrap token: ${JSON.stringify(tokens)}`);
  const stored = await w.store.getBootstrapToken(await w.deviceId(node));
  assert.equal(stored?.tokenId, tokens[0]?.[0], "the stored token is the live one");
  // exactly one code fetches a config: the last released (an earlier one was void)
  const served = [];
  for (const code of codes) served.push((await fetch(`${w.baseUrl}/talos/config?uuid=${claims.uuid}&code=${code}`)).status);
  assert.deepEqual(served.filter((x) => x === 200).length, 1, `statuses ${served.join(", ")}`);
});
