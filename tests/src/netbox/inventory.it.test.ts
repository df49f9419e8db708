/**
 * Against a real NetBox 4.7: `fleetd netbox setup` (twice, no duplicates), `fleetd inventory apply` of the
 * example nodes file (then zero changes), `inventory check` (drift), hand-edited EK bindings, and bad input
 * that must change nothing.
 */
import { strict as assert } from "node:assert";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { checkEkAttribution, NetBoxError, NetBoxInventory, listDevices, patchDevice, readDevice, CUSTOM_FIELDS } from "@fleetd/platform/netbox";
import { changeCount, EXAMPLE_NODES, exampleNodesText, fleetd, startFleet, type Fleet } from "./fixture.js";

let f: Fleet;
let adminCfg: string;
let applyCfg: string;
before(async () => {
  f = await startFleet();
  adminCfg = f.configFile(f.nb.authorization.replace(/^Bearer /, ""));
  applyCfg = f.configFile(f.apply.token);
}, { timeout: 20 * 60_000 });
after(async () => {
  await f?.nb.stop();
});

test("inventory apply refuses before setup (unknown custom fields) and changes nothing", async () => {
  const before = await changeCount(f);
  const r = fleetd(["inventory", "apply", EXAMPLE_NODES, "--config", applyCfg]);
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, /lacks fleetd's custom fields .*ek_bindings.*netbox setup/);
  assert.equal(await changeCount(f), before);
});

test("netbox setup creates everything once; a second run changes nothing and duplicates nothing", async () => {
  const first = fleetd(["netbox", "setup", "--config", adminCfg]);
  assert.equal(first.code, 0, first.stderr);
  // 31: the contract's four custom fields (ldevid_cn, runtime_verdict, runtime_attested_at, runtime_passed_at) and
  // the SPIRE node list's event rule joined the 26 of before.
  assert.match(first.stdout, /Applied: 31 created, 0 updated, 0 unchanged/);
  const before = await changeCount(f);
  const second = fleetd(["netbox", "setup", "--config", adminCfg]);
  assert.equal(second.code, 0, second.stderr);
  assert.match(second.stdout, /Applied: 0 created, 0 updated, 31 unchanged/);
  assert.equal(await changeCount(f), before, "the second setup wrote nothing");
  const r = await fetch(`${f.nb.url}/api/extras/custom-fields/?limit=1000`, { headers: { authorization: f.nb.authorization } });
  const names = ((await r.json()) as { results: { name: string }[] }).results.map((x) => x.name);
  for (const d of CUSTOM_FIELDS) assert.equal(names.filter((n) => n === d.name).length, 1, d.name);
  const rules = await (await fetch(`${f.nb.url}/api/extras/event-rules/?limit=100`, { headers: { authorization: f.nb.authorization } })).json() as { count: number };
  assert.equal(rules.count, 3, "desired action, decommissioning, SPIRE node list inputs");
  const ek = ((await (await fetch(`${f.nb.url}/api/extras/custom-fields/?name=ek_bindings`, { headers: { authorization: f.nb.authorization } })).json()) as { results: { ui_editable: { value: string } }[] }).results[0];
  assert.equal(ek?.ui_editable.value, "no", "EK bindings are not editable in NetBox's UI");
  const links = await (await fetch(`${f.nb.url}/api/extras/custom-links/?limit=100`, { headers: { authorization: f.nb.authorization } })).json() as { results: { link_url: string }[] };
  assert.ok(links.results.some((l) => l.link_url.includes("edit/?cf_desired_action=provision")));
});

test("inventory apply refuses a token that is not the apply account's", async () => {
  const before = await changeCount(f);
  const r = fleetd(["inventory", "apply", EXAMPLE_NODES, "--config", adminCfg]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /token belongs to admin.*apply account fleetd-apply/);
  assert.equal(await changeCount(f), before);
});

test("--dry-run prints the plan and changes nothing", async () => {
  const before = await changeCount(f);
  const r = fleetd(["inventory", "apply", EXAMPLE_NODES, "--dry-run", "--config", applyCfg]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /\+ dcim\.device worker-1/);
  assert.match(r.stdout, /\+ dcim\.cable worker-1\/eno8303 <-> tor-a1\/ethernet1\/1\/2/);
  assert.match(r.stdout, /Plan: \d+ to create/);
  assert.equal(await changeCount(f), before);
});

test("inventory apply puts the example into NetBox; re-applying changes nothing", async () => {
  const first = fleetd(["inventory", "apply", EXAMPLE_NODES, "--config", applyCfg]);
  assert.equal(first.code, 0, first.stderr + first.stdout);
  const devices = await listDevices(f.admin, { site: ["lab-rack-a"] });
  const byName = new Map(devices.map((d) => [d.name, d]));
  for (const n of ["cp-1", "worker-1", "edge-1"]) {
    const d = byName.get(n);
    assert.ok(d, n);
    assert.equal(d.status, "planned");
    assert.ok(d.primary_ip4, `${n} has a primary IPv4`);
  }
  assert.equal(byName.get("worker-1")?.serial, "7XK2LM4");
  assert.equal(byName.get("edge-1")?.cf["tpm_version"], "2.0");
  assert.deepEqual(byName.get("edge-1")?.cf["ek_bindings"], [{ alg: "ecc", sha256: "c3e8a1f05b9d2e7c4a6f8b1d3e5c7a9f0b2d4e6c8a1f3b5d7e9c0a2f4b6d8e1c", chain: false }]);
  const iface = await (await fetch(`${f.nb.url}/api/dcim/interfaces/?device=worker-1&name=eno8303`, { headers: { authorization: f.nb.authorization } })).json() as { results: { connected_endpoints?: { name: string; device: { name: string } }[] }[] };
  assert.equal(iface.results[0]?.connected_endpoints?.[0]?.name, "ethernet1/1/2");
  assert.equal(iface.results[0]?.connected_endpoints?.[0]?.device.name, "tor-a1");

  const before = await changeCount(f);
  const again = fleetd(["inventory", "apply", EXAMPLE_NODES, "--config", applyCfg]);
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stdout, /Applied: 0 created, 0 updated, \d+ unchanged/);
  assert.equal(await changeCount(f), before, "re-apply wrote nothing");
  const check = fleetd(["inventory", "check", EXAMPLE_NODES, "--config", applyCfg]);
  assert.equal(check.code, 0, check.stdout + check.stderr);
  assert.match(check.stdout, /no drift/);
});

test("the attestation server's inventory: a role (or name) another account set is unattributed, and every step refuses it", async () => {
  // A control plane's config carries the cluster CA keys: a device editor must not make a worker one.
  const inv = new NetBoxInventory(f.admin, { applyAccount: f.apply.username, attestationAccount: f.handler.username, roleSlugs: { worker: "fleetd-worker", "control-plane": "fleetd-control-plane" } });
  const idOf = async (name: string) => (await listDevices(f.admin, { name }))[0]!.id;
  const cp = await inv.reread(await idOf("cp-1"));
  assert.equal(cp?.role, "control-plane", "set by inventory apply");
  assert.deepEqual(cp?.unattributed, [], "everything as the apply account wrote it");
  const id = await idOf("worker-1");
  assert.equal((await inv.reread(id))?.role, "worker");
  const roleId = async (slug: string) =>
    ((await (await fetch(`${f.nb.url}/api/dcim/device-roles/?slug=${slug}`, { headers: { authorization: f.nb.authorization } })).json()) as { results: { id: number }[] }).results[0]!.id;
  await patchDevice(f.client(f.mallory.token), id, { role: await roleId("fleetd-control-plane") }, null, "mallory makes worker-1 a control plane");
  assert.equal((await readDevice(f.admin, id)).device.role.slug, "fleetd-control-plane", "NetBox took the edit");
  const edited = await inv.reread(id);
  assert.ok(edited?.unattributed.some((u) => u.code === "role-unattributed" && u.reason.includes(f.mallory.username)), JSON.stringify(edited?.unattributed));
  await patchDevice(f.admin, id, { role: await roleId("fleetd-worker") }, null, "back to the nodes file's role");
  assert.ok((await inv.reread(id))?.unattributed.some((u) => u.code === "role-unattributed"), "reverted by hand is still not the apply account's write");
});

test("the EK-binding index: a binding added in NetBox a moment ago is found at once; a flood of unknown EKs asks the change log once per interval", async () => {
  const opts = { applyAccount: f.apply.username, attestationAccount: f.handler.username, roleSlugs: { worker: "fleetd-worker", "control-plane": "fleetd-control-plane" } };
  const withBindings = (await listDevices(f.admin, {})).filter((d) => Array.isArray(d.cf["ek_bindings"]) && (d.cf["ek_bindings"] as unknown[]).length > 0);
  const [a, b] = withBindings;
  assert.ok(a && b, "two devices with EK bindings");
  const bindingOf = (d: typeof a) => (d.cf["ek_bindings"] as { sha256: string }[])[0]!.sha256;
  // Requests to the change log, counted at the one fetch both clients use.
  const realFetch = globalThis.fetch;
  let changeLogAsks = 0;
  globalThis.fetch = (async (input: string | URL | Request, init?: RequestInit) => {
    const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
    if (url.includes("/api/core/object-changes/") && url.includes("id__gt")) changeLogAsks++;
    return realFetch(input, init);
  }) as typeof fetch;
  const added = "e".repeat(64);
  const original = b.custom_fields["ek_bindings"];
  try {
    const inv = new NetBoxInventory(f.client(f.handler.token), { ...opts, indexRefreshMs: 60_000 });
    assert.equal((await inv.findByEkBinding(bindingOf(a)))?.deviceId, a.id, "the index is built at the first lookup");
    // The inventory apply account approves one more EK for b; the very next lookup finds it.
    await patchDevice(f.client(f.apply.token), b.id, { custom_fields: { ek_bindings: [...(original as unknown[]), { alg: "rsa", sha256: added, chain: false }] } }, null, "index test: one more EK");
    const found = await inv.findByEkBinding(added);
    assert.equal(found?.deviceId, b.id, "found at once, not after indexRefreshMs");
    assert.ok(found?.ekBindings.some((x) => x.binding === added));
    assert.equal(changeLogAsks, 1, "one change-log request");
    // A flood of unknown EKs within the interval: no more change-log requests.
    const unknown = Array.from({ length: 20 }, (_, i) => i.toString(16).padStart(64, "0"));
    assert.deepEqual(await Promise.all(unknown.map((u) => inv.findByEkBinding(u))), unknown.map(() => undefined));
    for (const u of unknown) assert.equal(await inv.findByEkBinding(u), undefined);
    assert.equal(changeLogAsks, 1, "the flood asked nothing");
    // A found node comes from the index: no request at all (the gates read it again before anything is released).
    const before = changeLogAsks;
    assert.equal((await inv.findByEkBinding(added))?.deviceId, b.id);
    assert.equal(changeLogAsks, before);
  } finally {
    globalThis.fetch = realFetch;
    await patchDevice(f.client(f.apply.token), b.id, { custom_fields: { ek_bindings: original } }, null, "index test: back to the nodes file's EKs");
  }
});

test("the gates' one GraphQL read fails closed for an account that cannot view the change log: nothing is attributed", async () => {
  const opts = { applyAccount: f.apply.username, attestationAccount: f.handler.username, roleSlugs: { worker: "fleetd-worker", "control-plane": "fleetd-control-plane" } };
  const id = (await listDevices(f.admin, { name: "cp-1" }))[0]!.id; // worker-1's role was edited by hand above
  assert.deepEqual((await new NetBoxInventory(f.client(f.handler.token), opts).reread(id))?.unattributed, [], "the attestation account: everything attributed");
  // mallory may view devices only (no core.objectchange, no interfaces): GraphQL shows her an empty change log.
  let r: Awaited<ReturnType<NetBoxInventory["reread"]>>;
  try {
    r = await new NetBoxInventory(f.client(f.mallory.token), opts).reread(id);
  } catch (e) {
    assert.ok(e instanceof NetBoxError, String(e)); // NetBox refused the read itself: also closed
    return;
  }
  assert.ok(r, "the device is visible to mallory");
  const codes = r.unattributed.map((u) => u.code);
  for (const c of ["name-unattributed", "serial-unattributed", "ek-bindings-unattributed", "role-unattributed"]) assert.ok(codes.includes(c as never), `${c} in ${codes.join(", ")}`);
  assert.match(r.unattributed[0]?.reason ?? "", /no change log/);
});

test("inventory check detects drift: hand-edited serial, reported port, hand-edited EK bindings", async () => {
  const d = (await listDevices(f.admin, { name: ["worker-1"] }))[0];
  assert.ok(d);
  await patchDevice(f.admin, d.id, { serial: "WRONG-1", custom_fields: { attested_port: "tor-a1/ethernet1/1/9" } }, null, "test: drift");
  const cp = (await listDevices(f.admin, { name: ["cp-1"] }))[0];
  assert.ok(cp);
  const forged = [{ alg: "rsa", sha256: "f".repeat(64), chain: true }];
  // Written through the API by a NetBox admin: not the apply account.
  await patchDevice(f.admin, cp.id, { custom_fields: { ek_bindings: forged } }, null, "test: hand edit");
  const att = await checkEkAttribution(f.admin, cp.id, forged, f.apply.username);
  assert.equal(att.ok, false);
  assert.match(att.ok ? "" : att.reason, /last changed by admin/);

  const check = fleetd(["inventory", "check", EXAMPLE_NODES, "--json", "--config", applyCfg]);
  assert.equal(check.code, 1, check.stderr);
  const out = JSON.parse(check.stdout) as { drift: number; rows: { node: string; check: string; ok: boolean; reported: string; netbox: string }[] };
  const bad = out.rows.filter((r) => !r.ok);
  assert.ok(bad.some((r) => r.node === "worker-1" && /serial/.test(r.check)), "serial drift");
  assert.ok(bad.some((r) => r.node === "worker-1" && r.check === "attested switch port" && r.reported === "tor-a1/ethernet1/1/9"), "port drift");
  assert.ok(bad.some((r) => r.node === "cp-1" && /EK bindings written by apply account/.test(r.check) && /admin/.test(r.netbox)), "EK attribution drift");
  const table = fleetd(["inventory", "check", EXAMPLE_NODES, "--config", applyCfg]);
  assert.equal(table.code, 1);
  assert.match(table.stdout, /NODE\s+CHECK\s+FILE\s+NETBOX\s+REPORTED/);
  assert.match(table.stdout, /DRIFT/);

  // The apply account restores the file's truth; the bindings are attributed again.
  await patchDevice(f.admin, d.id, { custom_fields: { attested_port: null } }, null, "test: clear");
  const fix = fleetd(["inventory", "apply", EXAMPLE_NODES, "--config", applyCfg]);
  assert.equal(fix.code, 0, fix.stderr);
  assert.match(fix.stdout, /serial: "WRONG-1" -> "7XK2LM4"/);
  assert.match(fix.stdout, /custom_fields\.ek_bindings/);
  const att2 = await checkEkAttribution(f.admin, cp.id, (await listDevices(f.admin, { name: ["cp-1"] }))[0]?.cf["ek_bindings"], f.apply.username);
  assert.equal(att2.ok, true);
  assert.equal(fleetd(["inventory", "check", EXAMPLE_NODES, "--config", applyCfg]).code, 0);
});

test("If-Match: a PATCH with a stale ETag is refused by NetBox (412 → netbox-conflict)", async () => {
  const d = (await listDevices(f.admin, { name: ["edge-1"] }))[0];
  assert.ok(d);
  const { etag } = await readDevice(f.admin, d.id);
  assert.ok(etag, "NetBox sends an ETag");
  await patchDevice(f.admin, d.id, { description: "changed meanwhile" }, null, "test");
  await assert.rejects(patchDevice(f.admin, d.id, { custom_fields: { desired_action: null } }, etag, "test"), (e: unknown) => e instanceof NetBoxError && e.code === "netbox-conflict" && e.status === 412);
  const fresh = await readDevice(f.admin, d.id);
  await patchDevice(f.admin, d.id, { description: "" }, fresh.etag, "test");
});

test("a node removed from the file is reported, never deleted", async () => {
  const text = exampleNodesText();
  const cut = text.slice(0, text.indexOf("  edge-1:"));
  const p = join(f.dir, "two-nodes.yaml");
  writeFileSync(p, cut);
  const r = fleetd(["inventory", "apply", p, "--config", applyCfg]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /! dcim\.device edge-1 {2}\(not in the nodes file; left in NetBox/);
  assert.equal((await listDevices(f.admin, { name: ["edge-1"] })).length, 1);
});

test("malformed nodes files: a clear error with the line, nothing changed in NetBox", async () => {
  const good = exampleNodesText();
  const cases: [string, string, RegExp][] = [
    ["not yaml", "version: 1\nnodes: [\n", /bad\.yaml:\d+: /],
    ["duplicate node name", good.replace("  edge-1:", "  worker-1:"), /bad\.yaml:\d+: Map keys must be unique/],
    ["duplicate serial", good.replace("serial: G6NUC13-00417", "serial: 7XK2LM4"), /bad\.yaml:\d+: nodes\.edge-1\.serial: serial 7XK2LM4 is also used by nodes\.worker-1/],
    ["duplicate EK binding", good.replace("c3e8a1f05b9d2e7c4a6f8b1d3e5c7a9f0b2d4e6c8a1f3b5d7e9c0a2f4b6d8e1c", "5d1b3e0c8f7a4b2d9e6c1a0f3b8d7e2c4a9f6b1d0e3c8a7f2b5d4e9c1a6f3b08"), /EK binding 5d1b.* is also used by nodes\.worker-1/],
    ["uppercase EK binding", good.replace("5d1b3e0c", "5D1B3E0C"), /bad\.yaml:\d+: nodes\.worker-1\.ek\.0\.sha256: must be 64 lowercase hex/],
    ["gateway outside subnet", good.replace("gateway: 10.20.0.1 }\n    installDisk: /dev/sda", "gateway: 10.30.0.1 }\n    installDisk: /dev/sda"), /nodes\.edge-1\.address\.gateway: 10\.30\.0\.1 is not in 10\.20\.0\.31\/24/],
    ["credentials inline", good.replace('credentials: "secret:tinkerbell/fleetd-bmc-edge-1"', "credentials: hunter2"), /never the credentials themselves/],
    ["unknown field", good.replace("    role: worker\n    switch: { device: tor-a1, port: ethernet1/1/3 }", "    role: worker\n    colour: blue\n    switch: { device: tor-a1, port: ethernet1/1/3 }"), /bad\.yaml:\d+: nodes\.edge-1: Unrecognized key: "colour"/],
    ["bad node name", good.replace("  edge-1:", "  Edge_1:"), /Edge_1 is not a valid name/],
    ["TPM 2.0 without binding", good.replace(/    ek:\n      - \{ alg: ecc[^\n]*\n/, ""), /nodes\.edge-1\.ek: a TPM 2\.0 node needs at least one approved EK binding/],
  ];
  const before = await changeCount(f);
  for (const [what, text, want] of cases) {
    const p = join(f.dir, "bad.yaml");
    writeFileSync(p, text);
    const r = fleetd(["inventory", "apply", p, "--config", applyCfg]);
    assert.equal(r.code, 2, `${what}: exit code`);
    assert.match(r.stderr, want, `${what}: ${r.stderr}`);
  }
  const big = join(f.dir, "big.yaml");
  writeFileSync(big, "# " + "x".repeat(2 * 1024 * 1024));
  const r = fleetd(["inventory", "apply", big, "--config", applyCfg]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /larger than 1048576 bytes/);
  assert.equal(await changeCount(f), before, "nothing was written");
});

test("inventory apply never takes over an IP address assigned elsewhere (another device, an FHRP group), and looks addresses up in the node's VRF only", async () => {
  const text = exampleNodesText();
  const node = (name: string, serial: string, port: string, cidr: string): string =>
    `\n  ${name}:\n    serial: ${serial}\n    model: nuc13\n    class: ubuntu\n    role: worker\n    switch: { device: tor-a1, port: ${port} }\n` +
    `    address: { cidr: ${cidr}, gateway: 10.20.0.1 }\n    installDisk: /dev/sda\n    bmc: { type: none }\n    tpm: none\n`;
  const admin = async (path: string, body: unknown): Promise<{ id: number }> => {
    const r = await fetch(`${f.nb.url}${path}`, { method: "POST", headers: { authorization: f.nb.authorization, "content-type": "application/json" }, body: JSON.stringify(body) });
    const text = await r.text();
    assert.equal(r.status, 201, `${path}: ${text}`);
    return JSON.parse(text) as { id: number };
  };
  const ipById = async (id: number): Promise<Record<string, unknown>> =>
    (await (await fetch(`${f.nb.url}/api/ipam/ip-addresses/${id}/`, { headers: { authorization: f.nb.authorization } })).json()) as Record<string, unknown>;
  // Someone else's addresses: a non-primary IP of another device, an FHRP group's virtual IP, and one that
  // exists only in another VRF.
  const w1 = (await listDevices(f.admin, { name: ["worker-1"] }))[0];
  assert.ok(w1);
  const other = await admin("/api/dcim/devices/", { name: "other-1", device_type: w1.device_type.id, role: w1.role.id, site: w1.site.id, status: "active" });
  const otherIf = await admin("/api/dcim/interfaces/", { device: other.id, name: "eth1", type: "1000base-t" });
  const taken = await admin("/api/ipam/ip-addresses/", { address: "10.20.0.51/24", assigned_object_type: "dcim.interface", assigned_object_id: otherIf.id, description: "other-1 management" });
  const fhrp = await admin("/api/ipam/fhrp-groups/", { protocol: "vrrp2", group_id: 7 });
  const vip = await admin("/api/ipam/ip-addresses/", { address: "10.20.0.52/24", assigned_object_type: "ipam.fhrpgroup", assigned_object_id: fhrp.id, description: "VRRP VIP" });
  const vrf = await admin("/api/ipam/vrfs/", { name: "tenant-b" });
  const inVrf = await admin("/api/ipam/ip-addresses/", { address: "10.20.0.53/24", vrf: vrf.id, assigned_object_type: "dcim.interface", assigned_object_id: otherIf.id, description: "tenant-b" });
  const snapshot = async (): Promise<string> => JSON.stringify(await Promise.all([taken.id, vip.id, inVrf.id].map(async (id) => {
    const x = await ipById(id);
    return [x["assigned_object_type"], x["assigned_object_id"], x["description"], (x["vrf"] as { id?: number } | null)?.id ?? null];
  })));
  const was = await snapshot();

  for (const [cidr, owner] of [["10.20.0.51/24", /dcim\.interface "other-1\/eth1"/], ["10.20.0.52/24", /ipam\.fhrpgroup/]] as const) {
    const p = join(f.dir, "takeover.yaml");
    writeFileSync(p, text + node("new-1", "NEW-0001", "ethernet1/1/5", cidr));
    const before = await changeCount(f);
    const dry = fleetd(["inventory", "apply", p, "--dry-run", "--config", applyCfg]);
    assert.equal(dry.code, 1, `${cidr}: the plan has a conflict: ${dry.stdout}${dry.stderr}`);
    assert.match(dry.stderr, new RegExp(`new-1: ${cidr.split("/")[0]!.replace(/\./g, "\\.")} is already assigned to .*fleetd does not take it over`));
    assert.match(dry.stderr, owner);
    const real = fleetd(["inventory", "apply", p, "--config", applyCfg]);
    assert.equal(real.code, 1, real.stdout + real.stderr);
    assert.match(real.stderr, /refused: nothing was changed in NetBox/);
    assert.equal(await changeCount(f), before, `${cidr}: nothing written`);
    assert.equal(await snapshot(), was, `${cidr}: the other object's address is untouched`);
  }

  // The same address in another VRF is another address: the node gets its own in the global table.
  const p = join(f.dir, "vrf.yaml");
  writeFileSync(p, text + node("new-2", "NEW-0002", "ethernet1/1/6", "10.20.0.53/24"));
  const r = fleetd(["inventory", "apply", p, "--config", applyCfg]);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.equal(await snapshot(), was, "tenant-b's 10.20.0.53 is untouched");
  const n2 = (await listDevices(f.admin, { name: ["new-2"] }))[0];
  assert.ok(n2?.primary_ip4);
  assert.notEqual(n2.primary_ip4.id, inVrf.id);
  const own = await ipById(n2.primary_ip4.id);
  assert.equal(own["vrf"], null);
  assert.equal(own["description"], "fleetd new-2");
});
