/**
 * The Kubernetes backend of HandlerStore, for netbox-script under HA: every record is one Secret in one
 * namespace (kubeRecords.ts: jobs name devices and BMC references, so Secrets, like the attestation state),
 * type `fleetd.io/handler-state`, kinds `handler-job`, `handler-delivery`, `handler-intent` and
 * `handler-claim` (a device's one claimed request). Atomicity comes from the API server alone: a job, a
 * delivery id and a device's claim are created if absent (409: someone was first); claims of jobs, failures,
 * intent steps are resourceVersion compare-and-swaps, re-read and re-decided after a 409.
 *
 * A device's claim object is written before its intent is marked claimed and deleted after the intent is
 * settled or abandoned; one left behind by a process that died in between names an intent that is no longer
 * claimed, and the next claim of the device removes it. RBAC: get, list, create, update, delete on secrets.
 */
import { z } from "zod";
import type { Kube } from "../kube/client.js";
import { SecretRecords } from "./kubeRecords.js";
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
  attempts: z.number().int().min(0),
  notBefore: z.number(),
  lastError: z.string().nullable(),
  parkedAt: z.number().nullable(),
  claimedBy: z.string().nullable(),
  claimedAt: z.number().nullable(),
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
const Claim = z.object({ key: z.string() });

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

  claimIntent(key: string, deviceId: number, intent: Record<string, unknown>, now: number): Promise<IntentClaim> {
    return this.r.casLoop<IntentClaim>(`intent ${key}`, async () => {
      const cur = await this.r.read("handler-intent", key, Intent);
      if (cur?.record.state === "settled") return { done: "settled" };
      if (cur?.record.state === "claimed") return { done: "claimed" };
      const lock = await this.r.read("handler-claim", deviceKey(deviceId), Claim);
      if (lock && lock.record.key !== key) {
        const held = await this.r.read("handler-intent", lock.record.key, Intent);
        if (held?.record.state === "claimed") return { done: "busy" };
        await this.r.remove("handler-claim", deviceKey(deviceId), lock.resourceVersion); // left by a process that died
        return "retry";
      }
      if (!lock && !(await this.r.create("handler-claim", deviceKey(deviceId), { key }, { [NODE_LABEL]: String(deviceId) }))) return "retry";
      const rec: HandlerIntentRecord = { key, deviceId, intent, state: "claimed", recordedAt: now };
      const ok = cur ? await this.r.replace("handler-intent", key, rec, cur.resourceVersion, { [NODE_LABEL]: String(deviceId) }) : await this.r.create("handler-intent", key, rec, { [NODE_LABEL]: String(deviceId) });
      return ok ? { done: "claimed" } : "retry";
    });
  }

  /** Deletes the device's claim object if it names `key`. */
  private async unlock(deviceId: number, key: string): Promise<void> {
    const lock = await this.r.read("handler-claim", deviceKey(deviceId), Claim);
    if (lock?.record.key === key) await this.r.remove("handler-claim", deviceKey(deviceId), lock.resourceVersion);
  }

  async abandonIntent(key: string, now: number): Promise<void> {
    const rec = await this.r.casLoop<HandlerIntentRecord | undefined>(`intent ${key}`, async () => {
      const cur = await this.r.read("handler-intent", key, Intent);
      if (cur?.record.state !== "claimed") return { done: undefined };
      const next: HandlerIntentRecord = { ...cur.record, state: "abandoned", recordedAt: now };
      return (await this.r.replace("handler-intent", key, next, cur.resourceVersion, { [NODE_LABEL]: String(next.deviceId) })) ? { done: next } : "retry";
    });
    if (rec) await this.unlock(rec.deviceId, key);
  }

  async settleIntent(key: string, deviceId: number, intent: Record<string, unknown>, effect: Record<string, unknown> | undefined, now: number): Promise<HandlerIntentRecord | undefined> {
    const rec = await this.r.casLoop<HandlerIntentRecord | undefined>(`intent ${key}`, async () => {
      const cur = await this.r.read("handler-intent", key, Intent);
      if (cur?.record.state === "settled") return { done: undefined };
      const next: HandlerIntentRecord = { key, deviceId, intent, ...(effect ? { effect } : {}), state: "settled", recordedAt: now };
      const labels = { [NODE_LABEL]: String(deviceId) };
      const ok = cur ? await this.r.replace("handler-intent", key, next, cur.resourceVersion, labels) : await this.r.create("handler-intent", key, next, labels);
      return ok ? { done: next } : "retry";
    });
    if (rec) await this.unlock(deviceId, key);
    return rec;
  }

  async unsettledIntent(deviceId: number): Promise<HandlerIntentRecord | undefined> {
    const lock = await this.r.read("handler-claim", deviceKey(deviceId), Claim);
    if (!lock) return undefined;
    const held = await this.r.read("handler-intent", lock.record.key, Intent);
    return held?.record.state === "claimed" ? held.record : undefined;
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
