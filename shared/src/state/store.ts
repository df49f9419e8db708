/**
 * The attestation server's state, behind one interface: sessions and their single-use nonces, AK Names seen
 * (an AK is accepted once), pending (unknown) EKs, install codes (stored by hash only) with the one-time
 * config they release, issued certificate serials, and bootstrap tokens. Every operation that decides
 * "first one wins" is atomic in the backend (compare-and-swap), so two server replicas never both win.
 *
 * Backends: SQLite (embedded, default) here; a Kubernetes-backed one for HA passes the same contract tests.
 */

export type SessionMode = "intake" | "provision" | "attest" | "wipe";

/**
 * A node as the state knows it: the NetBox device ID recorded when the apply account created it (the key of
 * everything per node here) and its name then (for people, certificates and the CSR check). A rename in NetBox
 * never moves state from one machine to another.
 */
export interface NodeRef {
  deviceId: number;
  name: string;
}
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
  /**
   * Move a session from `from` to `to` (with updated data) iff it is in `from` and not expired at `now`.
   * Returns false when another request got there first, the session is gone, or it expired.
   */
  transitionSession(id: string, from: SessionState, to: SessionState, data: Record<string, unknown>, now: number): Promise<boolean>;
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
  /** Codes that expired undelivered at `now`, removed and returned (the node's provision failed). */
  takeExpiredInstallCodes(now: number): Promise<InstallCodeRecord[]>;

  recordIssued(c: IssuedRecord): Promise<void>;
  /** The next LDevID generation for a node (1 for the first). Atomic. */
  nextGeneration(deviceId: number): Promise<number>;
  listIssued(deviceId: number): Promise<IssuedRecord[]>;
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

  close(): Promise<void>;
}
