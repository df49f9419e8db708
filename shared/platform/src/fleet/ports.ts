/**
 * What the attestation server needs from the rest of the world, as interfaces: the inventory (NetBox), the
 * journal (NetBox journal entries), the measured-boot policy, the CA, the Talos config renderer, admission
 * (Tinkerbell). Production wires NetBox, the policy engine, PKCS#11 and Kubernetes; each has its own tests.
 */
import type { Verdict, PcrValues } from "@fleetd/verify/attest";
import type { TPMT_PUBLIC } from "@fleetd/verify/tpm";
import type { Mode } from "./modes.js";
import type { BmcInfo, Node, NodeRef } from "./node.js";

export interface Inventory {
  /** The node approving this EK binding (bindings are unique across the inventory). */
  /**
   * The node approving this EK binding (bindings are unique across the inventory), possibly as an index read it
   * earlier (the gates read it again); `fresh`: as NetBox holds it now.
   */
  findByEkBinding(binding: string, o?: { fresh?: boolean }): Promise<Node | undefined>;
  /** A fresh read of the node by its device ID, for the gates before anything is signed. */
  reread(deviceId: number): Promise<Node | undefined>;
  /** Record what TPM evidence proved: MACs, serial, UUID, last attestation and verdict, LDevID serial/expiry. */
  recordAttestation(node: NodeRef, facts: AttestationFacts): Promise<void>;
  /** A provision was confirmed (install code released): the device is `staged` until Talos fetches its config. */
  markStaged(node: NodeRef): Promise<void>;
  /**
   * The lifecycle failed for this node (TPM evidence that proved the TPM failed the policy in provision or
   * attest; an install code that expired undelivered): status `failed`, unless an operator moved the device
   * to a status fleetd does not own meanwhile (only `planned`, `staged` and `active` become `failed`).
   */
  markFailed(node: NodeRef, why: string): Promise<void>;
}

export interface AttestationFacts {
  verdict: "pass" | "fail";
  at: Date;
  macs?: string[];
  /** The MAC of the interface the machine booted from (default: the first of `macs`); recorded as `boot_mac`. */
  bootMac?: string;
  serial?: string;
  uuid?: string;
  /** The first pass of a node with no recorded UUID: record this one (`attested_uuid`); it is required afterwards. */
  recordUuid?: string;
  /** The LDevID issued with this pass (written as ldevid_serial, ldevid_cn, ldevid_expiry): `cn` is `<node>.g<generation>`. */
  ldevid?: { serial: string; cn: string; notAfter: Date };
  /**
   * The cabled boot interface and its primary MAC as the step's fresh read found them (null: none is cabled):
   * the proven MAC is then written only when it differs, without listing the interfaces again. Absent: unknown.
   */
  bootInterface?: { id: number; mac: string | null } | null;
}

/** What a runtime attestation records in NetBox (NetBoxInventory.recordRuntime). */
export interface RuntimeFacts {
  /** `runtime_verdict` and `runtime_attested_at`; a pass also `runtime_passed_at`. */
  verdict?: { verdict: "pass" | "fail"; at: Date };
  /** A confirmed renewal: `ldevid_serial`, `ldevid_cn`, `ldevid_expiry`. */
  ldevid?: { serial: string; cn: string; notAfter: Date };
}

export interface JournalEntry {
  kind: "success" | "warning" | "danger" | "info";
  /** One line for people. */
  summary: string;
  /** The verdict's reasons, with the evidence they concern (and journal-only inventory values). */
  reasons?: (Verdict["reasons"][number] & { internal?: string })[];
}

export interface Journal {
  /**
   * `node` is undefined for machines the inventory does not know; a NodeRef journals on its device ID; a bare name
   * (components that know only the name) on the one device of that name (none when several have it).
   */
  record(node: NodeRef | string | undefined, entry: JournalEntry): Promise<void>;
}

export interface MeasuredBoot {
  /**
   * Evaluate an event log against a profile, trusting only PCRs in `quoted` (already quote-verified). `tpm` is the
   * family of the TPM whose quote vouched for them (default 2.0); a profile judges only its own family's evidence.
   */
  evaluate(profile: string, eventLog: Uint8Array, quoted: PcrValues, tpm?: "2.0" | "1.2"): Promise<Verdict>;
}

export interface Issued {
  der: Uint8Array;
  serialHex: string;
  notAfter: Date;
}

export interface Issuer {
  /**
   * Sign the node's LDevID and LAK certificates of `generation`. `serials` (hex, chosen and recorded void by the
   * caller before it asks) are the certificates' serial numbers, so one that is signed but never recorded valid is
   * already listed.
   */
  issue(req: { node: string; generation: number; ldevid: TPMT_PUBLIC; lak: TPMT_PUBLIC; serials?: { ldevid: string; lak: string } }): Promise<{ ldevid: Issued; lak: Issued; bundlePem: string }>;
}

export interface ConfigRenderer {
  /** Render the node's Talos config with its seed files; returns the YAML and the bootstrap token id. */
  render(
    node: Node,
    input: { mac: string; chainPem: string; ldevidPublic: Uint8Array; ldevidPrivate: Uint8Array; lakPublic: Uint8Array; lakPrivate: Uint8Array; lakCertPem: string },
  ): Promise<{ config: string; bootstrapTokenId: string; tokenExpiresAt: Date; bootstrapToken: { id: string; secret: string } }>;
}

/**
 * The per-node kubelet bootstrap tokens in the workload cluster (shared/platform/src/kube/bootstrapToken.ts): the
 * token's Secret must exist before its config can be fetched, else the node could not join.
 */
export interface BootstrapTokens {
  /** Create the token's Secret (expiring at `expiresAt`); throws when it cannot, and the provision fails closed. */
  create(node: string, token: { id: string; secret: string }, expiresAt: Date): Promise<void>;
  /** Delete a token fleetd created (idempotent); true when something was deleted. */
  delete(tokenId: string): Promise<boolean>;
}

export interface Admission {
  /**
   * intake confirmed: create Hardware + the provision Workflow for this node (the Kubernetes issue). Every outcome
   * is journalled, to `journal` when given (the confirm's: committed with the step, delivered with its entries),
   * else to the admission's own.
   */
  admit(node: Node, facts: { macs: string[]; uuid: string }, journal?: Journal): Promise<void>;
}

/**
 * Which NetBox statuses allow each mode (site configuration). desired_action must be unset or equal to the
 * mode: the handler clears it when it starts the workflow, and an operator who changed it to something else
 * meanwhile (e.g. wipe during a provision) stops the session.
 */
export type ModeGates = Record<Mode, string[]>;

export const DEFAULT_MODE_GATES: ModeGates = {
  intake: ["planned"],
  provision: ["planned", "staged", "failed", "active"],
  attest: ["staged", "active"],
  wipe: ["planned", "staged", "failed", "active", "decommissioning"],
};

/** The NetBox fields admission would hand to the platform. */
export interface PlatformFields {
  bmc?: BmcInfo;
  installDisk?: string;
}

export interface PlatformFieldRefusal {
  code: "bmc-unattributed" | "install-disk-unattributed";
  reason: string;
}

/** Who wrote the platform fields: a refusal per field the apply account did not write (empty: all attributed). */
export interface PlatformFieldCheck {
  check(node: string, fields: PlatformFields): Promise<PlatformFieldRefusal[]>;
}
