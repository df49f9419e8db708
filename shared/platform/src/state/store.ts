/**
 * The attestation server's state, behind one interface: sessions and their single-use nonces, AK Names seen
 * (an AK is accepted once), pending (unknown) EKs, install codes (stored by hash only) with the one-time
 * config they release, issued certificate serials, and bootstrap tokens. Every operation that decides
 * "first one wins" is atomic in the backend (compare-and-swap), so two server replicas never both win.
 *
 * Backends: SQLite (embedded, default) here; a Kubernetes-backed one for HA passes the same contract tests.
 */

export type SessionMode = "intake" | "provision" | "attest" | "wipe";

export type { NodeRef } from "../fleet/node.js";
import type { NodeRef } from "../fleet/node.js";
export type SessionState = "challenged" | "evidenced" | "confirmed";

export interface SessionRecord {
  id: string;
  node: NodeRef;
  mode: SessionMode;
  /** The 32-byte nonce, hex. */
  nonce: string;
  /** SHA-256 of the canonical claims, hex. */
  claimsHash: string;
  /** Name(AK), hex. */
  akName: string;
  /** The AK's marshalled TPMT_PUBLIC, hex. */
  akPublic: string;
  /** SHA-256 of each activation secret, hex, in the order of the node's approved EK bindings. */
  secretHashes: string[];
  /** EK bindings proven by this session. */
  ekBindings: string[];
  /** Free-form JSON the protocol keeps between steps (claims, issued certificates…). */
  data: Record<string, unknown>;
  state: SessionState;
  createdAt: number;
  expiresAt: number;
  /**
   * The request working on the session now (claimSession): others find it busy until the claim ends — released
   * (an outage: nothing was spent), committed with the step's outcome (commit), or stale (its process died).
   */
  claimedBy?: string | null;
  claimedAt?: number | null;
}

/** What claimSession found: the claimed session, or why it cannot be claimed. */
export type SessionClaim =
  | { ok: true; session: SessionRecord }
  | { ok: false; why: "unknown" | "expired" | "state" | "busy"; session?: SessionRecord };

/**
 * A durable effect, delivered later by the outbox worker (shared/platform/src/outbox/): a NetBox write (verdict, MACs,
 * status, a journal entry) or a clean-up in a cluster. Written in the same transaction as the step that decided
 * it, so a NetBox outage or a dead process after the decision loses nothing; delivered at least once, made
 * idempotent by its key.
 */
export interface OutboxItem {
  /** Idempotency key, unique: enqueueing a key that is queued already changes nothing. */
  key: string;
  /** Items of one device are delivered in the order they were queued (null: an item ordered on its own). */
  deviceId: number | null;
  /** What to deliver (validated by the outbox when it is delivered; the store keeps it as JSON). */
  effect: Record<string, unknown>;
  /** Not delivered before this time (a compensation waits for the step that may still cancel it). */
  notBefore: number;
}

export interface OutboxEntry extends OutboxItem {
  /** Queue order (within a device, items are delivered in increasing seq). */
  seq: number;
  createdAt: number;
  /** Failed deliveries so far. */
  attempts: number;
  lastError: string | null;
}

/**
 * Everything one protocol step records, in one store transaction: the outcome of its claimed session, what the
 * outcome released (certificates, install code, bootstrap token) and what it must tell NetBox (the outbox).
 * Nothing of it exists without the rest.
 */
export interface StepRecord {
  /** The claimed session moves to `to` with `data`, and its claim ends; the commit fails if the claim was lost. */
  session?: { id: string; claimer: string; to: SessionState; data: Record<string, unknown> };
  /** Issued certificates, valid from now (they replace the void reservations recorded before signing). */
  issued?: IssuedRecord[];
  /** The node's one live install code (any other code of the node is void). */
  installCode?: Omit<InstallCodeRecord, "claimedBy" | "claimedAt">;
  /** The node's bootstrap token (replacing the previous one). */
  bootstrapToken?: { node: NodeRef; tokenId: string; expiresAt: number };
  /** The install code this claimer delivered: deleted, its config blanked; the commit fails if the claim was lost. */
  delivered?: { codeHash: string; claimer: string };
  /** Effects to deliver (NetBox writes, clean-ups). */
  outbox?: OutboxItem[];
  /** Outbox keys this step makes unnecessary (a compensation queued before an effect outside the store). */
  cancel?: string[];
  /** The node's runtime verdict, quarantine latch and cordon (RuntimeUpdate), changed with the step. */
  runtime?: RuntimeUpdate;
}

/**
 * A node's runtime attestation as fleetd decided it (talos-config-server/README.md "Quarantine"). The
 * authoritative record of the quarantine latch: NetBox shows the verdict, but NetBox users can edit it.
 */
export interface RuntimeRecord {
  node: NodeRef;
  /** The latest runtime verdict and its time (ms); absent until the first one. */
  verdict?: { verdict: "pass" | "fail"; at: number };
  lastPassAt: number | null;
  /** The latch: set when an authenticated runtime quote of a worker missed its profile; cleared only by an operator's passing attest. */
  quarantine: { at: number; why: string } | null;
  /** fleetd cordoned the Node (taint + unschedulable) and has not lifted it yet (lifted at the next runtime pass). */
  cordoned: boolean;
}

/** A change of a node's RuntimeRecord (applied atomically with its step; applying it twice is applying it once). */
export interface RuntimeUpdate {
  node: NodeRef;
  /** A runtime verdict at `at` (a pass also sets lastPassAt). */
  verdict?: { verdict: "pass" | "fail"; at: number };
  /** `latch` quarantines (an existing latch is kept as it was); `release` clears the latch. */
  quarantine?: { latch: { at: number; why: string } } | "release";
  cordoned?: boolean;
}

/** The record after `u` (every backend applies updates with this one function). */
export function applyRuntimeUpdate(cur: RuntimeRecord | undefined, u: RuntimeUpdate): RuntimeRecord {
  const base: RuntimeRecord = cur ?? { node: u.node, lastPassAt: null, quarantine: null, cordoned: false };
  const next: RuntimeRecord = { ...base, node: u.node };
  if (u.verdict) {
    next.verdict = u.verdict;
    if (u.verdict.verdict === "pass") next.lastPassAt = Math.max(base.lastPassAt ?? 0, u.verdict.at);
  }
  if (u.quarantine === "release") next.quarantine = null;
  else if (u.quarantine) next.quarantine = base.quarantine ?? u.quarantine.latch;
  if (u.cordoned !== undefined) next.cordoned = u.cordoned;
  return next;
}

export interface PendingEk {
  binding: string;
  serial: string;
  macs: string[];
  sourceAddress: string;
  firstSeen: number;
  lastSeen: number;
  count: number;
}

export interface InstallCodeRecord {
  /** SHA-256 of the code, hex. */
  codeHash: string;
  node: NodeRef;
  uuid: string;
  sourceAddress: string;
  config: string;
  expiresAt: number;
  /** Set while a response is being sent; cleared on close, the row deleted on finish. */
  claimedBy: string | null;
  claimedAt: number | null;
}

export interface IssuedRecord {
  serial: string;
  node: NodeRef;
  kind: "ldevid" | "lak";
  generation: number;
  notAfter: number;
  issuedAt: number;
  /** The certificate (DER, hex): a later session whose key is already certified gets it again instead of a new one. */
  der: string;
  /** The certified key's TPMT_PUBLIC, hex. */
  keyPublic: string;
  /**
   * Set when the step that issued it did not complete (a dependency outage after the signature, before the
   * machine had its answer): the certificate was never delivered and counts for nothing (renewal, SPIRE). It
   * stays listed, with why.
   */
  voided?: { at: number; why: string };
}

/** A per-key failure budget kept in the store (shared by every replica): fixed windows. */
export interface LimitCharge {
  /** True while the key is within its budget after this charge. */
  allowed: boolean;
  count: number;
}

export interface AttestationStore {
  /** Create a session; fails if the id exists. */
  createSession(s: SessionRecord): Promise<void>;
  getSession(id: string): Promise<SessionRecord | undefined>;
  /** The session opened for this AK (an AK opens one session only), if it is still there. */
  sessionByAkName(akName: string): Promise<SessionRecord | undefined>;
  /**
   * Move a session from `from` to `to` (with updated data) iff it is in `from` and not expired at `now`.
   * Returns false when another request got there first, the session is gone, or it expired.
   */
  transitionSession(id: string, from: SessionState, to: SessionState, data: Record<string, unknown>, now: number): Promise<boolean>;
  /**
   * Claim a session in state `from` for one request: ok when it is unexpired, in `from`, and unclaimed (or its
   * claim is older than `staleMs`: the process holding it died). Nothing is spent by a claim.
   */
  claimSession(id: string, from: SessionState, claimer: string, now: number, staleMs: number): Promise<SessionClaim>;
  /** End a claim without an outcome (a dependency outage: the session is usable again). */
  releaseSession(id: string, claimer: string): Promise<void>;
  /**
   * End every claim and request lock — session and outbox claims, and failure budgets whose key starts with
   * `lock:` (a single server at its start: no request of a previous process is still running).
   */
  releaseAllClaims(): Promise<number>;
  /** Record a step's outcome atomically (StepRecord); false when a claim it names was lost, and nothing changed. */
  commit(step: StepRecord, now: number): Promise<boolean>;
  deleteSession(id: string): Promise<void>;
  /** Remove sessions expired at `now`; returns how many. */
  expireSessions(now: number): Promise<number>;

  /** Record an AK Name; false if it was seen before (an AK is used for one session only). */
  recordAkName(akName: string, deviceId: number, now: number): Promise<boolean>;

  /**
   * Record (or refresh) a pending EK; a new binding is added only while fewer than `max` are pending (false:
   * the table is full and the binding was not recorded; a known binding is always refreshed).
   */
  recordPendingEk(p: Omit<PendingEk, "firstSeen" | "lastSeen" | "count">, now: number, max: number): Promise<boolean>;
  listPendingEks(): Promise<PendingEk[]>;
  deletePendingEk(binding: string): Promise<void>;

  putInstallCode(r: Omit<InstallCodeRecord, "claimedBy" | "claimedAt">): Promise<void>;
  /** Atomically claim the config for `codeHash` if unclaimed and unexpired (or its claim is older than `staleMs`). */
  claimInstallCode(codeHash: string, claimer: string, now: number, staleMs: number): Promise<InstallCodeRecord | undefined>;
  /** Release a claim (the response was not completed). */
  releaseInstallCode(codeHash: string, claimer: string): Promise<void>;
  /** Delete the code after the complete response; true if this claimer held it. */
  finishInstallCode(codeHash: string, claimer: string): Promise<boolean>;
  hasInstallCodeFor(deviceId: number, now: number): Promise<boolean>;
  /** Delete every install code of a node (decommission, a node gone from NetBox); how many. */
  voidInstallCodes(deviceId: number): Promise<number>;
  /**
   * Codes that expired undelivered at `now`, removed and returned (the node's provision failed), each with the
   * outbox items `effects` gives for it, in the same transaction.
   */
  takeExpiredInstallCodes(now: number, effects?: (r: InstallCodeRecord) => OutboxItem[]): Promise<InstallCodeRecord[]>;

  /** Record an issued certificate (or, with `voided`, a reservation before signing: commit makes it valid). */
  recordIssued(c: IssuedRecord): Promise<void>;
  /** The next LDevID generation for a node (1 for the first). Atomic. */
  nextGeneration(deviceId: number): Promise<number>;
  listIssued(deviceId: number): Promise<IssuedRecord[]>;
  /** The issued certificate (or reservation) with this serial (hex, as recorded), if any. */
  issuedBySerial(serial: string): Promise<IssuedRecord | undefined>;

  /** The node's runtime verdict, quarantine latch and cordon (changed only through commit's `runtime`). */
  getRuntime(deviceId: number): Promise<RuntimeRecord | undefined>;
  /** Mark issued certificates void (IssuedRecord.voided); a serial not recorded, or already void, is left as it is. */
  voidIssued(serials: string[], at: number, why: string): Promise<void>;

  /** Bootstrap token id rendered for a node (for the CSR gate). */
  setBootstrapToken(node: NodeRef, tokenId: string, expiresAt: number): Promise<void>;
  getBootstrapToken(deviceId: number): Promise<{ tokenId: string; expiresAt: number } | undefined>;
  nodeForBootstrapToken(tokenId: string): Promise<NodeRef | undefined>;
  deleteBootstrapToken(deviceId: number): Promise<void>;

  /**
   * Charge one failure to `key` atomically (the charge comes before the work it limits, so concurrent requests
   * cannot all pass a check made before any of them failed); `allowed` is false once more than `max` were
   * charged in the current window of `windowMs`.
   */
  chargeLimit(key: string, now: number, windowMs: number, max: number): Promise<LimitCharge>;
  /** Take back one charge (the attempt succeeded). */
  refundLimit(key: string, now: number, windowMs: number): Promise<void>;

  /** Record a single-use token (e.g. an HA request id) until `expiresAt`; false when it was seen before. */
  recordOnce(token: string, expiresAt: number, now: number): Promise<boolean>;

  /** Queue outbox items on their own (one transaction); a key already queued is left as it is. */
  enqueue(items: OutboxItem[], now: number): Promise<void>;
  /**
   * Claim up to `limit` items due at `now` for delivery: of each device only its oldest item (order within a
   * device), unclaimed or claimed longer ago than `staleMs`; with `deviceId`, only that device's. `due` (default
   * `now`) moves the horizon of notBefore (someone waits for the device's items: their retry backoff is cut short).
   */
  claimOutbox(now: number, claimer: string, staleMs: number, limit: number, deviceId?: number, due?: number): Promise<OutboxEntry[]>;
  /**
   * Claim `deviceId`'s head run: its oldest item and the items queued after it, in queue order, as long as each
   * is claimable (unclaimed, or claimed longer ago than `staleMs`) and due by `due` (default `now`); at most
   * `limit`. The run stops at the first item that is not (so a claimed run is always a prefix of the device's
   * queue). One claimer then delivers them in order, several in one request where it can (journal entries).
   */
  claimOutboxRun(now: number, claimer: string, staleMs: number, deviceId: number, limit: number, due?: number): Promise<OutboxEntry[]>;
  /** The item was delivered: gone. */
  completeOutbox(key: string, claimer: string): Promise<void>;
  /** The delivery failed: counted, with the error, and due again at `notBefore`. */
  deferOutbox(key: string, claimer: string, notBefore: number, error: string): Promise<void>;
  /** Every queued item (or `deviceId`'s), in queue order (the gates, metrics, tests, the CLI). */
  listOutbox(deviceId?: number): Promise<OutboxEntry[]>;
  /** Finish what a process that died mid-commit left half-applied (a backend without transactions); idempotent. */
  recover(now: number): Promise<void>;

  close(): Promise<void>;
}
