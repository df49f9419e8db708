/**
 * `Node`: fleetd's one domain model of a node. Adapters convert at their edge, once, in one named function:
 *  - NetBox → Node: `nodeFromDevice` (netbox/attestationInventory.ts; the device is judged by zod `DeviceRecord`);
 *  - nodes file → NetBox: `deviceFieldsFromEntry` (inventory/netboxView.ts; the entry is judged by zod `NodeEntry`);
 *  - nodes file + proven boot MAC → the platform's part of a node: `platformNodeFromEntry` (this file);
 *  - Tinkerbell: `checkNode` (tinkerbell/node.ts) checks a `PlatformNode` once and returns a `CheckedNode`, the
 *    only node its builders (Hardware, Workflow, Machine, Job, names) take; they do not check it again.
 * Inside, functions take a `Node` (or a `Pick` of it) and trust it.
 */
import type { NodeEntry } from "./nodesFile.js";

/** The BMC kinds fleetd drives (through Rufio); the nodes file's `none` means no BMC, i.e. no `BmcInfo`. */
export const BMC_TYPES = ["amt", "ipmi", "redfish"] as const;
export type BmcType = (typeof BMC_TYPES)[number];

/**
 * A node's BMC as the nodes file declares it — fleetd's one BMC type: the nodes file's schema, the NetBox `bmc`
 * custom field's reader, `Node`, `PlatformFields` and Tinkerbell all use it.
 */
export interface BmcInfo {
  type: BmcType;
  /** IP address or host name. */
  address: string;
  /** The nodes file's reference: `env:NAME`, `file:/path`, `secret:ns/name`, `vault:…`. */
  credentials: string;
}

/**
 * A node as the state knows it: the NetBox device ID recorded when the apply account created it (the key of
 * everything per node here) and its name then (for people, certificates and the CSR check). A rename in NetBox
 * never moves state from one machine to another.
 */
export interface NodeRef {
  deviceId: number;
  name: string;
}

export interface EkApproval {
  /** Canonical SPKI SHA-256, lowercase hex. */
  binding: string;
  alg: "rsa" | "ecc";
  /** false for a TPM without an EK certificate (an fTPM whose certificate is not in NV). */
  chain: boolean;
}

/** A device field whose value did not come from the account that may write it (refused wherever it matters). */
export interface Unattributed {
  /** Change-log path, e.g. "name", "custom_fields.ek_bindings". */
  field: string;
  code: string;
  reason: string;
}

/**
 * A node. `deviceId` is its identity (state is keyed by it); `name` is the name the inventory apply account
 * wrote (a rename by anyone else shows up in `unattributed`, and every step refuses).
 */
export interface Node extends NodeRef {
  serial: string;
  /** The SMBIOS UUID the first passing intake recorded (attributed to the attestation account); required afterwards. */
  uuid?: string;
  /** Policy profile of the installed OS (talos, ubuntu…). */
  class: string;
  role: "worker" | "control-plane";
  tpm: "2.0" | "1.2" | "none";
  ekBindings: EkApproval[];
  /** NetBox device status (planned, staged, active, failed, decommissioning, offline…). */
  status: string;
  desiredAction: "provision" | "attest" | "wipe" | null;
  /**
   * The MACs of the node's interfaces, the boot interface's first (Tinkerbell's agent ID, Workflow `device_1`);
   * empty while none is known. From NetBox: the boot MAC the attestation account recorded (TPM evidence vouched
   * for it); for Tinkerbell: the proven MACs.
   */
  macs: string[];
  /** The switch port the cable in NetBox connects to. */
  switchPort?: { device: string; port: string };
  /**
   * The cabled boot interface (NetBox ID) and its primary MAC address (lower case; null: none), as read with the
   * node; null: no interface is cabled; absent: not read. Lets the pass's write skip a MAC that is already right.
   */
  bootInterface?: { id: number; mac: string | null } | null;
  /**
   * Identity and admission fields whose current value the change log does not attribute to their account (the
   * apply account for name, serial, role, class, TPM, EK bindings, disk, gateway, BMC, address, cable waiver; the
   * attestation account for the recorded UUID and boot MAC). Empty when every field holds what its account wrote.
   */
  unattributed: Unattributed[];
  /** The nodes file waives the cable (switch-port) gate for this node (attributed like the EK bindings). */
  switchPortWaived: boolean;
  /** Static address (IPv4 CIDR, e.g. 10.0.10.11/24) and gateway, for the Talos config and Tinkerbell's Hardware. */
  address?: string;
  gateway?: string;
  /** The install disk (a /dev path). */
  installDisk?: string;
  /** The BMC from the nodes file (NetBox custom field `bmc`), for Tinkerbell's Hardware bmcRef and Rufio. */
  bmc?: BmcInfo;
  /**
   * The current LDevID certificate as the attestation account recorded it (`ldevid_serial`, `ldevid_cn`,
   * `ldevid_expiry`); absent when none is recorded or the change log does not attribute it to that account.
   */
  ldevid?: { serial: string; cn: string; notAfter: Date };
  /**
   * The latest runtime attestation of the installed OS (`runtime_verdict`, `runtime_attested_at`,
   * `runtime_passed_at`) as the attestation account recorded it; absent: none yet (or not attributed). A `fail`
   * on a worker is a quarantine (released only by an operator's `desired_action: attest`).
   */
  runtime?: { verdict: "pass" | "fail"; at: Date; lastPassAt?: Date };
}

/** What the platform (Tinkerbell Hardware and Workflows, Rufio) needs of a node. */
export type PlatformNode = Pick<Node, "name" | "macs" | "address" | "gateway" | "installDisk" | "bmc">;

/** A node name that is an RFC 1123 DNS label (lowercase): Tinkerbell objects are named by it. */
export type NodeName = string & { readonly __brand: "NodeName" };

export const NODE_NAME = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/** The rule only; each adapter refuses with its own error class (tinkerbell/names.ts `requireNodeName`). */
export const isNodeName = (s: string): s is NodeName => NODE_NAME.test(s);

/** The nodes file's entry of `name` with the boot interface's MAC (canonical; none known: no MACs) as a `PlatformNode`. */
export function platformNodeFromEntry(name: string, entry: NodeEntry, bootMac: string | undefined): PlatformNode {
  return {
    name,
    macs: bootMac !== undefined ? [bootMac] : [],
    address: entry.address.cidr,
    gateway: entry.address.gateway,
    installDisk: entry.installDisk,
    ...(entry.bmc.type !== "none" ? { bmc: { type: entry.bmc.type, address: entry.bmc.address, credentials: entry.bmc.credentials } } : {}),
  };
}
