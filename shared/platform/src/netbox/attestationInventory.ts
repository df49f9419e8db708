/**
 * The attestation server's view of NetBox: nodes found by EK binding, a fresh read for the gates before
 * anything is signed (status, desired_action, EK set and who wrote it, the cable's switch port), what TPM
 * evidence proved written back (verdict, time, attested serial and port, proven MAC, LDevID serial/expiry), and
 * every decision as a journal entry naming the checks and the evidence. A device becomes a `Node` in one place,
 * `nodeFromDevice`, after zod (`DeviceRecord`) judged NetBox's answer.
 */
import { z } from "zod";
import { BMC_TYPES, type BmcInfo, type Node, type NodeRef, type Unattributed } from "../fleet/node.js";
import type { AttestationFacts, Inventory, Journal, JournalEntry, RuntimeFacts } from "../fleet/ports.js";
import { BOOT_MAC_FIELD } from "./bootMac.js";
import { checkAttribution, type AttributedField } from "./changelog.js";
import { listAll, must, NetBoxError, type NetBox } from "./client.js";
import { desiredActionOf, deviceIdByName, listDevices, patchDevice, readDeviceIfExists, type DeviceRecord } from "./device.js";
import { netboxJournal, writeJournal } from "./journal.js";

export interface NetBoxInventoryOptions {
  /** The inventory apply account: identity fields (name, serial, EK bindings, …) count only as it wrote them. */
  applyAccount: string;
  /** The attestation server's own NetBox account: the recorded UUID and boot MAC count only as it wrote them. */
  attestationAccount: string;
  /** A miss in the EK-binding index re-reads NetBox at most this often (default 10 s): random EKs cost nothing. */
  indexRefreshMs?: number;
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

const roleName = (d: DeviceRecord, roleSlugs: NetBoxInventoryOptions["roleSlugs"]): Node["role"] =>
  d.role.slug === roleSlugs["control-plane"] ? "control-plane" : "worker";

function bindingsOf(d: DeviceRecord): Node["ekBindings"] {
  const v = d.cf["ek_bindings"];
  if (!Array.isArray(v)) return [];
  return (v as EkEntry[])
    .filter((e) => typeof e.sha256 === "string" && /^[0-9a-f]{64}$/.test(e.sha256))
    .map((e) => ({ binding: e.sha256 as string, alg: e.alg === "ecc" ? ("ecc" as const) : ("rsa" as const), chain: e.chain !== false }));
}

const BmcField = z.object({ type: z.enum(BMC_TYPES), address: z.string().min(1), credentials: z.string().min(1) });

/** The `bmc` custom field (written by inventory apply) as fleetd's `BmcInfo`; `none` or anything malformed gives no BMC. */
function bmcOf(d: DeviceRecord): Pick<Node, "bmc"> {
  const r = BmcField.safeParse(d.cf["bmc"]);
  if (!r.success) return {};
  const bmc: BmcInfo = { type: r.data.type, address: r.data.address, credentials: r.data.credentials };
  return { bmc };
}

/** The recorded SMBIOS UUID (custom field), written by the attestation account at the first pass. */
export const UUID_FIELD = "attested_uuid";

/**
 * The device fields a node's identity and admission rest on, each with the only account whose write counts:
 * the apply account for what the nodes file says, the attestation account for what TPM evidence recorded.
 * Change-log paths hold what NetBox's change log stores (related objects as IDs). A field that is empty and was
 * never written is not a finding; emptied by someone else, it is.
 */
/** The refusal code of a field someone other than its owning account wrote: `primary_ip4` → `primary-ip4-unattributed`. */
export const unattributedCode = (field: string): `${string}-unattributed` => `${field.replaceAll("_", "-")}-unattributed`;

function attributedFields(d: DeviceRecord, o: NetBoxInventoryOptions): AttributedField[] {
  const apply = (path: string, current: unknown, label: string, plural = false): AttributedField => ({ path, current, account: o.applyAccount, code: unattributedCode(path.replace(/^custom_fields\./, "")), label, plural });
  const cf = (name: string, label: string, plural = false) => apply(`custom_fields.${name}`, d.cf[name] ?? null, label, plural);
  const recorded = (name: string, label: string): AttributedField => ({ path: `custom_fields.${name}`, current: d.cf[name] ?? null, account: o.attestationAccount, code: unattributedCode(name), label });
  return [
    apply("name", d.name, "device name"),
    apply("serial", d.serial === "" ? "" : d.serial, "serial number"),
    apply("role", d.role.id, "device role"),
    apply("primary_ip4", d.primary_ip4?.id ?? null, "primary IPv4 address"),
    cf("node_class", "node class"),
    cf("tpm_version", "TPM family"),
    cf("ek_bindings", "EK bindings", true),
    cf("install_disk", "install disk"),
    cf("network_gateway", "gateway"),
    cf("bmc", "BMC"),
    cf("switch_port_check", "switch-port check"),
    recorded(UUID_FIELD, "recorded UUID"),
    recorded(BOOT_MAC_FIELD, "recorded boot MAC"),
  ];
}

/**
 * The fields the attestation account records about the current LDevID and the runtime verdict. Read into a Node
 * only when the change log attributes each to that account (`recordedFields`); one that is not attributed (a
 * user's edit) is left out — it is not a refusal of the node's own attestation, but nobody may rely on it.
 */
export const LDEVID_FIELDS = ["ldevid_serial", "ldevid_cn", "ldevid_expiry"] as const;
export const RUNTIME_FIELDS = ["runtime_verdict", "runtime_attested_at", "runtime_passed_at"] as const;
const DATETIME_FIELDS: ReadonlySet<string> = new Set(["ldevid_expiry", "runtime_attested_at", "runtime_passed_at"]);

function recordedFields(d: DeviceRecord, o: NetBoxInventoryOptions): AttributedField[] {
  return [...LDEVID_FIELDS, ...RUNTIME_FIELDS].map((name) => ({
    path: `custom_fields.${name}`,
    current: d.cf[name] ?? null,
    account: o.attestationAccount,
    code: unattributedCode(name),
    label: name.replaceAll("_", " "),
    datetime: DATETIME_FIELDS.has(name),
  }));
}

const textOf = (v: unknown): string | undefined => (typeof v === "string" && v !== "" ? v : undefined);
const dateOf = (v: unknown): Date | undefined => {
  const s = textOf(v);
  if (s === undefined) return undefined;
  const t = new Date(s);
  return Number.isNaN(t.getTime()) ? undefined : t;
};

/** `Node.ldevid` and `Node.runtime` from the fields the attestation account wrote (`attributed`: custom field names). */
function recordedOf(d: DeviceRecord, attributed: ReadonlySet<string>): Pick<Node, "ldevid" | "runtime"> {
  const trusted = (name: string) => (attributed.has(name) ? d.cf[name] : undefined);
  const out: Pick<Node, "ldevid" | "runtime"> = {};
  const serial = textOf(trusted("ldevid_serial"));
  const cn = textOf(trusted("ldevid_cn"));
  const notAfter = dateOf(trusted("ldevid_expiry"));
  if (serial !== undefined && cn !== undefined && notAfter !== undefined) out.ldevid = { serial, cn, notAfter };
  const verdict = trusted("runtime_verdict");
  const at = dateOf(trusted("runtime_attested_at"));
  const lastPassAt = dateOf(trusted("runtime_passed_at"));
  if ((verdict === "pass" || verdict === "fail") && at !== undefined) out.runtime = { verdict, at, ...(lastPassAt ? { lastPassAt } : {}) };
  return out;
}

/**
 * The one conversion of a NetBox device into a `Node` (the device was judged by zod `DeviceRecord` when read).
 * `facts` are what other NetBox objects say: the cabled interface's switch port and the change log's attribution.
 * Lenient where NetBox is: a missing class is "", an unknown TPM family 2.0, malformed EK entries and BMC are dropped
 * (the gates refuse what they need and do not find).
 */
export function nodeFromDevice(
  d: DeviceRecord,
  facts: {
    switchPort?: { device: string; port: string };
    unattributed: Unattributed[];
    /** Custom fields of LDEVID_FIELDS and RUNTIME_FIELDS the change log attributes to the attestation account (default: none). */
    attributed?: ReadonlySet<string>;
  },
  roleSlugs: NetBoxInventoryOptions["roleSlugs"],
): Node {
  const tpm = d.cf["tpm_version"];
  const address = (d.primary_ip4 as { address?: string } | null | undefined)?.address;
  const uuid = d.cf[UUID_FIELD];
  const bootMac = d.cf[BOOT_MAC_FIELD];
  return {
    deviceId: d.id,
    name: d.name ?? `#${d.id}`,
    serial: d.serial,
    class: typeof d.cf["node_class"] === "string" ? (d.cf["node_class"] as string) : "",
    role: roleName(d, roleSlugs),
    tpm: tpm === "1.2" || tpm === "none" ? tpm : "2.0",
    ekBindings: bindingsOf(d),
    status: d.status,
    desiredAction: desiredActionOf(d),
    macs: typeof bootMac === "string" && bootMac !== "" ? [bootMac] : [],
    ...(facts.switchPort ? { switchPort: facts.switchPort } : {}),
    unattributed: facts.unattributed,
    switchPortWaived: d.cf["switch_port_check"] === "waived",
    ...(typeof uuid === "string" && uuid !== "" ? { uuid } : {}),
    ...(address ? { address } : {}),
    ...(typeof d.cf["network_gateway"] === "string" ? { gateway: d.cf["network_gateway"] as string } : {}),
    ...(typeof d.cf["install_disk"] === "string" ? { installDisk: d.cf["install_disk"] as string } : {}),
    ...bmcOf(d),
    ...recordedOf(d, facts.attributed ?? new Set()),
  };
}

/**
 * A device as a `Node` for SPIRE's node list (spire/publish.ts): the name's attribution to the apply account and
 * the recorded LDevID / runtime fields' attribution to the attestation account, from one walk of its change log.
 * The other identity fields and the switch port are not read (the list needs none of them).
 */
export async function recordedNode(nb: NetBox, d: DeviceRecord, o: NetBoxInventoryOptions): Promise<Node> {
  const name: AttributedField = { path: "name", current: d.name, account: o.applyAccount, code: unattributedCode("name"), label: "device name" };
  const recorded = recordedFields(d, o);
  const attribution = await checkAttribution(nb, d.id, [name, ...recorded]);
  const attributed = new Set(recorded.filter((f) => attribution.get(f.path)?.ok).map((f) => f.path.slice("custom_fields.".length)));
  const a = attribution.get("name");
  const unattributed: Unattributed[] = a?.ok ? [] : [{ field: "name", code: name.code, reason: a ? a.reason : "device name not checked" }];
  return nodeFromDevice(d, { unattributed, attributed }, o.roleSlugs);
}

const isEmpty = (v: unknown) => v === null || v === undefined || v === "";

export class NetBoxInventory implements Inventory, Journal {
  private readonly ids = new Map<string, number>();
  private readonly journal: Journal;
  /** EK binding → device IDs approving it, from one listing; rebuilt on a miss at most every indexRefreshMs. */
  private index = new Map<string, number[]>();
  private indexedAt = Number.NEGATIVE_INFINITY;
  private indexing: Promise<void> | undefined;

  constructor(
    private readonly nb: NetBox,
    private readonly o: NetBoxInventoryOptions,
  ) {
    this.journal = netboxJournal(nb, (name) => this.idOf(name));
  }

  /**
   * The node approving this binding: looked up in the index, then confirmed on a fresh read of that device. A
   * miss rebuilds the index only when the last build is older than indexRefreshMs, so a flood of unknown EKs
   * costs one device listing per interval. Two devices approving one binding: none (bindings must be unique).
   */
  async findByEkBinding(binding: string): Promise<Node | undefined> {
    let ids = this.index.get(binding);
    if (ids === undefined && Date.now() - this.indexedAt >= (this.o.indexRefreshMs ?? 10_000)) {
      await this.rebuildIndex();
      ids = this.index.get(binding);
    }
    if (ids === undefined || ids.length !== 1) return undefined;
    const node = await this.reread(ids[0] as number);
    if (!node || !node.ekBindings.some((b) => b.binding === binding)) {
      this.indexedAt = Number.NEGATIVE_INFINITY; // stale: the next lookup rebuilds
      return undefined;
    }
    return node;
  }

  private rebuildIndex(): Promise<void> {
    this.indexing ??= (async () => {
      try {
        const devices = await listDevices(this.nb, { fields: "id,name,serial,status,site,role,device_type,custom_fields" });
        const next = new Map<string, number[]>();
        for (const d of devices) for (const b of bindingsOf(d)) next.set(b.binding, [...(next.get(b.binding) ?? []), d.id]);
        this.index = next;
        this.indexedAt = Date.now();
      } finally {
        this.indexing = undefined;
      }
    })();
    return this.indexing;
  }

  async reread(deviceId: number): Promise<Node | undefined> {
    const r = await readDeviceIfExists(this.nb, deviceId);
    return r ? this.toNode(r.device) : undefined;
  }

  private async interfaces(deviceId: number): Promise<InterfaceRow[]> {
    // Only cabled interfaces, only the fields used: NetBox's full interface serializer is slow.
    const query = { device_id: [deviceId], cabled: true, limit: 100, fields: "id,name,mgmt_only,link_peers,primary_mac_address" };
    return (await listAll(this.nb.api.GET("/api/dcim/interfaces/", { params: { query: query as never } }), "list interfaces", this.nb)) as unknown as InterfaceRow[];
  }

  /** The device as a Node: the cabled interface's peer and the change log's attribution read here, the rest in nodeFromDevice. */
  private async toNode(d: DeviceRecord): Promise<Node> {
    if (d.name) this.ids.set(d.name, d.id);
    const cabled = (await this.interfaces(d.id)).find((i) => !i.mgmt_only && (i.link_peers?.length ?? 0) > 0);
    const peer = cabled?.link_peers?.[0];
    const fields = attributedFields(d, this.o);
    const recorded = recordedFields(d, this.o);
    const attribution = await checkAttribution(this.nb, d.id, [...fields, ...recorded]);
    const attributed = new Set(recorded.filter((f) => attribution.get(f.path)?.ok).map((f) => f.path.slice("custom_fields.".length)));
    const unattributed: Unattributed[] = [];
    for (const f of fields) {
      const a = attribution.get(f.path);
      if (a?.ok) continue;
      const neverWritten = isEmpty(f.current) && a?.reason.startsWith("no change-log record");
      if (!neverWritten) unattributed.push({ field: f.path, code: f.code, reason: a ? a.reason : `${f.label} not checked` });
    }
    const switchPort = peer?.device?.name && peer.name ? { device: peer.device.name, port: peer.name } : undefined;
    const node = nodeFromDevice(d, { unattributed, attributed, ...(switchPort ? { switchPort } : {}) }, this.o.roleSlugs);
    // what a pass's write compares the proven MAC with (recordMac): no second listing of the interfaces
    return { ...node, bootInterface: cabled ? { id: cabled.id, mac: cabled.primary_mac_address?.mac_address?.toLowerCase() ?? null } : null };
  }

  private async idOf(name: string): Promise<number | undefined> {
    const known = this.ids.get(name);
    if (known !== undefined) return known;
    const id = await deviceIdByName(this.nb, name);
    if (id !== undefined) this.ids.set(name, id);
    return id;
  }

  async recordAttestation(node: NodeRef, f: AttestationFacts): Promise<void> {
    const id = node.deviceId;
    const cf: Record<string, unknown> = { attestation_verdict: f.verdict, attested_at: f.at.toISOString() };
    if (f.verdict === "pass" && f.recordUuid) cf[UUID_FIELD] = f.recordUuid.toLowerCase();
    if (f.serial) cf["attested_serial"] = f.serial;
    const bootMac = f.verdict === "pass" ? (f.bootMac ?? f.macs?.[0])?.toLowerCase() : undefined;
    if (bootMac) cf[BOOT_MAC_FIELD] = bootMac;
    if (f.ldevid) {
      cf["ldevid_serial"] = f.ldevid.serial;
      if (f.ldevid.cn !== "") cf["ldevid_cn"] = f.ldevid.cn;
      cf["ldevid_expiry"] = f.ldevid.notAfter.toISOString();
    }
    await patchDevice(this.nb, id, { custom_fields: cf }, null, `fleetd attestation ${f.verdict}`);
    if (bootMac) await this.recordMac(id, bootMac, f.bootInterface);
  }

  /** A runtime attestation's verdict and/or a confirmed renewal's LDevID, as the attestation account. */
  async recordRuntime(node: NodeRef, f: RuntimeFacts): Promise<void> {
    const cf: Record<string, unknown> = {};
    if (f.verdict) {
      cf["runtime_verdict"] = f.verdict.verdict;
      cf["runtime_attested_at"] = f.verdict.at.toISOString();
      if (f.verdict.verdict === "pass") cf["runtime_passed_at"] = f.verdict.at.toISOString();
    }
    if (f.ldevid) {
      cf["ldevid_serial"] = f.ldevid.serial;
      cf["ldevid_cn"] = f.ldevid.cn;
      cf["ldevid_expiry"] = f.ldevid.notAfter.toISOString();
    }
    if (Object.keys(cf).length === 0) return;
    await patchDevice(this.nb, node.deviceId, { custom_fields: cf }, null, f.verdict ? `fleetd runtime attestation ${f.verdict.verdict}` : "fleetd LDevID renewed");
  }

  /**
   * The MAC the TPM evidence vouched for, as the cabled interface's primary MAC address. `known`: the cabled
   * interface and its MAC as the step's fresh read found them (null: none cabled) — nothing is read again, and
   * nothing is written when the MAC is already that one; absent (an item queued before it was carried): listed.
   */
  private async recordMac(deviceId: number, mac: string, known?: { id: number; mac: string | null } | null): Promise<void> {
    const iface =
      known !== undefined
        ? known && { id: known.id, current: known.mac }
        : ((i) => i && { id: i.id, current: i.primary_mac_address?.mac_address?.toLowerCase() ?? null })((await this.interfaces(deviceId)).find((i) => !i.mgmt_only && (i.link_peers?.length ?? 0) > 0));
    if (!iface) return;
    if (iface.current === mac.toLowerCase()) return;
    const { data } = await must(
      this.nb.api.POST("/api/dcim/mac-addresses/", {
        body: { mac_address: mac, assigned_object_type: "dcim.interface", assigned_object_id: iface.id } as never,
      }),
      "record proven MAC",
    );
    const macId = (data as { id: number }).id;
    await must(this.nb.api.PATCH("/api/dcim/interfaces/{id}/", { params: { path: { id: iface.id } }, body: { primary_mac_address: macId } as never }), "set primary MAC");
  }

  async record(node: NodeRef | string | undefined, entry: JournalEntry): Promise<void> {
    await this.journal.record(node, entry);
  }

  async markFailed(node: NodeRef, why: string): Promise<void> {
    const r = await readDeviceIfExists(this.nb, node.deviceId);
    if (!r || !["planned", "staged", "active"].includes(r.device.status)) return;
    try {
      await patchDevice(this.nb, node.deviceId, { status: "failed" }, r.etag, `fleetd: ${why}`.slice(0, 200));
    } catch (e) {
      if (!(e instanceof NetBoxError && e.code === "netbox-conflict")) throw e; // changed meanwhile: leave it to its editor
    }
  }

  async markStaged(node: NodeRef): Promise<void> {
    await patchDevice(this.nb, node.deviceId, { status: "staged" }, null, "fleetd: provision confirmed, install code released");
  }

  /** After the complete one-time config response: the device is active (its journal entry is the outbox's). */
  async markActive(node: NodeRef): Promise<void> {
    await patchDevice(this.nb, node.deviceId, { status: "active" }, null, "fleetd: Talos fetched its config");
  }
}
