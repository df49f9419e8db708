/**
 * In-memory adapters for the attestation server's ports (shared/platform/src/fleet/ports.ts), for unit tests of
 * the protocol engine without NetBox, SoftHSM2 or a cluster: an inventory holding Nodes, a journal that
 * records entries (formatted as NetBox would show them), an outbox delivery that applies the steps' effects to
 * both, an issuer over a software CA key (PkiIssuer + softwareSigner) that counts its signatures, bootstrap tokens
 * and admission that record what they were asked, and a Workflow gate that accepts every claimed Workflow.
 * Production wires NetBox, PKCS#11, Kubernetes and Tinkerbell; each of those has its own tests.
 */
import type { AttestationFacts, Admission, BootstrapTokens, Inventory, Issuer, Journal, JournalEntry, Node, NodeRef, RuntimeFacts } from "@fleetd/platform/fleet";
import { formatJournalEntry } from "@fleetd/platform/netbox";
import { factsFromWire, runtimeFactsFromWire, type Effect, type OutboxDelivery } from "@fleetd/platform/outbox";
import { addCa, createCaCertificate, emptyBundleState, type BundleState, type CertificateSigner } from "@fleetd/platform/pki";
import { PkiIssuer } from "@fleetd/platform/protocol/server";
import type { OutboxEntry } from "@fleetd/platform/state";
import type { WorkflowGate } from "@fleetd/platform/tinkerbell";
import { newSoftwareSigner } from "./softwareSigner.js";

/** One journal entry as recorded: on which node, the entry, and its text as NetBox shows it. */
export interface RecordedEntry {
  node: NodeRef | string | undefined;
  entry: JournalEntry;
  text: string;
}

/** A Journal that keeps every entry; `of(deviceId)` lists a device's entries' texts, oldest first. */
export class MemoryJournal implements Journal {
  readonly entries: RecordedEntry[] = [];

  constructor(private readonly inventory?: MemoryInventory) {}

  async record(node: NodeRef | string | undefined, entry: JournalEntry): Promise<void> {
    this.entries.push({ node, entry, text: formatJournalEntry(entry) });
  }

  /** The texts of the entries on `deviceId` (a bare name counts when the inventory has exactly one device of it). */
  of(deviceId: number): string[] {
    const name = this.inventory?.get(deviceId)?.name;
    return this.entries
      .filter((e) => (typeof e.node === "object" ? e.node.deviceId === deviceId : typeof e.node === "string" && e.node === name && this.inventory?.byName(name).length === 1))
      .map((e) => e.text);
  }
}

/** An Inventory over Nodes kept in memory (as NetBox would hold them), with what attestations recorded. */
export class MemoryInventory implements Inventory {
  private readonly nodes = new Map<number, Node>();
  /** Every recordAttestation, in order. */
  readonly attestations: { node: NodeRef; facts: AttestationFacts }[] = [];

  /** Adds (or replaces) a node. */
  put(node: Node): void {
    this.nodes.set(node.deviceId, structuredClone(node));
  }

  /** The node as held now (a copy), or undefined. */
  get(deviceId: number): Node | undefined {
    const n = this.nodes.get(deviceId);
    return n ? structuredClone(n) : undefined;
  }

  byName(name: string): Node[] {
    return [...this.nodes.values()].filter((n) => n.name === name).map((n) => structuredClone(n));
  }

  /** An operator's edit (e.g. the status to decommissioning). */
  update(deviceId: number, change: Partial<Omit<Node, "deviceId">>): void {
    const n = this.nodes.get(deviceId);
    if (!n) throw new Error(`no device ${deviceId}`);
    this.nodes.set(deviceId, { ...n, ...structuredClone(change) });
  }

  async findByEkBinding(binding: string): Promise<Node | undefined> {
    const n = [...this.nodes.values()].find((x) => x.ekBindings.some((b) => b.binding === binding));
    return n ? structuredClone(n) : undefined;
  }

  async reread(deviceId: number): Promise<Node | undefined> {
    return this.get(deviceId);
  }

  async recordAttestation(node: NodeRef, facts: AttestationFacts): Promise<void> {
    this.attestations.push({ node, facts });
    const n = this.nodes.get(node.deviceId);
    if (!n) return;
    if (facts.recordUuid) n.uuid = facts.recordUuid;
    const boot = facts.bootMac ?? facts.macs?.[0];
    if (facts.verdict === "pass" && boot) n.macs = [boot];
  }

  /** Every recordRuntime, in order. */
  readonly runtimes: { node: NodeRef; facts: RuntimeFacts }[] = [];

  async recordRuntime(node: NodeRef, facts: RuntimeFacts): Promise<void> {
    this.runtimes.push({ node, facts });
    const n = this.nodes.get(node.deviceId);
    if (!n) return;
    if (facts.verdict) n.runtime = { verdict: facts.verdict.verdict, at: facts.verdict.at, ...(facts.verdict.verdict === "pass" ? { lastPassAt: facts.verdict.at } : n.runtime?.lastPassAt ? { lastPassAt: n.runtime.lastPassAt } : {}) };
    if (facts.ldevid) n.ldevid = { ...facts.ldevid };
  }

  async markStaged(node: NodeRef): Promise<void> {
    this.setStatus(node, "staged");
  }

  async markActive(node: NodeRef): Promise<void> {
    this.setStatus(node, "active");
  }

  /** Only planned, staged and active become failed (an operator's own status is kept), as NetBoxInventory does. */
  async markFailed(node: NodeRef, _why: string): Promise<void> {
    const n = this.nodes.get(node.deviceId);
    if (n && ["planned", "staged", "active"].includes(n.status)) n.status = "failed";
  }

  private setStatus(node: NodeRef, status: string): void {
    const n = this.nodes.get(node.deviceId);
    if (n) n.status = status;
  }
}

/** The outbox's deliveries into the in-memory inventory and journal (NetBoxOutboxDelivery's counterpart). */
export class MemoryOutboxDelivery implements OutboxDelivery {
  constructor(private readonly o: { inventory: MemoryInventory; journal: MemoryJournal; bootstrapTokens?: BootstrapTokens; /** Names of cordoned Nodes. */ quarantine?: Set<string> }) {}

  async deliver(_entry: OutboxEntry, effect: Effect): Promise<"delivered" | "moot"> {
    switch (effect.kind) {
      case "netbox.attestation":
        if (!this.o.inventory.get(effect.node.deviceId)) return "moot";
        await this.o.inventory.recordAttestation(effect.node, factsFromWire(effect.facts));
        return "delivered";
      case "netbox.status":
        if (!this.o.inventory.get(effect.node.deviceId)) return "moot";
        if (effect.status === "failed") await this.o.inventory.markFailed(effect.node, effect.why);
        else if (effect.status === "staged") await this.o.inventory.markStaged(effect.node);
        else await this.o.inventory.markActive(effect.node);
        return "delivered";
      case "netbox.journal":
        await this.o.journal.record("deviceId" in effect.node ? effect.node : effect.node.name, effect.entry);
        return "delivered";
      case "netbox.runtime":
        if (!this.o.inventory.get(effect.node.deviceId)) return "moot";
        await this.o.inventory.recordRuntime(effect.node, runtimeFactsFromWire(effect));
        return "delivered";
      case "kube.quarantine":
        if (!this.o.quarantine) return "moot";
        if (effect.action === "cordon") this.o.quarantine.add(effect.node.name);
        else this.o.quarantine.delete(effect.node.name);
        return "delivered";
      case "kube.deleteBootstrapToken":
        if (!this.o.bootstrapTokens) return "moot";
        await this.o.bootstrapTokens.delete(effect.tokenId);
        return "delivered";
    }
  }
}

/** Bootstrap tokens recorded in memory: token id → node. */
export class MemoryBootstrapTokens implements BootstrapTokens {
  readonly live = new Map<string, string>();
  created = 0;

  async create(node: string, token: { id: string; secret: string }): Promise<void> {
    this.created++;
    this.live.set(token.id, node);
  }

  async delete(tokenId: string): Promise<boolean> {
    return this.live.delete(tokenId);
  }
}

/** Admission that records the nodes admitted. */
export class MemoryAdmission implements Admission {
  readonly admitted: { node: string; macs: string[]; uuid: string }[] = [];

  async admit(node: Node, facts: { macs: string[]; uuid: string }): Promise<void> {
    this.admitted.push({ node: node.name, ...facts });
  }
}

/** A Workflow gate that finds every claimed Workflow (the Tinkerbell gate has its own tests); it keeps the claims. */
export class AcceptingWorkflowGate implements WorkflowGate {
  readonly checked: { node: string; workflow: string }[] = [];

  async check(node: { name: string }, claimed: { workflow: string }): Promise<[]> {
    this.checked.push({ node: node.name, workflow: claimed.workflow });
    return [];
  }
}

/** An issuer over a software CA key (P-256): fleetd's PkiIssuer with a CA bundle in memory, counting signatures. */
export interface MemoryIssuer {
  issuer: Issuer;
  /** Signatures the CA key made since it was created (its own certificate excluded). */
  signatures(): number;
  caPem: string;
}

/** `signer`, counting the signatures it makes. */
export function countingSigner(signer: CertificateSigner): { signer: CertificateSigner; signatures(): number } {
  let count = 0;
  return {
    signer: {
      publicKey: signer.publicKey,
      signatureAlgorithm: signer.signatureAlgorithm,
      sign: (data) => {
        count++;
        return signer.sign(data);
      },
    },
    signatures: () => count,
  };
}

/** fleetd's PkiIssuer over `signer`, whose CA certificate is `caPem`, with its CA bundle kept in memory. */
export function bundleInMemoryIssuer(o: { signer: CertificateSigner; caPem: string; now: () => Date; lifetimeDays?: number }): PkiIssuer {
  let bundle: BundleState = addCa(emptyBundleState(), o.caPem, new Date(o.now().getTime() - 3600_000));
  return new PkiIssuer({ signer: o.signer, state: () => bundle, save: async (s) => void (bundle = s), lifetimeDays: o.lifetimeDays ?? 30, now: o.now });
}

export async function memoryIssuer(o: { now: () => Date; lifetimeDays?: number }): Promise<MemoryIssuer> {
  const key = newSoftwareSigner("ec-p256");
  const ca = await createCaCertificate({ signer: key, commonName: "fleetd unit CA", notBefore: new Date(o.now().getTime() - 3600_000), lifetimeDays: 365 });
  const { signer, signatures } = countingSigner(key);
  return { issuer: bundleInMemoryIssuer({ signer, caPem: ca.pem, ...o }), signatures, caPem: ca.pem };
}
