/**
 * The gates' one GraphQL read (gateRead.ts): the answer judged by zod, and the attribution computed from its
 * change log the same as checkAttribution's REST walk (same results, same refusal codes), for any change log.
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import fc from "fast-check";
import { attributionIn, checkAttribution, type AttributedField, type ObjectChangeRecord } from "./changelog.js";
import { NetBoxError, type NetBox } from "./client.js";
import { gateQuery, parseGateRead } from "./gateRead.js";

const device = (over: Record<string, unknown> = {}) => ({
  id: "7",
  name: "worker-1",
  serial: "S1",
  status: "planned",
  custom_fields: { tpm_version: { value: "2.0", label: "TPM 2.0" }, ek_bindings: [{ alg: "rsa", chain: true, sha256: "a".repeat(64) }] },
  last_updated: "2026-12-03T13:11:38.602698+00:00",
  site: { id: "1", name: "Lab", slug: "lab" },
  role: { id: "3", name: "fleetd worker", slug: "fleetd-worker" },
  device_type: { id: "2", slug: "r650" },
  primary_ip4: { id: "2", address: "10.20.0.21/24" },
  interfaces: [
    { id: "4", name: "idrac", mgmt_only: true, cable: { id: "1" }, primary_mac_address: null, link_peers: [{ __typename: "InterfaceType", name: "ethernet1/1/40", device: { name: "tor-a1" } }] },
    { id: "5", name: "eno8303", mgmt_only: false, cable: { id: "2" }, primary_mac_address: { id: "9", mac_address: "00:00:5E:00:53:01" }, link_peers: [{ __typename: "InterfaceType", name: "ethernet1/1/2", device: { name: "tor-a1" } }] },
    { id: "6", name: "eno8403", mgmt_only: false, cable: null, primary_mac_address: null, link_peers: [] },
  ],
  changelog: [
    { id: "55", time: "2026-12-03T13:11:37.753938+00:00", user_name: "fleetd-apply", request_id: "r1", action: "create", prechange_data: null, postchange_data: { name: "worker-1", serial: "S1" }, message: "" },
    { id: "58", time: "2026-12-03T13:11:38.602698+00:00", user_name: "mallory", request_id: "r2", action: "update", prechange_data: { name: "worker-1", serial: "S1" }, postchange_data: { name: "worker-1", serial: "S2" }, message: "" },
  ],
  ...over,
});
const answer = (d: unknown[]) => ({ data: { device_list: d } });

test("a well-formed answer: the device as a DeviceRecord, numeric IDs, interfaces with cable and peers, the change log newest first", () => {
  const r = parseGateRead(answer([device()]), 7);
  assert.ok(r);
  assert.equal(r.device.id, 7);
  assert.equal(r.device.role.slug, "fleetd-worker");
  assert.equal(r.device.role.id, 3);
  assert.equal(r.device.cf["tpm_version"], "2.0", "select custom field as its raw value (cfValue)");
  assert.equal((r.device.primary_ip4 as { address?: string } | null | undefined)?.address, "10.20.0.21/24");
  assert.deepEqual(r.interfaces.map((i) => [i.id, i.cabled, i.mgmt_only]), [[4, true, true], [5, true, false], [6, false, false]]);
  assert.deepEqual(r.interfaces[1]?.link_peers, [{ name: "ethernet1/1/2", device: { name: "tor-a1" } }]);
  assert.deepEqual(r.interfaces[1]?.primary_mac_address, { id: 9, mac_address: "00:00:5E:00:53:01" });
  assert.deepEqual(r.changes.map((c) => c.id), [58, 55], "newest first whatever NetBox's order");
  assert.equal(r.changes[1]?.action, "create");
});

test("no such device (or not visible to the account): undefined", () => {
  assert.equal(parseGateRead(answer([]), 7), undefined);
});

test("an errors answer is a NetBoxError naming NetBox's messages, with or without partial data", () => {
  for (const body of [
    { data: null, errors: [{ message: "Cannot query field 'changelog' on type 'DeviceType'." }] },
    { data: answer([device()]).data, errors: [{ message: "permission denied", path: ["device_list", 0, "changelog"] }] },
  ]) {
    assert.throws(() => parseGateRead(body, 7), (e: unknown) => e instanceof NetBoxError && e.code === "netbox-bad-response" && /errors: .*(changelog|permission)/.test(e.message));
  }
  assert.throws(() => parseGateRead({ errors: [] }, 7), NetBoxError, "an empty errors array is malformed, not a pass");
  assert.throws(() => parseGateRead({ errors: "nope" }, 7), NetBoxError);
});

test("garbled answers are NetBoxErrors, never a Node: wrong device, two devices, missing change log, bad IDs, bad change records", () => {
  const bad: [string, unknown][] = [
    ["another device", answer([device({ id: "8" })])],
    ["two devices", answer([device(), device()])],
    ["no change log field", answer([{ ...device(), changelog: undefined }])],
    ["change log not a list", answer([device({ changelog: {} })])],
    ["a non-numeric ID", answer([device({ id: "7; DROP" })])],
    ["a change with no user", answer([device({ changelog: [{ id: "1", time: "2026-12-03T13:11:37Z", request_id: "r", action: "update", prechange_data: {}, postchange_data: {} }] })])],
    ["a change with an unreadable time", answer([device({ changelog: [{ id: "1", time: "yesterday", user_name: "x", request_id: "r", action: "update", prechange_data: {}, postchange_data: {} }] })])],
    ["interfaces missing", answer([{ ...device(), interfaces: undefined }])],
    ["a peer with a non-string name", answer([device({ interfaces: [{ id: "5", name: "e", mgmt_only: false, cable: { id: "2" }, primary_mac_address: null, link_peers: [{ __typename: "InterfaceType", name: 5 }] }] })])],
    ["no data", {}],
    ["data of another shape", { data: { device: device() } }],
    ["not an object", "<html>"],
  ];
  for (const [what, body] of bad) assert.throws(() => parseGateRead(body, 7), NetBoxError, what);
});

test("the query asks for one device by a checked ID", () => {
  assert.match(gateQuery(7), /device_list\(filters: \{ id: \{ exact: "7" \} \}\)/);
  assert.match(gateQuery(7), /changelog \{ id time user_name request_id action prechange_data postchange_data message \}/);
  assert.throws(() => gateQuery(Number.NaN));
  assert.throws(() => gateQuery(-1));
});

test("property: any JSON answer parses to a GateRead or undefined, or throws a NetBoxError (nothing else)", () => {
  fc.assert(
    fc.property(fc.oneof(fc.jsonValue(), fc.jsonValue().map((v) => ({ data: { device_list: [v] } })), fc.jsonValue().map((v) => answer([{ ...device(), changelog: [v] }]))), (body) => {
      try {
        parseGateRead(body, 7);
      } catch (e) {
        assert.ok(e instanceof NetBoxError, String(e));
      }
    }),
    { numRuns: 500 },
  );
});

// Attribution from the GraphQL change log equals checkAttribution over REST, for any change log.
const ACCOUNTS = ["fleetd-apply", "fleetd-handler", "mallory"];
const fields: AttributedField[] = [
  { path: "name", current: "n1", account: "fleetd-apply", code: "name-unattributed", label: "device name" },
  { path: "serial", current: "", account: "fleetd-apply", code: "serial-unattributed", label: "serial number" },
  { path: "custom_fields.ek_bindings", current: [{ sha256: "b" }], account: "fleetd-apply", code: "ek-bindings-unattributed", label: "EK bindings", plural: true },
  { path: "custom_fields.ldevid_expiry", current: "2026-12-30T00:00:00.000Z", account: "fleetd-handler", code: "ldevid-expiry-unattributed", label: "ldevid expiry", datetime: true },
];
const value = fc.constantFrom<unknown>(null, "", "n1", "n2", [{ sha256: "b" }], [{ sha256: "c" }], "2026-12-30T00:00:00Z", "2026-12-30T00:00:00.000001Z");
const snapshot = fc.record({ name: value, serial: value, custom_fields: fc.record({ ek_bindings: value, ldevid_expiry: value }) });
const changeLog = fc.array(fc.record({ user: fc.constantFrom(...ACCOUNTS), action: fc.constantFrom("create", "update", "delete"), pre: snapshot, post: snapshot }), { maxLength: 12 });

test("property: attribution from the GraphQL answer is checkAttribution's (same walk, same results, same codes)", async () => {
  await fc.assert(
    fc.asyncProperty(changeLog, async (log) => {
      // Oldest first as written; both sides get them as NetBox gives them (REST: ordering=-time; GraphQL: any order).
      const t0 = Date.parse("2026-12-03T10:00:00Z");
      const rows = log.map((c, i) => ({
        id: i + 1,
        time: new Date(t0 + i * 1000).toISOString(),
        user_name: c.user,
        request_id: `r${i}`,
        action: c.action,
        prechange_data: c.action === "create" ? null : c.pre,
        postchange_data: c.action === "delete" ? null : c.post,
        message: "",
      }));
      const newestFirst = [...rows].reverse();
      const rest = { api: { GET: async () => ({ data: { results: newestFirst, next: null }, response: new Response("{}", { status: 200 }) }) } } as unknown as NetBox;
      const viaRest = await checkAttribution(rest, 7, fields);
      const gql = parseGateRead(answer([device({ changelog: rows.map((r) => ({ ...r, id: String(r.id), action: r.action })) })]), 7);
      assert.ok(gql);
      const viaGraphql = attributionIn(gql.changes, fields);
      assert.deepEqual([...viaGraphql], [...viaRest]);
    }),
    { numRuns: 300 },
  );
});

test("attributionIn: the newest change of each field decides; another account's edit is refused with the field's code", () => {
  const r = parseGateRead(answer([device()]), 7);
  assert.ok(r);
  const a = attributionIn(r.changes as ObjectChangeRecord[], [
    { path: "name", current: "worker-1", account: "fleetd-apply", code: "name-unattributed", label: "device name" },
    { path: "serial", current: "S2", account: "fleetd-apply", code: "serial-unattributed", label: "serial number" },
  ]);
  assert.deepEqual(a.get("name"), { ok: true, by: "fleetd-apply", time: "2026-12-03T13:11:37.753938+00:00", change: 55 });
  const s = a.get("serial");
  assert.ok(s && !s.ok && s.code === "serial-unattributed" && /mallory/.test(s.reason), JSON.stringify(s));
});

test("NetBoxInventory.reread: one POST /graphql/; a device NetBox shows no change log for has nothing attributed, even its empty fields", async () => {
  const { NetBoxInventory } = await import("./attestationInventory.js");
  const realFetch = globalThis.fetch;
  const asked: string[] = [];
  let changelog: unknown[] = [];
  globalThis.fetch = (async (input: string | URL | Request) => {
    asked.push(String(input instanceof Request ? input.url : input));
    return new Response(JSON.stringify(answer([device({ changelog })])), { status: 200, headers: { "content-type": "application/json" } });
  }) as typeof fetch;
  try {
    const nb = { url: "http://netbox.invalid", authorization: "Bearer x", api: {} } as unknown as NetBox;
    const inv = new NetBoxInventory(nb, { applyAccount: "fleetd-apply", attestationAccount: "fleetd-handler", roleSlugs: { worker: "fleetd-worker", "control-plane": "cp" } });
    const n = await inv.reread(7);
    assert.deepEqual(asked, ["http://netbox.invalid/graphql/"]);
    assert.ok(n);
    assert.deepEqual(n.switchPort, { device: "tor-a1", port: "ethernet1/1/2" }, "the cabled non-management interface's peer");
    const codes = n.unattributed.map((u) => u.code);
    for (const c of ["name-unattributed", "ek-bindings-unattributed", "primary-ip4-unattributed", "install-disk-unattributed", "attested-uuid-unattributed"]) assert.ok(codes.includes(c as never), `${c} in ${codes.join(", ")}`);
    assert.match(n.unattributed[0]?.reason ?? "", /no change log .*core\.objectchange/);
    // With a change log, an empty field never written is no finding (as on the REST path).
    changelog = [{ id: "1", time: "2026-12-03T13:11:37Z", user_name: "mallory", request_id: "r", action: "create", prechange_data: null, postchange_data: { name: "worker-1" } }];
    const m = await inv.reread(7);
    assert.ok(m?.unattributed.some((u) => u.code === "name-unattributed" && /mallory/.test(u.reason)));
    assert.ok(!m?.unattributed.some((u) => u.code === "install-disk-unattributed"), "install_disk is empty and was never written");
  } finally {
    globalThis.fetch = realFetch;
  }
});
