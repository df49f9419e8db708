import { strict as assert } from "node:assert";
import { test } from "node:test";
import { NodeEntry } from "../inventory/nodesFile.js";
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
  return d.outcome === "refuse" ? `refuse:${d.code}` : d.outcome === "dispatch" ? `dispatch:${d.intent.action}${d.intent.leaveInHookOS ? ":hookos" : ""}` : "ignore";
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
  assert.equal(outcome(facts({ node: undefined })), "refuse:not_in_inventory");
  assert.equal(outcome(facts({ device: dev("active", "provision") })), "refuse:status_not_allowed");
  assert.equal(outcome(facts({ desiredAction: "wipe", requester: { username: "mallory", groups: [] } })), "refuse:not_authorized");
  assert.equal(outcome(facts({ desiredAction: "wipe", requester: null })), "refuse:not_authorized");
  assert.equal(outcome(facts({ desiredAction: "wipe" })), "dispatch:wipe");
  assert.equal(outcome(facts({ desiredAction: "attest", requester: { username: "mallory", groups: [] } })), "dispatch:attest");
  assert.equal(outcome(facts({ ekAttribution: { ok: false, code: "ek_binding_unattributed", reason: "x" } })), "refuse:ek_binding_unattributed");
  assert.equal(outcome(facts({ ekAttribution: undefined })), "refuse:ek_binding_unchecked");
  assert.equal(outcome(facts({ node: node({ tpm: "1.2", ek: undefined }), ekAttribution: undefined })), "dispatch:wipe:hookos");
  assert.equal(outcome(facts({ node: node({ tpm: "1.2", ek: undefined }), desiredAction: "attest", ekAttribution: undefined })), "refuse:tpm12_no_attestation");
  assert.equal(outcome(facts({ node: node({ tpm: "none", ek: undefined }) })), "refuse:no_tpm");
  assert.equal(outcome(facts({ node: node({ role: "control-plane" }) })), "refuse:control_planes_disabled");
  assert.equal(outcome(facts({ node: node({ role: "control-plane" }), features: { controlPlanes: true } })), "dispatch:provision");
});

test("decommissioning: only for the authorized group, only while the status still says so", () => {
  const base = { trigger: "decommissioning" as const, desiredAction: null, device: dev("decommissioning", null) };
  assert.equal(outcome(facts({ ...base })), "dispatch:decommission");
  assert.equal(outcome(facts({ ...base, requester: { username: "m", groups: ["other"] } })), "refuse:not_authorized");
  assert.equal(outcome(facts({ ...base, device: dev("active", null) })), "ignore");
  const d = decide(facts({ ...base, requester: { username: "m", groups: [] } }));
  assert.ok(d.outcome === "refuse" && d.clearDesiredAction === false);
});
