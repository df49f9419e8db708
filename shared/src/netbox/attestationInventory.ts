/**
 * The attestation server's view of NetBox: nodes found by EK binding, a fresh read for the gates before
 * anything is signed (status, desired_action, EK set and who wrote it, the cable's switch port), what TPM
 * evidence proved written back (verdict, time, attested serial and port, proven MAC, LDevID serial/expiry), and
 * every decision as a journal entry naming the checks and the evidence.
 */
import { z } from "zod";
import type { AttestationFacts, Inventory, Journal, JournalEntry, NodeRecord } from "../protocol/server/deps.js";
import { BOOT_MAC_FIELD } from "./bootMac.js";
import { checkAttribution, checkEkAttribution } from "./changelog.js";
import { listAll, must, type NetBox } from "./client.js";
import { desiredActionOf, deviceIdByName, listDevices, patchDevice, type DeviceRecord } from "./device.js";
import { netboxJournal, writeJournal } from "./journal.js";

export interface NetBoxInventoryOptions {
  /** The inventory apply account: EK bindings count only when the change log shows it wrote them. */
  applyAccount: string;
  /** NetBox device-role slugs of the nodes file's roles. */
  roleSlugs: { worker: string; "control-plane": string };
}

interface EkEntry {
  alg?: unknown;
  sha256?: unknown;
  chain?: unknown;
}

interface InterfaceRow {
  id: number;
  name: string;
  mgmt_only?: boolean;
  link_peers?: { name?: string; device?: { name?: string | null } }[] | null;
  primary_mac_address?: { id: number; mac_address?: string } | null;
}

/** The device fields the attestation server reads (NetBox's full device serializer is slow). */
const DEVICE_FIELDS = "id,name,serial,status,site,role,device_type,primary_ip4,custom_fields,last_updated";

/**
 * The node's role. A control plane's Talos config carries the cluster's CA keys, so the control-plane role counts
 * only when the change log shows the apply account set the device's current role (as the nodes file says, like
 * the EK bindings): anyone who may edit devices could otherwise make an attested worker a control plane and have
 * it served the keys. Otherwise the node is a worker (whose config holds no key). Workers need no change-log walk.
 */
async function roleOf(nb: NetBox, d: DeviceRecord, o: NetBoxInventoryOptions): Promise<NodeRecord["role"]> {
  if (d.role.slug !== o.roleSlugs["control-plane"]) return "worker";
  const path = "role";
  const r = await checkAttribution(nb, d.id, [{ path, current: d.role.id, account: o.applyAccount, code: "role_unattributed", label: "device role" }]);
  return r.get(path)?.ok === true ? "control-plane" : "worker";
}

function bindingsOf(d: DeviceRecord): NodeRecord["ekBindings"] {
  const v = d.cf["ek_bindings"];
  if (!Array.isArray(v)) return [];
  return (v as EkEntry[])
    .filter((e) => typeof e.sha256 === "string" && /^[0-9a-f]{64}$/.test(e.sha256))
    .map((e) => ({ binding: e.sha256 as string, alg: e.alg === "ecc" ? ("ecc" as const) : ("rsa" as const), chain: e.chain !== false }));
}

const BmcField = z.object({ type: z.enum(["amt", "ipmi", "redfish"]), address: z.string().min(1), credentials: z.string().min(1) });

/** The `bmc` custom field (written by inventory apply); `none` or anything malformed gives no BMC. */
function bmcOf(d: DeviceRecord): Pick<NodeRecord, "bmc"> {
  const r = BmcField.safeParse(d.cf["bmc"]);
  return r.success ? { bmc: { type: r.data.type, address: r.data.address, credentials: r.data.credentials } } : {};
}

export class NetBoxInventory implements Inventory, Journal {
  private readonly ids = new Map<string, number>();
  private readonly journal: Journal;

  constructor(
    private readonly nb: NetBox,
    private readonly o: NetBoxInventoryOptions,
  ) {
    this.journal = netboxJournal(nb, (name) => this.idOf(name));
  }

  async findByEkBinding(binding: string): Promise<NodeRecord | undefined> {
    const devices = await listDevices(this.nb, { fields: DEVICE_FIELDS });
    const matches = devices.filter((d) => bindingsOf(d).some((b) => b.binding === binding));
    if (matches.length !== 1) return undefined; // none, or (bindings must be unique) ambiguous: refuse either way
    return this.toRecord(matches[0] as DeviceRecord);
  }

  async reread(name: string): Promise<NodeRecord | undefined> {
    const [d] = await listDevices(this.nb, { name, fields: DEVICE_FIELDS });
    return d ? this.toRecord(d) : undefined;
  }

  private async interfaces(deviceId: number): Promise<InterfaceRow[]> {
    // Only cabled interfaces, only the fields used: NetBox's full interface serializer is slow.
    const query = { device_id: [deviceId], cabled: true, limit: 100, fields: "id,name,mgmt_only,link_peers,primary_mac_address" };
    return (await listAll(this.nb.api.GET("/api/dcim/interfaces/", { params: { query: query as never } }), "list interfaces", this.nb)) as unknown as InterfaceRow[];
  }

  private async toRecord(d: DeviceRecord): Promise<NodeRecord> {
    if (d.name) this.ids.set(d.name, d.id);
    const cabled = (await this.interfaces(d.id)).find((i) => !i.mgmt_only && (i.link_peers?.length ?? 0) > 0);
    const peer = cabled?.link_peers?.[0];
    const attribution = await checkEkAttribution(this.nb, d.id, d.cf["ek_bindings"] ?? null, this.o.applyAccount);
    const tpm = d.cf["tpm_version"];
    const address = (d.primary_ip4 as { address?: string } | null | undefined)?.address;
    return {
      name: d.name ?? String(d.id),
      serial: d.serial,
      class: typeof d.cf["node_class"] === "string" ? (d.cf["node_class"] as string) : "",
      role: await roleOf(this.nb, d, this.o),
      tpm: tpm === "1.2" || tpm === "none" ? tpm : "2.0",
      ekBindings: bindingsOf(d),
      status: d.status,
      desiredAction: desiredActionOf(d),
      ...(peer?.device?.name && peer.name ? { switchPort: { device: peer.device.name, port: peer.name } } : {}),
      ekBindingsAttributed: attribution.ok,
      ...(address ? { address } : {}),
      ...(typeof d.cf["network_gateway"] === "string" ? { gateway: d.cf["network_gateway"] as string } : {}),
      ...(typeof d.cf["install_disk"] === "string" ? { installDisk: d.cf["install_disk"] as string } : {}),
      ...bmcOf(d),
    };
  }

  private async idOf(name: string): Promise<number | undefined> {
    const known = this.ids.get(name);
    if (known !== undefined) return known;
    const id = await deviceIdByName(this.nb, name);
    if (id !== undefined) this.ids.set(name, id);
    return id;
  }

  async recordAttestation(name: string, f: AttestationFacts): Promise<void> {
    const id = await this.idOf(name);
    if (id === undefined) return;
    const cf: Record<string, unknown> = { attestation_verdict: f.verdict, attested_at: f.at.toISOString() };
    if (f.serial) cf["attested_serial"] = f.serial;
    const bootMac = f.verdict === "pass" ? (f.bootMac ?? f.macs?.[0])?.toLowerCase() : undefined;
    if (bootMac) cf[BOOT_MAC_FIELD] = bootMac;
    if (f.ldevid) {
      cf["ldevid_serial"] = f.ldevid.serial;
      cf["ldevid_expiry"] = f.ldevid.notAfter.toISOString();
    }
    await patchDevice(this.nb, id, { custom_fields: cf }, null, `fleetd attestation ${f.verdict}`);
    if (bootMac) await this.recordMac(id, bootMac);
  }

  /** The MAC the TPM evidence vouched for, as the cabled interface's primary MAC address. */
  private async recordMac(deviceId: number, mac: string): Promise<void> {
    const iface = (await this.interfaces(deviceId)).find((i) => !i.mgmt_only && (i.link_peers?.length ?? 0) > 0);
    if (!iface) return;
    const current = iface.primary_mac_address?.mac_address?.toLowerCase();
    if (current === mac.toLowerCase()) return;
    const { data } = await must(
      this.nb.api.POST("/api/dcim/mac-addresses/", {
        body: { mac_address: mac, assigned_object_type: "dcim.interface", assigned_object_id: iface.id } as never,
      }),
      "record proven MAC",
    );
    const macId = (data as { id: number }).id;
    await must(this.nb.api.PATCH("/api/dcim/interfaces/{id}/", { params: { path: { id: iface.id } }, body: { primary_mac_address: macId } as never }), "set primary MAC");
  }

  async record(node: string | undefined, entry: JournalEntry): Promise<void> {
    await this.journal.record(node, entry);
  }

  /** After the complete one-time config response: the device is active. */
  async markActive(name: string): Promise<void> {
    const id = await this.idOf(name);
    if (id === undefined) return;
    await patchDevice(this.nb, id, { status: "active" }, null, "fleetd: Talos fetched its config");
    await writeJournal(this.nb, id, "success", "**fleetd** Talos fetched its one-time config (deleted after the complete response); device is active");
  }
}
