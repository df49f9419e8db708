/**
 * `fleetd inventory apply`: puts a nodes file into NetBox, idempotently (style §4). Order: site, manufacturers,
 * device types, roles, switches and their ports, then per node the device (created `planned`, status never
 * changed afterwards), its boot interface, its primary IPv4 and the cable to its switch port.
 *
 * The same code computes the plan (dry run) and applies it. A real apply first runs the dry run: if the plan
 * has conflicts, nothing is written. Nodes missing from the file are reported, never deleted.
 */
import { listAll, must, NetBoxError, type NetBox } from "../netbox/client.js";
import { INVENTORY_FIELDS } from "../netbox/fields.js";
import { missingCustomFields } from "../netbox/setup.js";
import { diffFields, syncKind, type Change, type SyncKind } from "../netbox/sync.js";
import { own, safeLine } from "@fleetd/verify/text";
import type { NodesFile } from "../fleet/nodesFile.js";
import { deviceFieldsFromEntry, INTERFACE_TYPE, slugify } from "./netboxView.js";
import { CodedError } from "../fleet/codedError.js";

export const INVENTORY_ERROR_CODES = ["inventory-conflict", "inventory-missing-fields", "inventory-wrong-account"] as const;

export class InventoryError extends CodedError<(typeof INVENTORY_ERROR_CODES)[number]> {
  override readonly name = "InventoryError";
}

type B = Record<string, unknown>;
interface Obj {
  id: number;
  name?: string | null;
  [k: string]: unknown;
}

function kind(nb: NetBox, what: string, path: string, list: () => Promise<Obj[]>, keyOf: (e: Obj) => string, extra: Partial<SyncKind<Obj, B>> = {}): SyncKind<Obj, B> {
  const { api } = nb;
  return {
    what,
    list,
    keyOf,
    keyOfDesired: (b) => String(b["name"]),
    create: async (b) => (await must(api.POST(path as "/api/dcim/sites/", { body: b as never }), `create ${what} ${String(b["name"] ?? b["model"])}`)).data as unknown as Obj,
    update: async (id, p) =>
      (await must(api.PATCH(`${path}{id}/` as "/api/dcim/sites/{id}/", { params: { path: { id } }, body: p as never }), `update ${what} ${id}`)).data as unknown as Obj,
    ...extra,
  };
}

export interface ApplyResult {
  changes: Change[];
  conflicts: string[];
}

/** Who the token belongs to (NetBox 4.5+ /api/authentication-check/). */
export async function whoAmI(nb: NetBox): Promise<{ id: number; username: string; groups: string[] }> {
  const { data } = await must(nb.api.GET("/api/authentication-check/"), "authentication check");
  const u = data as unknown as { id: number; username: string; groups?: { name: string }[] };
  return { id: u.id, username: u.username, groups: (u.groups ?? []).map((g) => g.name) };
}

export async function inventoryApply(nb: NetBox, file: NodesFile, opts: { dryRun: boolean; applyAccount: string }): Promise<ApplyResult> {
  const me = await whoAmI(nb);
  if (me.username !== opts.applyAccount) {
    throw new InventoryError("inventory-wrong-account", `the token belongs to ${me.username}, but EK bindings are accepted only from the apply account ${opts.applyAccount}: use that account's token`);
  }
  const missing = await missingCustomFields(nb, INVENTORY_FIELDS);
  if (missing.length > 0) {
    throw new InventoryError("inventory-missing-fields", `NetBox lacks fleetd's custom fields ${missing.join(", ")} on dcim.device: run \`fleetd netbox setup\` first`);
  }
  const plan = await reconcile(nb, file, true);
  if (opts.dryRun || plan.conflicts.length > 0) return plan;
  return reconcile(nb, file, false);
}

/** What `apply` would change, without the account check (for `inventory check`). */
export function planInventory(nb: NetBox, file: NodesFile): Promise<ApplyResult> {
  return reconcile(nb, file, true);
}

async function reconcile(nb: NetBox, file: NodesFile, dryRun: boolean): Promise<ApplyResult> {
  const { api } = nb;
  const changes: Change[] = [];
  const conflicts: string[] = [];
  const q = { limit: 1000 };

  // site
  const site = await syncKind(
    kind(nb, "dcim.site", "/api/dcim/sites/", () => listAll(api.GET("/api/dcim/sites/", { params: { query: { ...q, slug: [file.site.slug] } } }), "list sites", nb) as Promise<Obj[]>, (e) => String(e["slug"]), {
      keyOfDesired: (b) => String(b["slug"]),
      createOnly: ["status"],
    }),
    [{ name: file.site.name, slug: file.site.slug, status: "active" }],
    dryRun,
  );
  changes.push(...site.changes);
  const siteId = site.byKey.get(file.site.slug)?.id;

  // manufacturers and device types
  const mfrNames = [...new Set(Object.values(file.models).map((m) => m.manufacturer))];
  const mfr = await syncKind(
    kind(nb, "dcim.manufacturer", "/api/dcim/manufacturers/", () => listAll(api.GET("/api/dcim/manufacturers/", { params: { query: q } }), "list manufacturers", nb) as Promise<Obj[]>, (e) => String(e["slug"]), {
      keyOfDesired: (b) => String(b["slug"]),
    }),
    mfrNames.map((name) => ({ name, slug: slugify(name) })),
    dryRun,
  );
  changes.push(...mfr.changes);
  const typeKey = (mfrSlug: string, model: string): string => `${mfrSlug}/${slugify(model)}`;
  const types = await syncKind(
    kind(nb, "dcim.devicetype", "/api/dcim/device-types/", () => listAll(api.GET("/api/dcim/device-types/", { params: { query: q } }), "list device types", nb) as Promise<Obj[]>,
      (e) => `${String((e["manufacturer"] as { slug?: string } | undefined)?.slug)}/${String(e["slug"])}`, { keyOfDesired: (b) => String(b["_key"]) }),
    Object.values(file.models).map((m) => {
      const ms = slugify(m.manufacturer);
      return { _key: typeKey(ms, m.model), manufacturer: mfr.byKey.get(ms)?.id ?? 0, model: m.model, slug: slugify(m.model) };
    }).filter((v, i, a) => a.findIndex((x) => x._key === v._key) === i),
    dryRun,
  );
  changes.push(...types.changes);
  const typeIdOf = (modelKey: string): number => {
    const m = own(file.models, modelKey);
    return m ? types.byKey.get(typeKey(slugify(m.manufacturer), m.model))?.id ?? 0 : 0;
  };

  // roles
  const roles = await syncKind(
    kind(nb, "dcim.devicerole", "/api/dcim/device-roles/", () => listAll(api.GET("/api/dcim/device-roles/", { params: { query: q } }), "list device roles", nb) as Promise<Obj[]>, (e) => String(e["slug"]), {
      keyOfDesired: (b) => String(b["slug"]),
    }),
    Object.values(file.roles).map((r) => ({ name: r.name, slug: r.slug, color: r.color, vm_role: false })),
    dryRun,
  );
  changes.push(...roles.changes);
  const roleId = (slug: string): number => roles.byKey.get(slug)?.id ?? 0;

  // devices at the site (switches and nodes), keyed by name
  const siteDevices = siteId === undefined ? [] : ((await listAll(api.GET("/api/dcim/devices/", { params: { query: { ...q, site_id: [siteId] } } }), "list devices", nb)) as unknown as Obj[]);
  const deviceKind = kind(nb, "dcim.device", "/api/dcim/devices/", async () => siteDevices, (e) => String(e.name), { createOnly: ["status"] });

  const switches = await syncKind(
    deviceKind,
    Object.entries(file.switches).map(([name, s]) => ({ name, device_type: typeIdOf(s.model), role: roleId(file.roles.switch.slug), site: siteId ?? 0, status: "active" })),
    dryRun,
  );
  changes.push(...switches.changes);

  const ifaceKind = (deviceId: number | undefined, deviceName: string): SyncKind<Obj, B> =>
    kind(nb, "dcim.interface", "/api/dcim/interfaces/", async () =>
      deviceId === undefined ? [] : ((await listAll(api.GET("/api/dcim/interfaces/", { params: { query: { ...q, device_id: [deviceId] } } }), "list interfaces", nb)) as unknown as Obj[]),
      (e) => `${deviceName}/${String(e.name)}`, { keyOfDesired: (b) => `${deviceName}/${String(b["name"])}`, createOnly: ["type"] });

  // switch ports the nodes use
  const ports = new Map<string, Obj | undefined>();
  for (const [swName] of Object.entries(file.switches)) {
    const sw = switches.byKey.get(swName);
    const wanted = [...new Set(Object.values(file.nodes).filter((n) => n.switch.device === swName).map((n) => n.switch.port))];
    if (wanted.length === 0) continue;
    const r = await syncKind(ifaceKind(sw?.id, swName), wanted.map((port) => ({ name: port, device: sw?.id ?? 0, type: INTERFACE_TYPE })), dryRun);
    changes.push(...r.changes);
    for (const [k, v] of r.byKey) ports.set(k, v);
  }

  // nodes
  for (const [name, n] of Object.entries(file.nodes)) {
    const existing = siteDevices.find((d) => d.name === name);
    const { fields: top, customFields: cfWanted } = deviceFieldsFromEntry(name, n, { deviceType: typeIdOf(n.model), role: roleId(file.roles[n.role].slug), site: siteId ?? 0 });
    let device: Obj | undefined = existing;
    if (!existing) {
      changes.push({ kind: "create", object: `dcim.device ${name}`, note: "status planned" });
      if (!dryRun) device = (await must(api.POST("/api/dcim/devices/", { body: { ...top, status: "planned", custom_fields: cfWanted } as never }), `create device ${name}`)).data as unknown as Obj;
    } else {
      const fields = diffFields(existing, top);
      const cfExisting = (existing["custom_fields"] ?? {}) as Record<string, unknown>;
      const cfChanges = diffFields(cfExisting, cfWanted).map((f) => ({ ...f, field: `custom_fields.${f.field}` }));
      if (fields.length + cfChanges.length === 0) changes.push({ kind: "unchanged", object: `dcim.device ${name}` });
      else {
        changes.push({ kind: "update", object: `dcim.device ${name}`, fields: [...fields, ...cfChanges] });
        if (!dryRun) {
          const patch: Record<string, unknown> = Object.fromEntries(fields.map((f) => [f.field, f.to]));
          if (cfChanges.length > 0) patch["custom_fields"] = Object.fromEntries(cfChanges.map((f) => [f.field.slice("custom_fields.".length), f.to]));
          device = (await must(api.PATCH("/api/dcim/devices/{id}/", { params: { path: { id: existing.id } }, body: patch as never }), `update device ${name}`)).data as unknown as Obj;
        }
      }
    }

    // boot interface
    const ifr = await syncKind(ifaceKind(device?.id, name), [{ name: n.interface, device: device?.id ?? 0, type: INTERFACE_TYPE }], dryRun);
    changes.push(...ifr.changes);
    const iface = ifr.byKey.get(`${name}/${n.interface}`);

    // primary IPv4, looked up in the node's VRF: the global table (the nodes file names no VRF, and the
    // address fleetd creates has none); the same address in another VRF is another address, left alone.
    const ip = n.address.cidr.split("/")[0] as string;
    const ips = (await listAll(api.GET("/api/ipam/ip-addresses/", { params: { query: { ...q, address: [ip], vrf_id: "null" } as never } }), "list IP addresses", nb)) as unknown as Obj[];
    const ipWanted = { address: n.address.cidr, status: "active", assigned_object_type: "dcim.interface", assigned_object_id: iface?.id ?? 0, description: `fleetd ${name}` };
    let ipObj: Obj | undefined = ips[0];
    if (ips.length > 1) conflicts.push(`${name}: ${ips.length} IP address objects for ${ip} in NetBox's global table; remove the duplicates`);
    const elsewhere = ipObj ? assignedElsewhere(ipObj, device?.id) : undefined;
    if (ipObj && elsewhere !== undefined) {
      // Another device's, a VM's or an FHRP group's address is never re-assigned or re-described: a conflict
      // in the plan (for a node that does not exist yet too), so a real run writes nothing at all.
      conflicts.push(`${name}: ${ip} is already assigned to ${elsewhere} in NetBox (IP address #${ipObj.id}); fleetd does not take it over`);
      changes.push({ kind: "unchanged", object: `ipam.ipaddress ${n.address.cidr}`, note: `assigned to ${elsewhere}: conflict` });
    } else if (!ipObj) {
      changes.push({ kind: "create", object: `ipam.ipaddress ${n.address.cidr}`, note: `on ${name}/${n.interface}` });
      if (!dryRun) ipObj = (await must(api.POST("/api/ipam/ip-addresses/", { body: ipWanted as never }), `create IP ${n.address.cidr}`)).data as unknown as Obj;
    } else {
      const f = diffFields(ipObj, ipWanted);
      if (f.length === 0) changes.push({ kind: "unchanged", object: `ipam.ipaddress ${n.address.cidr}` });
      else {
        changes.push({ kind: "update", object: `ipam.ipaddress ${n.address.cidr}`, fields: f });
        if (!dryRun) ipObj = (await must(api.PATCH("/api/ipam/ip-addresses/{id}/", { params: { path: { id: ipObj.id } }, body: Object.fromEntries(f.map((x) => [x.field, x.to])) as never }), `update IP ${ip}`)).data as unknown as Obj;
      }
    }
    const currentPrimary = (device?.["primary_ip4"] as { id?: number } | null | undefined)?.id ?? null;
    if (ipObj === undefined || currentPrimary !== ipObj.id) {
      changes.push({ kind: "update", object: `dcim.device ${name}`, fields: [{ field: "primary_ip4", from: currentPrimary, to: n.address.cidr }] });
      if (!dryRun && device && ipObj) {
        await must(api.PATCH("/api/dcim/devices/{id}/", { params: { path: { id: device.id } }, body: { primary_ip4: ipObj.id } as never }), `set primary IPv4 of ${name}`);
      }
    }

    // cable to the switch port
    const port = ports.get(`${n.switch.device}/${n.switch.port}`);
    await reconcileCable(nb, { node: name, iface, port, portLabel: `${n.switch.device}/${n.switch.port}`, ifaceLabel: `${name}/${n.interface}` }, dryRun, changes, conflicts);
  }

  // devices with a fleetd node role that the file does not list: reported, never deleted
  const nodeRoleSlugs = new Set([file.roles.worker.slug, file.roles["control-plane"].slug]);
  for (const d of siteDevices) {
    const roleSlug = (d["role"] as { slug?: string } | undefined)?.slug;
    if (roleSlug && nodeRoleSlugs.has(roleSlug) && d.name && !own(file.nodes, d.name)) {
      changes.push({ kind: "orphan", object: `dcim.device ${d.name}`, note: "not in the nodes file; left in NetBox (fleetd never deletes devices)" });
    }
  }
  return { changes, conflicts };
}

/**
 * What an existing IP address is assigned to, when that is not this node's device (`deviceId`, undefined for a
 * node not yet in NetBox): another device's interface, a VM interface, an FHRP group. Undefined when it is
 * unassigned or on one of this device's own interfaces (then fleetd moves it to the boot interface).
 */
function assignedElsewhere(ipObj: Obj, deviceId: number | undefined): string | undefined {
  if (ipObj["assigned_object_id"] == null) return undefined;
  const type = String(ipObj["assigned_object_type"] ?? "");
  const obj = ipObj["assigned_object"] as { display?: string; name?: string; device?: { id?: number; name?: string }; virtual_machine?: { name?: string } } | null | undefined;
  if (type === "dcim.interface" && deviceId !== undefined && obj?.device?.id === deviceId) return undefined;
  const owner = obj?.device?.name ?? obj?.virtual_machine?.name;
  const what = owner ? `${owner}/${obj?.name ?? obj?.display ?? "?"}` : obj?.display ?? obj?.name ?? `#${String(ipObj["assigned_object_id"])}`;
  return `${type || "an object"} "${safeLine(what, 200)}"`;
}

interface CableArgs {
  node: string;
  iface: Obj | undefined;
  port: Obj | undefined;
  portLabel: string;
  ifaceLabel: string;
}

async function reconcileCable(nb: NetBox, a: CableArgs, dryRun: boolean, changes: Change[], conflicts: string[]): Promise<void> {
  const { api } = nb;
  const ifaceCable = (a.iface?.["cable"] as { id: number } | null | undefined) ?? null;
  const peers = (a.iface?.["link_peers"] as { id?: number }[] | undefined) ?? [];
  if (ifaceCable && a.port && peers.some((p) => p.id === a.port?.id)) {
    changes.push({ kind: "unchanged", object: `dcim.cable ${a.ifaceLabel} <-> ${a.portLabel}` });
    return;
  }
  const portCable = (a.port?.["cable"] as { id: number } | null | undefined) ?? null;
  if (portCable) {
    conflicts.push(`${a.node}: switch port ${a.portLabel} is already cabled (cable #${portCable.id}) to something else; fix the cabling in NetBox or the file`);
    return;
  }
  if (ifaceCable) {
    changes.push({ kind: "update", object: `dcim.cable #${ifaceCable.id}`, note: `${a.ifaceLabel} is cabled elsewhere; replaced by a cable to ${a.portLabel}` });
    if (!dryRun) await must(api.DELETE("/api/dcim/cables/{id}/", { params: { path: { id: ifaceCable.id } } }), `delete cable #${ifaceCable.id}`);
  }
  changes.push({ kind: "create", object: `dcim.cable ${a.ifaceLabel} <-> ${a.portLabel}` });
  if (dryRun) return;
  if (!a.iface || !a.port) throw new NetBoxError("netbox-bad-response", `cable for ${a.node}`, undefined, "interface or switch port missing after creation");
  await must(
    api.POST("/api/dcim/cables/", {
      body: {
        a_terminations: [{ object_type: "dcim.interface", object_id: a.iface.id }],
        b_terminations: [{ object_type: "dcim.interface", object_id: a.port.id }],
        status: "connected",
        label: `fleetd ${a.node}`,
      } as never,
    }),
    `cable ${a.ifaceLabel} to ${a.portLabel}`,
  );
}
