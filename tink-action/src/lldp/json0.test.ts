/**
 * The LLDP claim from lldpctl's json0. The samples follow the structure lldpd 1.0.16 prints (`lldpctl -f json0`,
 * lldpcli(8): "the structure of the JSON object is not affected by the number of interfaces or the number of
 * neighbors"); the values are made up for a Dell OS10 top-of-rack switch.
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import fc from "fast-check";
import { lldpFromJson0, lldpFromLldpctlOutput } from "./json0.js";

interface N {
  iface: string;
  via?: string;
  chassisIdType?: string;
  chassisId?: string;
  sysName?: string;
  portIdType?: string;
  portId?: string;
}

/** One neighbour entry exactly as json0 nests it. */
function entry(n: N): Record<string, unknown> {
  const chassis: Record<string, unknown> = {
    ...(n.chassisId !== undefined ? { id: [{ type: n.chassisIdType ?? "mac", value: n.chassisId }] } : {}),
    ...(n.sysName !== undefined ? { name: [{ value: n.sysName }] } : {}),
    descr: [{ value: "Dell SmartFabric OS10 Enterprise." }],
    "mgmt-ip": [{ value: "10.20.1.2" }],
    capability: [
      { type: "Bridge", enabled: true },
      { type: "Router", enabled: true },
    ],
  };
  return {
    name: n.iface,
    via: n.via ?? "LLDP",
    rid: "1",
    age: "0 day, 00:00:21",
    chassis: [chassis],
    port: [
      {
        ...(n.portId !== undefined ? { id: [{ type: n.portIdType ?? "ifname", value: n.portId }] } : {}),
        descr: [{ value: "worker-1 eno8303" }],
        ttl: [{ value: "120" }],
      },
    ],
  };
}
const doc = (...ns: N[]) => ({ lldp: [{ interface: ns.map(entry) }] });
const tor = { iface: "eno8303", chassisId: "50:9a:4c:d0:11:00", sysName: "tor-a1", portId: "ethernet1/1/2" };

test("one neighbour: the switch's system name and the port ID", () => {
  const r = lldpFromJson0(doc(tor), "eno8303");
  assert.deepEqual(r.lldp, { chassisId: "tor-a1", portId: "ethernet1/1/2" });
  assert.match(r.reason, /tor-a1 port ethernet1\/1\/2/);
});

test("no system name: the chassis ID (e.g. subtype local) stands in; a MAC chassis ID then will not match NetBox", () => {
  assert.deepEqual(lldpFromJson0(doc({ ...tor, sysName: undefined, chassisIdType: "local", chassisId: "tor-a1" }), "eno8303").lldp, { chassisId: "tor-a1", portId: "ethernet1/1/2" });
  assert.deepEqual(lldpFromJson0(doc({ ...tor, sysName: "  " }), "eno8303").lldp, { chassisId: "50:9a:4c:d0:11:00", portId: "ethernet1/1/2" });
});

test("only the boot interface counts", () => {
  const r = lldpFromJson0(doc({ ...tor, iface: "eno8403" }), "eno8303");
  assert.equal(r.lldp, null);
  assert.match(r.reason, /no LLDP neighbour on eno8303/);
});

test("two different neighbours on the boot interface: ambiguous, no claim; the same neighbour twice is one", () => {
  const two = lldpFromJson0(doc(tor, { ...tor, sysName: "rogue", portId: "eth0" }), "eno8303");
  assert.equal(two.lldp, null);
  assert.match(two.reason, /2 different LLDP neighbours on eno8303 \(tor-a1 ethernet1\/1\/2, rogue eth0\)/);
  assert.deepEqual(lldpFromJson0(doc(tor, tor), "eno8303").lldp, { chassisId: "tor-a1", portId: "ethernet1/1/2" });
});

test("CDP/EDP neighbours, missing IDs and over-long IDs give no claim, saying why", () => {
  const cdp = lldpFromJson0(doc({ ...tor, via: "CDPv2" }), "eno8303");
  assert.equal(cdp.lldp, null);
  assert.match(cdp.reason, /ignored a CDPv2 neighbour/);
  assert.match(lldpFromJson0(doc({ ...tor, portId: undefined }), "eno8303").reason, /without a port ID/);
  assert.match(lldpFromJson0(doc({ ...tor, sysName: undefined, chassisId: undefined }), "eno8303").reason, /without a chassis ID/);
  assert.match(lldpFromJson0(doc({ ...tor, portId: "p".repeat(257) }), "eno8303").reason, /longer than 256/);
});

test("lldpd's answer with no neighbour, and outputs that are not json0", () => {
  // What lldpctl -f json0 prints for an interface without neighbours (lldpd 1.0.16).
  assert.match(lldpFromLldpctlOutput('{\n  "lldp": [\n    {\n      \n    }\n  ]\n}\n', "eno8303").reason, /no LLDP neighbour/);
  // Plain -f json: keyed by interface and system name; refused rather than guessed at.
  const plain = { lldp: { interface: { eno8303: { via: "LLDP", chassis: { "tor-a1": { id: { type: "mac", value: "50:9a:4c:d0:11:00" } } }, port: { id: { type: "ifname", value: "ethernet1/1/2" } } } } } };
  const r = lldpFromJson0(plain, "eno8303");
  assert.equal(r.lldp, null);
  assert.match(r.reason, /not lldpd's json0/);
  assert.match(lldpFromLldpctlOutput("lldpctl: unable to connect", "eno8303").reason, /not JSON/);
  assert.match(lldpFromJson0(null, "eno8303").reason, /not lldpd's json0/);
});

test("property: any JSON at all gives a reading (never a throw), and any claim it gives fits the protocol's limits", () => {
  fc.assert(
    fc.property(fc.jsonValue(), fc.constantFrom("eno8303", "eth0"), (j, iface) => {
      const r = lldpFromJson0(j, iface);
      if (r.lldp) assert.ok(r.lldp.chassisId.length >= 1 && r.lldp.chassisId.length <= 256 && r.lldp.portId.length >= 1 && r.lldp.portId.length <= 256);
      assert.equal(typeof r.reason, "string");
    }),
    { numRuns: 300 },
  );
  fc.assert(
    fc.property(fc.string({ maxLength: 300 }), (s) => {
      assert.equal(typeof lldpFromLldpctlOutput(s, "eth0").reason, "string");
    }),
    { numRuns: 300 },
  );
});

test("property: a single neighbour's system name and port ID come back as sent (trimmed)", () => {
  const name = fc.string({ minLength: 1, maxLength: 256 }).filter((s) => s.trim().length > 0 && s.trim() === s);
  fc.assert(
    fc.property(name, name, fc.option(fc.constant("50:9a:4c:d0:11:00")), (sysName, portId, chassisId) => {
      const r = lldpFromJson0(doc({ iface: "eth0", sysName, portId, ...(chassisId ? { chassisId } : {}) }), "eth0");
      assert.deepEqual(r.lldp, { chassisId: sysName, portId });
    }),
    { numRuns: 200 },
  );
});
