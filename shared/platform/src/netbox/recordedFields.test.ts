/** nodeFromDevice reads ldevid_* and runtime_* only as far as the change log attributes them to the attestation account. */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { nodeFromDevice } from "./attestationInventory.js";
import { DeviceRecord } from "./device.js";

const device = DeviceRecord.parse({
  id: 7,
  name: "worker-1",
  serial: "S1",
  status: { value: "active" },
  site: { id: 1 },
  role: { id: 2, slug: "worker" },
  device_type: { id: 3 },
  custom_fields: {
    ldevid_serial: "0abc",
    ldevid_cn: "worker-1.g2",
    ldevid_expiry: "2026-12-30T00:00:00+00:00",
    runtime_verdict: { value: "fail", label: "Fail" },
    runtime_attested_at: "2026-12-03T01:00:00+00:00",
    runtime_passed_at: "2026-12-02T01:00:00+00:00",
  },
});
const slugs = { worker: "worker", "control-plane": "control-plane" };
const all = new Set(["ldevid_serial", "ldevid_cn", "ldevid_expiry", "runtime_verdict", "runtime_attested_at", "runtime_passed_at"]);

test("attributed LDevID and runtime fields are read into the Node", () => {
  const n = nodeFromDevice(device, { unattributed: [], attributed: all }, slugs);
  assert.deepEqual(n.ldevid, { serial: "0abc", cn: "worker-1.g2", notAfter: new Date("2026-12-30T00:00:00Z") });
  assert.deepEqual(n.runtime, { verdict: "fail", at: new Date("2026-12-03T01:00:00Z"), lastPassAt: new Date("2026-12-02T01:00:00Z") });
});

test("a field the attestation account did not write last is not trusted: the whole record is absent", () => {
  for (const f of ["ldevid_serial", "ldevid_cn", "ldevid_expiry"]) {
    const n = nodeFromDevice(device, { unattributed: [], attributed: new Set([...all].filter((x) => x !== f)) }, slugs);
    assert.equal(n.ldevid, undefined, f);
    assert.ok(n.runtime);
  }
  for (const f of ["runtime_verdict", "runtime_attested_at"]) {
    const n = nodeFromDevice(device, { unattributed: [], attributed: new Set([...all].filter((x) => x !== f)) }, slugs);
    assert.equal(n.runtime, undefined, f);
  }
  const noPass = nodeFromDevice(device, { unattributed: [], attributed: new Set([...all].filter((x) => x !== "runtime_passed_at")) }, slugs);
  assert.deepEqual(noPass.runtime, { verdict: "fail", at: new Date("2026-12-03T01:00:00Z") });
  const none = nodeFromDevice(device, { unattributed: [] }, slugs);
  assert.equal(none.ldevid, undefined);
  assert.equal(none.runtime, undefined);
});
