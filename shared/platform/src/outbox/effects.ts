/**
 * What the outbox delivers: fleetd's writes to NetBox (an attestation's facts, a status, a journal entry) and
 * clean-ups in the workload cluster (a bootstrap token Secret a step created and then did not record). A step
 * collects its effects in a StepEffects and commits them with its outcome (AttestationStore.commit); the worker
 * (worker.ts) delivers them. Effects are stored as JSON and validated here on their way out.
 */
import { z } from "zod";
import type { AttestationFacts, Journal, JournalEntry, RuntimeFacts } from "../fleet/ports.js";
import type { NodeRef, OutboxItem } from "../state/store.js";

const Ref = z.object({ deviceId: z.number().int().positive(), name: z.string() });
/** A journal entry's reason as the outbox stores it: verify's Reason, `internal` included (NetBox only). */
const JournalReason = z.object({
  check: z.string(),
  detail: z.string(),
  pcr: z.number().int().optional(),
  event: z.number().int().optional(),
  internal: z.string().optional(),
});
const Entry = z.object({ kind: z.enum(["success", "warning", "danger", "info"]), summary: z.string(), reasons: z.array(JournalReason).optional() });

export const Effect = z.discriminatedUnion("kind", [
  /** The custom fields an attestation sets (verdict, time, serial, UUID, boot MAC, LDevID) and the proven MAC. */
  z.object({
    kind: z.literal("netbox.attestation"),
    node: Ref,
    facts: z.object({
      verdict: z.enum(["pass", "fail"]),
      at: z.string(),
      macs: z.array(z.string()).optional(),
      bootMac: z.string().optional(),
      serial: z.string().optional(),
      uuid: z.string().optional(),
      recordUuid: z.string().optional(),
      // cn is absent in items queued before it was recorded (nothing is then written to ldevid_cn)
      ldevid: z.object({ serial: z.string(), cn: z.string().optional(), notAfter: z.string() }).optional(),
      // the cabled boot interface and its primary MAC as the gates' read found them (null: none cabled); absent
      // in items queued before it was carried (the delivery then lists the interfaces)
      bootInterface: z.object({ id: z.number().int().positive(), mac: z.string().nullable() }).nullable().optional(),
    }),
  }),
  /** A lifecycle status; `failed` only from planned, staged or active (an operator's own status is kept). */
  z.object({ kind: z.literal("netbox.status"), node: Ref, status: z.enum(["staged", "active", "failed"]), why: z.string() }),
  /** A journal entry on the node's device (a bare name: the one device of that name). */
  z.object({ kind: z.literal("netbox.journal"), node: z.union([Ref, z.object({ name: z.string() })]), entry: Entry }),
  /**
   * A runtime attestation's NetBox fields: `runtime_verdict`, `runtime_attested_at` and, on a pass,
   * `runtime_passed_at`; and/or the confirmed renewal's LDevID (`ldevid_serial`, `ldevid_cn`, `ldevid_expiry`).
   */
  z.object({
    kind: z.literal("netbox.runtime"),
    node: Ref,
    verdict: z.object({ verdict: z.enum(["pass", "fail"]), at: z.string() }).optional(),
    ldevid: z.object({ serial: z.string(), cn: z.string(), notAfter: z.string() }).optional(),
  }),
  /** Cordon a quarantined worker's Node in the workload cluster, or lift fleetd's cordon (kube/quarantine.ts). */
  z.object({ kind: z.literal("kube.quarantine"), node: Ref, action: z.enum(["cordon", "uncordon"]), why: z.string() }),
  /** Delete a bootstrap token's Secret unless the store records it as `deviceId`'s token (a compensation). */
  z.object({ kind: z.literal("kube.deleteBootstrapToken"), tokenId: z.string().regex(/^[a-z0-9]{6}$/), unlessRecordedFor: z.number().int().positive().optional() }),
]);
export type Effect = z.infer<typeof Effect>;

/** The runtime facts of a `netbox.runtime` effect (dates back from ISO strings). */
export function runtimeFactsFromWire(e: Extract<Effect, { kind: "netbox.runtime" }>): RuntimeFacts {
  return {
    ...(e.verdict ? { verdict: { verdict: e.verdict.verdict, at: new Date(e.verdict.at) } } : {}),
    ...(e.ldevid ? { ldevid: { serial: e.ldevid.serial, cn: e.ldevid.cn, notAfter: new Date(e.ldevid.notAfter) } } : {}),
  };
}

/** The facts as the outbox stores them (dates as ISO strings) and back. */
export function factsToWire(f: AttestationFacts): Extract<Effect, { kind: "netbox.attestation" }>["facts"] {
  const { at, ldevid, ...rest } = f;
  return { ...rest, at: at.toISOString(), ...(ldevid ? { ldevid: { serial: ldevid.serial, cn: ldevid.cn, notAfter: ldevid.notAfter.toISOString() } } : {}) };
}
export function factsFromWire(f: Extract<Effect, { kind: "netbox.attestation" }>["facts"]): AttestationFacts {
  const { at, ldevid, ...rest } = f;
  return { ...rest, at: new Date(at), ...(ldevid ? { ldevid: { serial: ldevid.serial, cn: ldevid.cn ?? "", notAfter: new Date(ldevid.notAfter) } } : {}) };
}

/**
 * The effects of one step, keyed `<prefix>:<n>` in the order they were added (prefix: the session and step, or
 * the install code): a step commits once, so each key is written once, and a delivery retried after an unknown
 * outcome carries the same key (a journal entry is looked up by it before it is written again).
 */
export class StepEffects {
  readonly items: OutboxItem[] = [];

  constructor(private readonly prefix: string) {}

  private add(deviceId: number | null, effect: Effect, notBefore = 0): string {
    const key = `${this.prefix}:${this.items.length}`;
    this.items.push({ key, deviceId, effect: effect as unknown as Record<string, unknown>, notBefore });
    return key;
  }

  attestation(node: NodeRef, facts: AttestationFacts): void {
    this.add(node.deviceId, { kind: "netbox.attestation", node: ref(node), facts: factsToWire(facts) });
  }

  /** Runtime verdict fields and/or the confirmed renewal's LDevID fields in NetBox. */
  runtime(node: NodeRef, facts: RuntimeFacts): void {
    this.add(node.deviceId, {
      kind: "netbox.runtime",
      node: ref(node),
      ...(facts.verdict ? { verdict: { verdict: facts.verdict.verdict, at: facts.verdict.at.toISOString() } } : {}),
      ...(facts.ldevid ? { ldevid: { serial: facts.ldevid.serial, cn: facts.ldevid.cn, notAfter: facts.ldevid.notAfter.toISOString() } } : {}),
    });
  }

  /** Cordon (or lift fleetd's cordon of) the node's Node in the workload cluster. */
  quarantine(node: NodeRef, action: "cordon" | "uncordon", why: string): void {
    this.add(node.deviceId, { kind: "kube.quarantine", node: ref(node), action, why });
  }

  status(node: NodeRef, status: "staged" | "active" | "failed", why: string): void {
    this.add(node.deviceId, { kind: "netbox.status", node: ref(node), status, why });
  }

  /**
   * A journal entry; a machine the inventory does not know (undefined) has no device to journal on. `notBefore`
   * holds it back (a linger): a step that a next step follows lets that step's commit deliver it with its own
   * entries, in one request (worker.ts flush); it is delivered on its own once due.
   */
  journal(node: NodeRef | string | undefined, entry: JournalEntry, notBefore = 0): void {
    if (node === undefined) return;
    const e = { kind: entry.kind, summary: entry.summary, ...(entry.reasons ? { reasons: entry.reasons.map(reasonOnly) } : {}) };
    if (typeof node === "string") this.add(null, { kind: "netbox.journal", node: { name: node }, entry: e }, notBefore);
    else this.add(node.deviceId, { kind: "netbox.journal", node: ref(node), entry: e }, notBefore);
  }

  /** These effects as a Journal: what a component journals (e.g. an admission) is committed with the step. */
  journalOf(node: NodeRef): Journal {
    return {
      record: async (_name, entry) => this.journal(node, entry),
    };
  }

  /** A clean-up due at `notBefore` unless the step's commit cancels it by the returned key. */
  compensation(effect: Extract<Effect, { kind: "kube.deleteBootstrapToken" }>, notBefore: number): string {
    return this.add(null, effect, notBefore);
  }

  /** A clean-up that is part of the step's outcome (e.g. the node's previous bootstrap token). */
  cleanUp(effect: Extract<Effect, { kind: "kube.deleteBootstrapToken" }>): void {
    this.add(null, effect);
  }
}

const ref = (n: NodeRef): NodeRef => ({ deviceId: n.deviceId, name: n.name });
const reasonOnly = (r: NonNullable<JournalEntry["reasons"]>[number]) => ({
  check: r.check,
  detail: r.detail,
  ...(r.pcr !== undefined ? { pcr: r.pcr } : {}),
  ...(r.event !== undefined ? { event: r.event } : {}),
  ...(r.internal !== undefined ? { internal: r.internal } : {}),
});
