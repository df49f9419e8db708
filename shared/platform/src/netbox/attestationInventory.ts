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
import { attributionIn, checkAttribution, type AttributedField } from "./changelog.js";
import { readForGates, type GateRead, type InterfaceRow } from "./gateRead.js";
import { listAll, must, NetBoxError, type NetBox } from "./client.js";
import { desiredActionOf, deviceIdByName, listDevices, patchDevice, readDeviceIfExists, type DeviceRecord } from "./device.js";
import { netboxJournal } from "./journal.js";

export interface NetBoxInventoryOptions {
  /** The inventory apply account: identity fields (name, serial, EK bindings, …) count only as it wrote them. */
  applyAccount: string;
  /** The attestation server's own NetBox account: the recorded UUID and boot MAC count only as it wrote them. */
  attestationAccount: string;
  /**
   * A miss in the EK-binding index asks NetBox's change log for device changes at most this often (default 10 s):
   * a flood of random EKs costs one such request per interval. The first miss after a quiet interval asks at once.
   */
  indexRefreshMs?: number;
  /** NetBox device-role slugs of the nodes file's roles. */
  roleSlugs: { worker: string; "control-plane": string };
}

interface EkEntry {
  alg?: unknown;
  sha256?: unknown;
  chain?: unknown;
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

/** Device changes a catch-up applies by re-listing the changed devices; more, and the index is built again. */
const RELIST_AT_MOST = 100;
/**
 * Change-log IDs are taken from a sequence when a change is written and become visible when its transaction
 * commits, so one with a lower ID can appear after a higher one was seen: each catch-up looks this far below
 * its cursor again and skips the changes it already applied.
 */
const CURSOR_SLACK = 200;

/** A device as the EK-binding index holds it: its listed record, and the Node of its last fresh read if any. */
interface IndexEntry {
  record: DeviceRecord;
  /** From the last fresh read (the gates', or a challenge's): attribution and switch port included. */
  node?: Node;
}

/** The cabled, non-management interface with a peer: the boot interface whose switch port the gates check. */
const bootInterface = <T extends { mgmt_only: boolean; link_peers: unknown[]; cabled?: boolean }>(rows: readonly T[]): T | undefined =>
  rows.find((i) => i.cabled !== false && !i.mgmt_only && i.link_peers.length > 0);

export class NetBoxInventory implements Inventory, Journal {
  private readonly ids = new Map<string, number>();
  private readonly journal: Journal;
  /**
   * The EK-binding index: every device with its custom fields, kept current by NetBox's change log (device
   * changes after `cursor`), and each device's Node as its last fresh read found it. A challenge decides on it
   * without a NetBox request; the gates read the device again before anything is signed or released.
   */
  private entries: Map<number, IndexEntry> | undefined;
  private bindings = new Map<string, number[]>();
  /** The newest device change (change-log ID) the index has applied, and those applied within CURSOR_SLACK below it. */
  private cursor = 0;
  private applied = new Set<number>();
  /** When a miss last asked the change log (the flood bound: once per indexRefreshMs). */
  private askedAt = Number.NEGATIVE_INFINITY;
  private catchingUp: Promise<void> | undefined;

  constructor(
    private readonly nb: NetBox,
    private readonly o: NetBoxInventoryOptions,
  ) {
    this.journal = netboxJournal(nb, (name) => this.idOf(name));
  }

  /**
   * The node approving this binding, from the index. A device the index holds a fresh read of costs no request
   * (its Node as that read found it; the gates read again before anything is released); one known only from a
   * listing is read now. `fresh`: always read it now (a step about to refuse on what the index held).
   * A miss asks the change log what changed since the index was current, so a binding added a moment ago is
   * found; at most once per indexRefreshMs (misses meanwhile share the one in flight), so a flood of unknown EKs
   * costs one such request per interval — a binding added during a flood waits for the next. The index is
   * built at the first lookup. Two devices approving one binding: none.
   */
  async findByEkBinding(binding: string, o: { fresh?: boolean } = {}): Promise<Node | undefined> {
    let ids = this.bindings.get(binding);
    if (ids === undefined && (this.entries === undefined || this.catchingUp !== undefined || Date.now() - this.askedAt >= (this.o.indexRefreshMs ?? 10_000))) {
      await this.catchUp();
      ids = this.bindings.get(binding);
    }
    if (ids === undefined || ids.length !== 1) return undefined;
    const id = ids[0] as number;
    const known = this.entries?.get(id)?.node;
    const node = !o.fresh && known ? known : await this.reread(id);
    return node?.ekBindings.some((b) => b.binding === binding) ? node : undefined;
  }

  /** Single flight: the index built (first use, or many changes) or brought up to date from the change log. */
  private catchUp(): Promise<void> {
    this.catchingUp ??= (async () => {
      try {
        if (this.entries === undefined) return await this.build();
        this.askedAt = Date.now();
        if (!(await this.applyChanges())) await this.build();
      } finally {
        this.catchingUp = undefined;
      }
    })();
    return this.catchingUp;
  }

  private static readonly LISTED = "id,name,serial,status,site,role,device_type,primary_ip4,custom_fields";

  /** Every device listed (the cursor read first: a change made during the listing is applied again, harmlessly). */
  private async build(): Promise<void> {
    const { data } = await must(
      this.nb.api.GET("/api/core/object-changes/", { params: { query: { changed_object_type: "dcim.device", ordering: "-id", limit: 1, fields: "id" } as never } }),
      "the device change log's newest entry",
    );
    const newest = (data.results as { id?: unknown }[])[0]?.id;
    const devices = await listDevices(this.nb, { fields: NetBoxInventory.LISTED });
    this.entries = new Map(devices.map((d) => [d.id, { record: d }]));
    this.cursor = typeof newest === "number" ? newest : 0;
    this.applied = new Set();
    this.reindex();
  }

  /**
   * The device changes after the cursor, applied: changed devices listed again (their fresh-read Nodes dropped),
   * deleted ones removed. false when there are too many to list (the caller builds the index again).
   */
  private async applyChanges(): Promise<boolean> {
    const entries = this.entries;
    if (entries === undefined) return false;
    const { data } = await must(
      this.nb.api.GET("/api/core/object-changes/", {
        params: { query: { changed_object_type: "dcim.device", id__gt: Math.max(0, this.cursor - CURSOR_SLACK), ordering: "id", limit: 1000, fields: "id,changed_object_id,action" } as never },
      }),
      "device changes since the EK-binding index was current",
    );
    if (data.next) return false;
    const fresh = (data.results as { id?: unknown; changed_object_id?: unknown }[]).filter(
      (c): c is { id: number; changed_object_id: number } => typeof c.id === "number" && typeof c.changed_object_id === "number" && !this.applied.has(c.id),
    );
    if (fresh.length === 0) return true;
    const changed = [...new Set(fresh.map((c) => c.changed_object_id))];
    if (changed.length > RELIST_AT_MOST) return false;
    const listed = await listDevices(this.nb, { id: changed, fields: NetBoxInventory.LISTED });
    for (const id of changed) entries.delete(id);
    for (const d of listed) entries.set(d.id, { record: d });
    for (const c of fresh) {
      this.applied.add(c.id);
      this.cursor = Math.max(this.cursor, c.id);
    }
    for (const id of this.applied) if (id <= this.cursor - CURSOR_SLACK) this.applied.delete(id);
    this.reindex();
    return true;
  }

  /** EK binding → device IDs approving it, from the entries. */
  private reindex(): void {
    const next = new Map<string, number[]>();
    for (const [id, e] of this.entries ?? []) for (const b of bindingsOf(e.record)) next.set(b.binding, [...(next.get(b.binding) ?? []), id]);
    this.bindings = next;
  }

  /** The device read now — one GraphQL request (gateRead.ts) — as a Node; the index keeps what it found. */
  async reread(deviceId: number): Promise<Node | undefined> {
    const r = await readForGates(this.nb, deviceId);
    const node = r ? this.toNode(r) : undefined;
    if (this.entries !== undefined) {
      if (r && node) this.entries.set(deviceId, { record: r.device, node });
      else this.entries.delete(deviceId);
      this.reindex();
    }
    return node;
  }

  /**
   * This server changed the device (`record`: NetBox's answer to the PATCH): the index keeps the record and
   * drops the Node, so the next challenge reads the device again rather than decide on a
   * Node from before the change (a UUID just recorded must be required at once).
   */
  private patched(record: DeviceRecord): void {
    const e = this.entries?.get(record.id);
    if (!e) return;
    this.entries?.set(record.id, { record });
    this.reindex();
  }

  private async interfaces(deviceId: number): Promise<Pick<InterfaceRow, "id" | "mgmt_only" | "link_peers" | "primary_mac_address">[]> {
    // Only cabled interfaces, only the fields used: NetBox's full interface serializer is slow.
    const query = { device_id: [deviceId], cabled: true, limit: 100, fields: "id,name,mgmt_only,link_peers,primary_mac_address" };
    const rows = (await listAll(this.nb.api.GET("/api/dcim/interfaces/", { params: { query: query as never } }), "list interfaces", this.nb)) as unknown as {
      id: number;
      mgmt_only?: boolean;
      link_peers?: InterfaceRow["link_peers"] | null;
      primary_mac_address?: InterfaceRow["primary_mac_address"];
    }[];
    return rows.map((i) => ({ id: i.id, mgmt_only: i.mgmt_only === true, link_peers: i.link_peers ?? [], primary_mac_address: i.primary_mac_address ?? null }));
  }

  /**
   * The device as a Node: the cabled interface's peer and the change log's attribution from the one read, the
   * rest in nodeFromDevice. A device whose change log NetBox shows empty (the account cannot view
   * core.objectchange, or retention expired) has nothing attributed: every field is refused, even an empty one.
   */
  private toNode(r: GateRead): Node {
    const d = r.device;
    if (d.name) this.ids.set(d.name, d.id);
    const cabled = bootInterface(r.interfaces);
    const peer = cabled?.link_peers[0];
    const fields = attributedFields(d, this.o);
    const recorded = recordedFields(d, this.o);
    const attribution = attributionIn(r.changes, [...fields, ...recorded]);
    const attributed = new Set(recorded.filter((f) => attribution.get(f.path)?.ok).map((f) => f.path.slice("custom_fields.".length)));
    const unattributed: Unattributed[] = [];
    for (const f of fields) {
      const a = attribution.get(f.path);
      if (a?.ok) continue;
      if (r.changes.length === 0) {
        unattributed.push({ field: f.path, code: f.code, reason: `NetBox shows no change log for the device (the attestation account needs view on core.objectchange; or retention expired): the ${f.label} cannot be attributed` });
        continue;
      }
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
    this.patched(await patchDevice(this.nb, id, { custom_fields: cf }, null, `fleetd attestation ${f.verdict}`));
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
    this.patched(await patchDevice(this.nb, node.deviceId, { custom_fields: cf }, null, f.verdict ? `fleetd runtime attestation ${f.verdict.verdict}` : "fleetd LDevID renewed"));
  }

  /**
   * The MAC the TPM evidence vouched for, as the cabled interface's primary MAC address. `known`: the cabled
   * interface and its MAC as the step's fresh read found them (null: none cabled) — nothing is read again, and
   * nothing is written when the MAC is already that one; absent (an item queued before it was carried): listed.
   */
  private async recordMac(deviceId: number, mac: string, known?: { id: number; mac: string | null } | null): Promise<void> {
    const listed = known === undefined ? bootInterface(await this.interfaces(deviceId)) : undefined;
    const iface = listed ? { id: listed.id, mac: listed.primary_mac_address?.mac_address?.toLowerCase() ?? null } : known;
    if (!iface) return;
    if (iface.mac === mac.toLowerCase()) return;
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
      this.patched(await patchDevice(this.nb, node.deviceId, { status: "failed" }, r.etag, `fleetd: ${why}`.slice(0, 200)));
    } catch (e) {
      if (!(e instanceof NetBoxError && e.code === "netbox-conflict")) throw e; // changed meanwhile: leave it to its editor
    }
  }

  async markStaged(node: NodeRef): Promise<void> {
    this.patched(await patchDevice(this.nb, node.deviceId, { status: "staged" }, null, "fleetd: provision confirmed, install code released"));
  }

  /** After the complete one-time config response: the device is active (its journal entry is the outbox's). */
  async markActive(node: NodeRef): Promise<void> {
    this.patched(await patchDevice(this.nb, node.deviceId, { status: "active" }, null, "fleetd: Talos fetched its config"));
  }
}
