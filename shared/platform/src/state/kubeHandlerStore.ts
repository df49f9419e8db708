/**
 * The Kubernetes backend of HandlerStore, for netbox-script under HA: every record is one Secret in one
 * namespace (kubeRecords.ts: jobs name devices and BMC references, so Secrets, like the attestation state),
 * type `fleetd.io/handler-state`, kinds `handler-job`, `handler-delivery`, `handler-intent` and
 * `handler-claim` (a device's one claimed request). Atomicity comes from the API server alone: a job, a
 * delivery id and a device's claim are created if absent (409: someone was first); claims of jobs, failures,
 * intent steps are resourceVersion compare-and-swaps, re-read and re-decided after a 409.
 *
 * A device's claimed request is its claim object (create-if-absent: one per device); the request's intent object
 * is written when it is settled or abandoned, and the claim object deleted after it. RBAC: get, list, create,
 * update, delete on secrets.
 */
import { z } from "zod";
import type { Kube } from "../kube/client.js";
import { CLAIMABLE_FIELDS, SecretRecords, type Found } from "./kubeRecords.js";
import type { HandlerIntentRecord, HandlerJob, HandlerStore, IntentClaim, JobFailure, NewHandlerJob } from "./handlerStore.js";

const SECRET_TYPE = "fleetd.io/handler-state";
const NODE_LABEL = "fleetd.io/node";
const PARKED_LABEL = "fleetd.io/parked";

const Job = z.object({
  id: z.string(),
  deviceId: z.number().int().positive(),
  source: z.enum(["webhook", "reconcile"]),
  receivedAt: z.string(),
  hintEvent: z.string().nullable(),
  parkedAt: z.number().nullable(),
  ...CLAIMABLE_FIELDS,
});
type Job = z.infer<typeof Job>;
const Delivery = z.object({ expiresAt: z.number() });
const Intent = z.object({
  key: z.string(),
  deviceId: z.number().int().positive(),
  intent: z.record(z.string(), z.unknown()),
  effect: z.record(z.string(), z.unknown()).optional(),
  state: z.enum(["claimed", "settled", "abandoned"]),
  recordedAt: z.number(),
});
const Claim = z.object({ key: z.string(), deviceId: z.number().int().positive(), intent: z.record(z.string(), z.unknown()), recordedAt: z.number() });

const toJob = ({ claimedBy: _b, claimedAt: _a, ...j }: Job): HandlerJob => j;
const byAge = (a: HandlerJob, b: HandlerJob): number => a.receivedAt.localeCompare(b.receivedAt) || a.id.localeCompare(b.id);
const deviceKey = (deviceId: number): string => `device-${deviceId}`;

export interface KubeHandlerStoreOptions {
  kube: Kube;
  namespace: string;
}

export class KubeHandlerStore implements HandlerStore {
  private readonly r: SecretRecords;
  private remembered = 0;

  constructor(o: KubeHandlerStoreOptions) {
    this.r = new SecretRecords(o.kube, o.namespace, SECRET_TYPE);
  }

  private jobLabels(j: Job): Record<string, string> {
    return { [NODE_LABEL]: String(j.deviceId), ...(j.parkedAt !== null ? { [PARKED_LABEL]: "true" } : {}) };
  }

  async enqueueJob(n: NewHandlerJob): Promise<HandlerJob> {
    const job: Job = { ...n, attempts: 0, notBefore: 0, lastError: null, parkedAt: null, claimedBy: null, claimedAt: null };
    if (await this.r.create("handler-job", n.id, job, this.jobLabels(job))) return toJob(job);
    const cur = await this.r.read("handler-job", n.id, Job);
    // queued already (or just completed by a worker: then this hint was handled with the first)
    return cur ? toJob(cur.record) : toJob(job);
  }

  rememberDelivery(id: string, expiresAt: number, now: number): Promise<boolean> {
    const first = this.r.casLoop("delivery id", async () => {
      if (await this.r.create("handler-delivery", id, { expiresAt })) return { done: true };
      const cur = await this.r.read("handler-delivery", id, Delivery);
      if (!cur) return "retry";
      if (cur.record.expiresAt > now) return { done: false };
      await this.r.remove("handler-delivery", id, cur.resourceVersion);
      return "retry";
    });
    // ids past their window are deleted now and then (a replay that old is refused as stale anyway)
    if (++this.remembered % 100 === 1) void first.then(() => this.pruneDeliveries(now)).catch(() => undefined);
    return first;
  }

  private async pruneDeliveries(now: number): Promise<void> {
    for (const d of await this.r.list("handler-delivery", Delivery)) {
      if (d.record.expiresAt <= now) await this.r.removeByName(d.name, d.resourceVersion);
    }
  }

  async takeJobs(now: number, claimer: string, staleMs: number, limit: number): Promise<HandlerJob[]> {
    const all = (await this.r.list("handler-job", Job)).sort((a, b) => byAge(toJob(a.record), toJob(b.record)));
    const out: HandlerJob[] = [];
    for (const f of all) {
      if (out.length >= limit) break;
      const j = f.record;
      if (j.parkedAt !== null || j.notBefore > now) continue;
      if (j.claimedBy !== null && !(j.claimedAt !== null && j.claimedAt <= now - staleMs)) continue;
      const next: Job = { ...j, claimedBy: claimer, claimedAt: now };
      // a lost CAS: another taker got it (or it changed): skip it
      if (await this.r.replace("handler-job", j.id, next, f.resourceVersion, this.jobLabels(next))) out.push(toJob(next));
    }
    return out;
  }

  completeJob(id: string, claimer: string): Promise<boolean> {
    return this.r.casLoop(`job ${id}`, async () => {
      const cur = await this.r.read("handler-job", id, Job);
      if (!cur || cur.record.claimedBy !== claimer) return { done: false };
      return (await this.r.remove("handler-job", id, cur.resourceVersion)) ? { done: true } : "retry";
    });
  }

  failJob(id: string, claimer: string, error: string, notBefore: number, maxAttempts: number): Promise<JobFailure> {
    return this.r.casLoop<JobFailure>(`job ${id}`, async () => {
      const cur = await this.r.read("handler-job", id, Job);
      if (!cur || cur.record.claimedBy !== claimer) return { done: "lost" };
      const attempts = cur.record.attempts + 1;
      const parked = attempts >= maxAttempts;
      const next: Job = { ...cur.record, attempts, lastError: error.slice(0, 2000), notBefore, parkedAt: parked ? Date.now() : null, claimedBy: null, claimedAt: null };
      return (await this.r.replace("handler-job", id, next, cur.resourceVersion, this.jobLabels(next))) ? { done: parked ? "parked" : "retry" } : "retry";
    });
  }

  async releaseJobs(claimer?: string): Promise<number> {
    let n = 0;
    for (const f of await this.r.list("handler-job", Job)) {
      const j = f.record;
      if (j.claimedBy === null || (claimer !== undefined && j.claimedBy !== claimer)) continue;
      const next: Job = { ...j, claimedBy: null, claimedAt: null };
      if (await this.r.replace("handler-job", j.id, next, f.resourceVersion, this.jobLabels(next))) n++;
    }
    return n;
  }

  async listJobs(which: "pending" | "parked"): Promise<HandlerJob[]> {
    return (await this.r.list("handler-job", Job))
      .map((f) => f.record)
      .filter((j) => (which === "parked") === (j.parkedAt !== null))
      .map(toJob)
      .sort(byAge);
  }

  // ---- intents --------------------------------------------------------------------------------------------
  // A claim lives in the device's claim object alone (key, intent, time); intent objects hold only settled and
  // abandoned requests. A claim object whose request has an intent object is left over (its process died after
  // settling or abandoning): the next claim of the device removes it.

  /** The device's claim, unless left over. */
  private async claimOf(deviceId: number): Promise<{ claim: Found<z.infer<typeof Claim>>; held: boolean } | undefined> {
    const lock = await this.r.read("handler-claim", deviceKey(deviceId), Claim);
    if (!lock) return undefined;
    // read after the claim object: a request claimed again after it was abandoned had its intent object deleted first
    const rec = await this.r.read("handler-intent", lock.record.key, Intent);
    return { claim: lock, held: rec === undefined };
  }

  claimIntent(key: string, deviceId: number, intent: Record<string, unknown>, now: number): Promise<IntentClaim> {
    return this.r.casLoop<IntentClaim>(`intent ${key}`, async () => {
      const cur = await this.r.read("handler-intent", key, Intent);
      if (cur?.record.state === "settled") return { done: "settled" };
      const c = await this.claimOf(deviceId);
      if (c?.held) return { done: c.claim.record.key === key ? "claimed" : "busy" };
      if (c) {
        await this.r.remove("handler-claim", deviceKey(deviceId), c.claim.resourceVersion); // left over
        return "retry";
      }
      // claimed again after it was abandoned: the abandoned record goes first (see claimOf)
      if (cur && !(await this.r.remove("handler-intent", key, cur.resourceVersion))) return "retry";
      const claim = { key, deviceId, intent, recordedAt: now };
      return (await this.r.create("handler-claim", deviceKey(deviceId), claim, { [NODE_LABEL]: String(deviceId) })) ? { done: "claimed" } : "retry";
    });
  }

  /** Writes a request's settled or abandoned record (create, or replace what is there). */
  private async put(rec: HandlerIntentRecord, cur: Found<HandlerIntentRecord> | undefined): Promise<boolean> {
    const labels = { [NODE_LABEL]: String(rec.deviceId) };
    return cur ? this.r.replace("handler-intent", rec.key, rec, cur.resourceVersion, labels) : this.r.create("handler-intent", rec.key, rec, labels);
  }

  async abandonIntent(key: string, deviceId: number, now: number): Promise<void> {
    await this.r.casLoop(`intent ${key}`, async () => {
      const c = await this.claimOf(deviceId);
      if (!c?.held || c.claim.record.key !== key) return { done: undefined };
      const cur = await this.r.read("handler-intent", key, Intent);
      if (!(await this.put({ key, deviceId, intent: c.claim.record.intent, state: "abandoned", recordedAt: now }, cur))) return "retry";
      await this.r.remove("handler-claim", deviceKey(deviceId), c.claim.resourceVersion);
      return { done: undefined };
    });
  }

  async settleIntent(key: string, deviceId: number, intent: Record<string, unknown>, effect: Record<string, unknown> | undefined, now: number): Promise<HandlerIntentRecord | undefined> {
    const rec = await this.r.casLoop<HandlerIntentRecord | undefined>(`intent ${key}`, async () => {
      const cur = await this.r.read("handler-intent", key, Intent);
      if (cur?.record.state === "settled") return { done: undefined };
      const next: HandlerIntentRecord = { key, deviceId, intent, ...(effect ? { effect } : {}), state: "settled", recordedAt: now };
      return (await this.put(next, cur)) ? { done: next } : "retry";
    });
    if (rec) {
      const lock = await this.r.read("handler-claim", deviceKey(deviceId), Claim);
      if (lock?.record.key === key) await this.r.remove("handler-claim", deviceKey(deviceId), lock.resourceVersion);
    }
    return rec;
  }

  async unsettledIntent(deviceId: number): Promise<HandlerIntentRecord | undefined> {
    const c = await this.claimOf(deviceId);
    if (!c?.held) return undefined;
    const { key, intent, recordedAt } = c.claim.record;
    return { key, deviceId, intent, state: "claimed", recordedAt };
  }

  /** Settled requests, by the time they were settled (requests settled in the same millisecond: by key). */
  async listIntents(): Promise<HandlerIntentRecord[]> {
    return (await this.r.list("handler-intent", Intent))
      .map((f) => f.record)
      .filter((r) => r.state === "settled")
      .sort((a, b) => a.recordedAt - b.recordedAt || a.key.localeCompare(b.key));
  }

  async close(): Promise<void> {
    // nothing held open: every call is a request
  }
}
