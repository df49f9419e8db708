/**
 * netbox-script's state, behind one small interface (not the attestation server's AttestationStore): its job
 * queue, the webhook delivery ids it remembers for the freshness window, and its intents (claimed, settled,
 * abandoned, keyed by request). Every replica of the handler uses the same store, so no replica holds work the
 * others cannot see. Every "first one wins" is atomic in the backend (SQLite: one statement or an IMMEDIATE
 * transaction; Kubernetes: create-if-absent and resourceVersion compare-and-swap).
 *
 * Backends: SqliteHandlerStore (embedded, one replica) and KubeHandlerStore (Secrets, HA); both pass
 * `handlerStoreContract` in @fleetd/testkit/stateContract.
 */

/** A hint for the handler's worker: "look at device N" (the worker re-reads the device; the hint decides nothing). */
export interface NewHandlerJob {
  /** Unique: enqueueing an id that is queued (or parked) already changes nothing. */
  id: string;
  deviceId: number;
  source: "webhook" | "reconcile";
  /** ISO time of receipt (jobs are taken oldest first). */
  receivedAt: string;
  /** From the webhook body, unverified, for logs only. */
  hintEvent: string | null;
}

export interface HandlerJob extends NewHandlerJob {
  /** Failed runs so far. */
  attempts: number;
  /** Not taken before this time (ms): the backoff after a failure. */
  notBefore: number;
  lastError: string | null;
  /** Set once the job failed `maxAttempts` times: kept for an operator, never taken again. */
  parkedAt: number | null;
}

/** What `failJob` did with a job. */
export type JobFailure = "retry" | "parked" | "lost";

export interface HandlerIntentRecord {
  /** The request (`<trigger>:<device>:<change id>`). */
  key: string;
  deviceId: number;
  /** What was asked (netbox-script's Intent, kept as JSON). */
  intent: Record<string, unknown>;
  /** What was done about it (netbox-script's EffectOutcome, as JSON); only on settled intents. */
  effect?: Record<string, unknown>;
  state: "claimed" | "settled" | "abandoned";
  /** Time of the last step (ms). */
  recordedAt: number;
}

/** What claimIntent found: claimed now (or already, by this key), settled before, or the device holds another claim. */
export type IntentClaim = "claimed" | "settled" | "busy";

export interface HandlerStore {
  /** Durably queue a job (returns after the write is durable); an id queued or parked already is left as it is. */
  enqueueJob(job: NewHandlerJob): Promise<HandlerJob>;
  /** Remember a webhook delivery id until `expiresAt`; false when it is remembered already (a redelivery). */
  rememberDelivery(id: string, expiresAt: number, now: number): Promise<boolean>;
  /**
   * Claim up to `limit` jobs due at `now` (not parked, notBefore ≤ now), oldest first, each unclaimed or claimed
   * longer ago than `staleMs` (its replica died). Two takers never both get one job.
   */
  takeJobs(now: number, claimer: string, staleMs: number, limit: number): Promise<HandlerJob[]>;
  /** The job ran: gone. False when `claimer` no longer held it (nothing changed). */
  completeJob(id: string, claimer: string): Promise<boolean>;
  /**
   * The job failed: attempts + 1, the error, due again at `notBefore`, its claim ended; parked once attempts
   * reach `maxAttempts`. "lost" when `claimer` no longer held it (nothing changed).
   */
  failJob(id: string, claimer: string, error: string, notBefore: number, maxAttempts: number): Promise<JobFailure>;
  /** End claims (all, or `claimer`'s): a worker starting where no other runs. Returns how many. */
  releaseJobs(claimer?: string): Promise<number>;
  /** Queued (not parked) or parked jobs, oldest first (operators, metrics, the reconcile loop). */
  listJobs(which: "pending" | "parked"): Promise<HandlerJob[]>;

  /**
   * Durably mark a request as about to be taken and run. At most one claimed, unsettled request per device:
   * "busy" when the device holds another one; "settled" when this request was settled before (never run again).
   */
  claimIntent(key: string, deviceId: number, intent: Record<string, unknown>, now: number): Promise<IntentClaim>;
  /** A claim that will not run (the request changed before it was taken); other states are left as they are. */
  abandonIntent(key: string, deviceId: number, now: number): Promise<void>;
  /** Settle a request with its effect, once per key (its claim, if any, ends); undefined when settled before. */
  settleIntent(key: string, deviceId: number, intent: Record<string, unknown>, effect: Record<string, unknown> | undefined, now: number): Promise<HandlerIntentRecord | undefined>;
  /** The device's claimed, unsettled request, if any. */
  unsettledIntent(deviceId: number): Promise<HandlerIntentRecord | undefined>;
  /** Settled requests, in the order they were settled. */
  listIntents(): Promise<HandlerIntentRecord[]>;

  close(): Promise<void>;
}
