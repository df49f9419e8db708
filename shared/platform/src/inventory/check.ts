/**
 * `fleetd inventory check`: compares three sources — the nodes file, NetBox, and what machines reported with
 * TPM evidence (attested serial, switch port seen via LLDP, proven MAC) — and lists every disagreement.
 */
import { listAll, type NetBox } from "../netbox/client.js";
import { checkEkAttribution } from "../netbox/changelog.js";
import { listDevices, type DeviceRecord } from "../netbox/device.js";
import { planInventory } from "./apply.js";
import type { NodesFile } from "../fleet/nodesFile.js";

export interface CheckRow {
  node: string;
  check: string;
  file: string;
  netbox: string;
  reported: string;
  ok: boolean;
}

export async function inventoryCheck(nb: NetBox, file: NodesFile, applyAccount: string): Promise<CheckRow[]> {
  const rows: CheckRow[] = [];
  const plan = await planInventory(nb, file);
  for (const c of plan.changes) {
    if (c.kind === "unchanged") continue;
    const node = /^dcim\.device (\S+)/.exec(c.object)?.[1] ?? c.object.split(" ")[1]?.split("/")[0] ?? "-";
    if (c.kind === "orphan") {
      rows.push({ node, check: "in nodes file", file: "absent", netbox: "present", reported: "", ok: false });
      continue;
    }
    if (c.fields && c.fields.length > 0) {
      for (const f of c.fields) rows.push({ node, check: `${c.object.split(" ")[0]} ${f.field}`, file: show(f.to), netbox: show(f.from), reported: "", ok: false });
    } else {
      rows.push({ node, check: c.object, file: "present", netbox: c.kind === "create" ? "missing" : "differs", reported: "", ok: false });
    }
  }
  for (const conflict of plan.conflicts) rows.push({ node: conflict.split(":")[0] ?? "-", check: "conflict", file: "", netbox: conflict, reported: "", ok: false });

  const devices = await listDevices(nb, { site: [file.site.slug] }).catch(() => [] as DeviceRecord[]);
  const byName = new Map(devices.map((d) => [d.name ?? "", d]));
  const macOwners = new Map<string, string>();
  for (const [name, n] of Object.entries(file.nodes)) {
    const d = byName.get(name);
    if (!d) continue;
    // EK bindings (where there are any) must be attributed to the apply account
    const inNetBox = d.cf["ek_bindings"] ?? null;
    if ((n.ek?.length ?? 0) > 0 || inNetBox !== null) {
      const att = await checkEkAttribution(nb, d.id, inNetBox, applyAccount);
      rows.push({ node: name, check: "EK bindings written by apply account", file: applyAccount, netbox: att.ok ? att.by : att.reason, reported: "", ok: att.ok });
    }
    // what the machine reported
    const attSerial = d.cf["attested_serial"];
    if (typeof attSerial === "string" && attSerial.length > 0) {
      rows.push({ node: name, check: "attested serial", file: n.serial, netbox: d.serial, reported: attSerial, ok: attSerial === n.serial && d.serial === n.serial });
    }
    const attPort = d.cf["attested_port"];
    if (typeof attPort === "string" && attPort.length > 0) {
      const want = `${n.switch.device}/${n.switch.port}`;
      rows.push({ node: name, check: "attested switch port", file: want, netbox: want, reported: attPort, ok: attPort === want });
    }
    const ifaces = (await listAll(nb.api.GET("/api/dcim/interfaces/", { params: { query: { device_id: [d.id], limit: 1000 } } }), "list interfaces", nb)) as unknown as { name: string; mac_address?: string | null }[];
    const boot = ifaces.find((i) => i.name === n.interface);
    const mac = boot?.mac_address ?? null;
    if (mac) {
      const prev = macOwners.get(mac.toLowerCase());
      rows.push({ node: name, check: "proven MAC unique", file: "", netbox: mac, reported: mac, ok: prev === undefined });
      macOwners.set(mac.toLowerCase(), name);
    }
  }
  return rows;
}

function show(v: unknown): string {
  if (v === null || v === undefined) return "-";
  if (typeof v === "string") return v;
  const s = JSON.stringify(v);
  return s.length > 60 ? s.slice(0, 57) + "..." : s;
}

export function renderTable(rows: CheckRow[]): string {
  const head = ["NODE", "CHECK", "FILE", "NETBOX", "REPORTED", ""];
  const data = rows.map((r) => [r.node, r.check, r.file, r.netbox, r.reported, r.ok ? "ok" : "DRIFT"]);
  const widths = head.map((h, i) => Math.min(70, Math.max(h.length, ...data.map((d) => (d[i] ?? "").length))));
  const fmt = (cells: string[]): string => cells.map((c, i) => c.slice(0, widths[i]).padEnd(widths[i] ?? 0)).join("  ").trimEnd();
  return [fmt(head), ...data.map(fmt)].join("\n");
}
