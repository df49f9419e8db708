/**
 * What the attestation server needs from the rest of the world, as interfaces: the inventory (NetBox), the
 * journal (NetBox journal entries), the measured-boot policy, the CA, the Talos config renderer, admission
 * (Tinkerbell). Production wires NetBox, the policy engine, PKCS#11 and Kubernetes; each has its own tests.
 */
import type { Verdict } from "../../attest/verdict.js";
import type { PcrValues } from "../../attest/pcrs.js";
import type { TPMT_PUBLIC } from "../../tpm/structures.js";
import type { Mode } from "../messages.js";

export interface EkApproval {
  /** Canonical SPKI SHA-256, lowercase hex. */
  binding: string;
  alg: "rsa" | "ecc";
  /** false for a TPM without an EK certificate (an fTPM whose certificate is not in NV). */
  chain: boolean;
}

/** A node as the inventory knows it. */
export interface NodeRecord {
  name: string;
  serial: string;
  /** SMBIOS UUID if known. */
  uuid?: string;
  /** Policy profile of the installed OS (talos, ubuntu…). */
  class: string;
  role: "worker" | "control-plane";
  tpm: "2.0" | "1.2" | "none";
  ekBindings: EkApproval[];
  /** NetBox device status (planned, staged, active, failed, decommissioning, offline…). */
  status: string;
  desiredAction: "provision" | "attest" | "wipe" | null;
  /** The switch port the cable in NetBox connects to. */
  switchPort?: { device: string; port: string };
  /** Where the change log says the EK bindings came from: true when only the apply service account set them. */
  ekBindingsAttributed: boolean;
  /** Static address (CIDR), gateway and install disk for the Talos config. */
  address?: string;
  gateway?: string;
  installDisk?: string;
  /** The BMC from the nodes file (NetBox custom field `bmc`), for Tinkerbell's Hardware bmcRef and Rufio. */
  bmc?: { type: "amt" | "ipmi" | "redfish"; address: string; credentials: string };
}

export interface Inventory {
  /** The node approving this EK binding (bindings are unique across the inventory). */
  findByEkBinding(binding: string): Promise<NodeRecord | undefined>;
  /** A fresh read of the node, for the gates before anything is signed. */
  reread(name: string): Promise<NodeRecord | undefined>;
  /** Record what TPM evidence proved: MACs, serial, UUID, last attestation and verdict, LDevID serial/expiry. */
  recordAttestation(name: string, facts: AttestationFacts): Promise<void>;
}

export interface AttestationFacts {
  verdict: "pass" | "fail";
  at: Date;
  macs?: string[];
  /** The MAC of the interface the machine booted from (default: the first of `macs`); recorded as `boot_mac`. */
  bootMac?: string;
  serial?: string;
  uuid?: string;
  ldevid?: { serial: string; notAfter: Date };
}

export interface JournalEntry {
  kind: "success" | "warning" | "danger" | "info";
  /** One line for people. */
  summary: string;
  /** The verdict's reasons, with the evidence they concern. */
  reasons?: Verdict["reasons"];
}

export interface Journal {
  /** `node` is undefined for machines the inventory does not know. */
  record(node: string | undefined, entry: JournalEntry): Promise<void>;
}

export interface MeasuredBoot {
  /** Evaluate an event log against a profile, trusting only PCRs in `quoted` (already quote-verified). */
  evaluate(profile: string, eventLog: Uint8Array, quoted: PcrValues): Promise<Verdict>;
}

export interface Issued {
  der: Uint8Array;
  serialHex: string;
  notAfter: Date;
}

export interface Issuer {
  issue(req: { node: string; generation: number; ldevid: TPMT_PUBLIC; lak: TPMT_PUBLIC }): Promise<{ ldevid: Issued; lak: Issued; bundlePem: string }>;
}

export interface ConfigRenderer {
  /** Render the node's Talos config with its seed files; returns the YAML and the bootstrap token id. */
  render(
    node: NodeRecord,
    input: { mac: string; chainPem: string; ldevidPublic: Uint8Array; ldevidPrivate: Uint8Array; lakPublic: Uint8Array; lakPrivate: Uint8Array },
  ): Promise<{ config: string; bootstrapTokenId: string; tokenExpiresAt: Date; bootstrapToken: { id: string; secret: string } }>;
}

/**
 * The per-node kubelet bootstrap tokens in the workload cluster (shared/src/kube/bootstrapToken.ts): the
 * token's Secret must exist before its config can be fetched, else the node could not join.
 */
export interface BootstrapTokens {
  /** Create the token's Secret (expiring at `expiresAt`); throws when it cannot, and the provision fails closed. */
  create(node: string, token: { id: string; secret: string }, expiresAt: Date): Promise<void>;
  /** Delete a token fleetd created (idempotent); true when something was deleted. */
  delete(tokenId: string): Promise<boolean>;
}

export interface Admission {
  /** intake confirmed: create Hardware + the provision Workflow for this node (the Kubernetes issue). */
  admit(node: NodeRecord, facts: { macs: string[]; uuid: string }): Promise<void>;
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
