import { strict as assert } from "node:assert";
import { test } from "node:test";
import { NodeEntry } from "../fleet/nodesFile.js";
import { decide, type Facts } from "./decide.js";
import { DeviceRecord } from "./device.js";

const node = (over: Record<string, unknown> = {}): NodeEntry =>
  NodeEntry.parse({
    serial: "S1", model: "m", class: "c", role: "worker", switch: { device: "tor", port: "p1" },
    address: { cidr: "10.0.0.5/24", gateway: "10.0.0.1" }, installDisk: "/dev/sda", bmc: { type: "none" },
    tpm: "2.0", ek: [{ alg: "rsa", sha256: "a".repeat(64) }], ...over,
  });
const dev = (status: string, action: string | null): DeviceRecord =>
  DeviceRecord.parse({
    id: 7, name: "n1", serial: "S1", status: { value: status, label: status }, site: { id: 1 }, role: { id: 2 }, device_type: { id: 3 },
    custom_fields: { desired_action: action === null ? null : { value: action, label: action } },
  });
const facts = (over: Partial<Facts>): Facts => ({
  trigger: "desired_action",
  device: dev("planned", "provision"),
  desiredAction: "provision",
  node: node(),
  ekAttribution: { ok: true, by: "fleetd-apply", time: "t", change: 1 },
  requester: { username: "alice", groups: ["ops"] },
  authorizedGroup: "ops",
  features: { controlPlanes: false },
  ...over,
});
const outcome = (f: Facts): string => {
  const d = decide(f);
  return d.outcome === "refuse" ? `refuse:${d.code}` : d.outcome === "dispatch" ? `dispatch:${d.intent.action}` : "ignore";
};

test("DeviceRecord reads 4.7 {value,label} selects and raw values alike", () => {
  const d = dev("active", "wipe");
  assert.equal(d.status, "active");
  assert.equal(d.cf["desired_action"], "wipe");
  const raw = DeviceRecord.parse({ id: 1, name: null, status: "planned", site: { id: 1 }, role: { id: 1 }, device_type: { id: 1 }, custom_fields: { desired_action: "attest" } });
  assert.equal(raw.cf["desired_action"], "attest");
});

test("the design's rules, one case each", () => {
  assert.equal(outcome(facts({})), "dispatch:provision");
  assert.equal(outcome(facts({ desiredAction: null })), "ignore");
  assert.equal(outcome(facts({ node: undefined })), "refuse:not-in-inventory");
  assert.equal(outcome(facts({ device: dev("active", "provision") })), "refuse:status-not-allowed");
  assert.equal(outcome(facts({ desiredAction: "wipe", requester: { username: "mallory", groups: [] } })), "refuse:not-authorized");
  assert.equal(outcome(facts({ desiredAction: "wipe", requester: null })), "refuse:not-authorized");
  assert.equal(outcome(facts({ desiredAction: "wipe" })), "dispatch:wipe");
  assert.equal(outcome(facts({ desiredAction: "attest", requester: { username: "mallory", groups: [] } })), "dispatch:attest");
  assert.equal(outcome(facts({ ekAttribution: { ok: false, code: "ek-binding-unattributed", reason: "x" } })), "refuse:ek-binding-unattributed");
  assert.equal(outcome(facts({ ekAttribution: undefined })), "refuse:ek-binding-unchecked");
  assert.equal(outcome(facts({ node: node({ tpm: "1.2", ek: undefined }), desiredAction: "attest", ekAttribution: undefined })), "refuse:tpm12-no-attestation");
  assert.equal(outcome(facts({ node: node({ tpm: "none", ek: undefined }) })), "refuse:no-tpm");
  assert.equal(outcome(facts({ node: node({ role: "control-plane" }) })), "refuse:control-planes-disabled");
  assert.equal(outcome(facts({ node: node({ role: "control-plane" }), features: { controlPlanes: true } })), "dispatch:provision");
});

test("authorization is judged on the action that runs; a TPM 1.2 node is wiped only by a group member, only with approved EKs and a TPM-proven boot MAC, and never provisioned", () => {
  const legacy = node({ tpm: "1.2" });
  const proven = { ok: true as const, mac: "b0:7b:25:00:12:80" };
  const unproven = { ok: false as const, code: "boot-mac-unproven" as const, reason: "no boot MAC proven by TPM evidence yet" };
  const mallory = { username: "mallory", groups: [] };
  const alice = { username: "alice", groups: ["ops"] };
  const wipe = (over: Partial<Facts>) => decide(facts({ node: legacy, desiredAction: "wipe", device: dev("planned", "wipe"), bootMac: proven, requester: alice, ...over }));
  // the one way through: a group member, attributed EK bindings, a proven boot MAC
  const ok = wipe({});
  assert.ok(ok.outcome === "dispatch" && ok.intent.action === "wipe" && ok.clearDesiredAction, JSON.stringify(ok));
  assert.match(ok.outcome === "dispatch" ? ok.journal.text : "", /wipe of n1 \(TPM 1\.2\) accepted \(requested by alice\): the Workflow proves the TPM 1\.2 EK and boot, then wipes the disk/);
  // each missing piece refuses (before any effect), naming it
  assert.equal(outcome(facts({ node: legacy, desiredAction: "wipe", device: dev("planned", "wipe"), bootMac: proven, requester: mallory })), "refuse:not-authorized");
  assert.equal(outcome(facts({ node: legacy, desiredAction: "wipe", device: dev("planned", "wipe"), bootMac: proven, requester: null })), "refuse:not-authorized");
  const noMac = wipe({ bootMac: unproven });
  assert.ok(noMac.outcome === "refuse" && noMac.code === "boot-mac-unproven" && noMac.clearDesiredAction);
  assert.match(noMac.outcome === "refuse" ? noMac.reason : "", /targets only a boot MAC proven by a passing TPM 1\.2 intake, and there is none: no boot MAC proven by TPM evidence yet\. Run its intake first/);
  assert.equal(outcome(facts({ node: legacy, desiredAction: "wipe", device: dev("planned", "wipe"), bootMac: undefined })), "refuse:boot-mac-unproven");
  assert.equal(outcome(facts({ node: node({ tpm: "1.2", ek: undefined }), desiredAction: "wipe", device: dev("planned", "wipe"), bootMac: proven })), "refuse:tpm12-no-ek");
  assert.equal(outcome(facts({ node: legacy, desiredAction: "wipe", device: dev("planned", "wipe"), bootMac: proven, ekAttribution: { ok: false, code: "ek-binding-unattributed", reason: "x" } })), "refuse:ek-binding-unattributed");
  assert.equal(outcome(facts({ node: legacy, desiredAction: "wipe", device: dev("planned", "wipe"), bootMac: proven, ekAttribution: undefined })), "refuse:ek-binding-unchecked");
  // provision stays refused for everyone (it is never turned into a wipe); attest likewise
  for (const requester of [mallory, alice]) {
    const p = decide(facts({ node: legacy, desiredAction: "provision", bootMac: proven, requester }));
    assert.ok(p.outcome === "refuse" && p.code === "tpm12-no-provision" && p.clearDesiredAction, requester.username);
    assert.match(p.outcome === "refuse" ? p.reason : "", /fleetd does not install it .* A member of ops can ask for wipe instead/);
  }
  assert.equal(outcome(facts({ node: legacy, desiredAction: "attest", device: dev("planned", "attest"), bootMac: proven, requester: mallory })), "refuse:tpm12-no-attestation");
  // retirement (a wipe): group members only, with a proven boot MAC
  const retire = (over: Partial<Facts>) => decide(facts({ node: legacy, trigger: "decommissioning", desiredAction: null, device: dev("decommissioning", null), ekAttribution: undefined, bootMac: proven, requester: alice, ...over }));
  assert.ok(retire({}).outcome === "dispatch");
  const r1 = retire({ requester: mallory });
  assert.ok(r1.outcome === "refuse" && r1.code === "not-authorized" && !r1.clearDesiredAction);
  const r2 = retire({ bootMac: unproven });
  assert.ok(r2.outcome === "refuse" && r2.code === "boot-mac-unproven");
  assert.match(r2.outcome === "refuse" ? r2.reason : "", /the retirement's wipe of n1 \(TPM 1\.2\) targets only a boot MAC proven/);
  // A node entry whose TPM family is none of the known ones (never from the parser) still needs attributed EK bindings.
  assert.equal(outcome(facts({ node: { ...node(), tpm: undefined as never }, ekAttribution: undefined })), "refuse:ek-binding-unchecked");
  // Every dispatched privileged intent passed the group check.
  for (const desiredAction of ["provision", "attest", "wipe"] as const) {
    const d = decide(facts({ desiredAction, device: dev("planned", desiredAction), requester: mallory }));
    if (d.outcome === "dispatch") assert.ok(!["wipe", "decommission"].includes(d.intent.action), desiredAction);
  }
});

test("a device name the nodes file does not vouch for reaches the journal as a code span only", () => {
  const d = decide(facts({ node: undefined, device: DeviceRecord.parse({ id: 9, name: "[x](https://evil.example)", status: "planned", site: { id: 1 }, role: { id: 1 }, device_type: { id: 1 }, custom_fields: {} }) }));
  assert.ok(d.outcome === "refuse" && d.reason.startsWith("`[x](https://evil.example)` is not in the nodes file"), JSON.stringify(d));
});

test("decommissioning: only for the authorized group, only while the status still says so", () => {
  const base = { trigger: "decommissioning" as const, desiredAction: null, device: dev("decommissioning", null) };
  assert.equal(outcome(facts({ ...base })), "dispatch:decommission");
  assert.equal(outcome(facts({ ...base, requester: { username: "m", groups: ["other"] } })), "refuse:not-authorized");
  assert.equal(outcome(facts({ ...base, device: dev("active", null) })), "ignore");
  const d = decide(facts({ ...base, requester: { username: "m", groups: [] } }));
  assert.ok(d.outcome === "refuse" && d.clearDesiredAction === false);
});
