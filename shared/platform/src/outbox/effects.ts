/**
 * What the outbox delivers: fleetd's writes to NetBox (an attestation's facts, a status, a journal entry) and
 * clean-ups in the workload cluster (a bootstrap token Secret a step created and then did not record). A step
 * collects its effects in a StepEffects and commits them with its outcome (AttestationStore.commit); the worker
 * (worker.ts) delivers them. Effects are stored as JSON and validated here on their way out.
 */
import { z } from "zod";
import type { AttestationFacts, JournalEntry } from "../fleet/ports.js";
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
    }),
  }),
  /** A lifecycle status; `failed` only from planned, staged or active (an operator's own status is kept). */
  z.object({ kind: z.literal("netbox.status"), node: Ref, status: z.enum(["staged", "active", "failed"]), why: z.string() }),
  /** A journal entry on the node's device (a bare name: the one device of that name). */
  z.object({ kind: z.literal("netbox.journal"), node: z.union([Ref, z.object({ name: z.string() })]), entry: Entry }),
  /** Delete a bootstrap token's Secret unless the store records it as `deviceId`'s token (a compensation). */
  z.object({ kind: z.literal("kube.deleteBootstrapToken"), tokenId: z.string().regex(/^[a-z0-9]{6}$/), unlessRecordedFor: z.number().int().positive().optional() }),
]);
export type Effect = z.infer<typeof Effect>;

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

  status(node: NodeRef, status: "staged" | "active" | "failed", why: string): void {
    this.add(node.deviceId, { kind: "netbox.status", node: ref(node), status, why });
  }

  /** A journal entry; a machine the inventory does not know (undefined) has no device to journal on. */
  journal(node: NodeRef | string | undefined, entry: JournalEntry): void {
    if (node === undefined) return;
    const e = { kind: entry.kind, summary: entry.summary, ...(entry.reasons ? { reasons: entry.reasons.map(reasonOnly) } : {}) };
    if (typeof node === "string") this.add(null, { kind: "netbox.journal", node: { name: node }, entry: e });
    else this.add(node.deviceId, { kind: "netbox.journal", node: ref(node), entry: e });
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
