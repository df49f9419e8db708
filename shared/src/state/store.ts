/**
 * The attestation server's state, behind one interface: sessions and their single-use nonces, AK Names seen
 * (an AK is accepted once), pending (unknown) EKs, install codes (stored by hash only) with the one-time
 * config they release, issued certificate serials, and bootstrap tokens. Every operation that decides
 * "first one wins" is atomic in the backend (compare-and-swap), so two server replicas never both win.
 *
 * Backends: SQLite (embedded, default) here; a Kubernetes-backed one for HA passes the same contract tests.
 */

export type SessionMode = "intake" | "provision" | "attest" | "wipe";
export type SessionState = "challenged" | "evidenced" | "confirmed";

export interface SessionRecord {
  id: string;
  node: string;
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
  node: string;
  uuid: string;
  sourceAddress: string;
  config: string;
  expiresAt: number;
  /** Set while a response is being sent; cleared on close, the row deleted on finish. */
  claimedBy: string | null;
  claimedAt: number | null;
}

export interface IssuedCertificate {
  serial: string;
  node: string;
  kind: "ldevid" | "lak";
  generation: number;
  notAfter: number;
  issuedAt: number;
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
  recordAkName(akName: string, node: string, now: number): Promise<boolean>;

  recordPendingEk(p: Omit<PendingEk, "firstSeen" | "lastSeen" | "count">, now: number): Promise<void>;
  listPendingEks(): Promise<PendingEk[]>;
  deletePendingEk(binding: string): Promise<void>;

  putInstallCode(r: Omit<InstallCodeRecord, "claimedBy" | "claimedAt">): Promise<void>;
  /** Atomically claim the config for `codeHash` if unclaimed and unexpired (or its claim is older than `staleMs`). */
  claimInstallCode(codeHash: string, claimer: string, now: number, staleMs: number): Promise<InstallCodeRecord | undefined>;
  /** Release a claim (the response was not completed). */
  releaseInstallCode(codeHash: string, claimer: string): Promise<void>;
  /** Delete the code after the complete response; true if this claimer held it. */
  finishInstallCode(codeHash: string, claimer: string): Promise<boolean>;
  hasInstallCodeFor(node: string, now: number): Promise<boolean>;

  recordIssued(c: IssuedCertificate): Promise<void>;
  /** The next LDevID generation for a node (1 for the first). Atomic. */
  nextGeneration(node: string): Promise<number>;
  listIssued(node: string): Promise<IssuedCertificate[]>;

  /** Bootstrap token id rendered for a node (for the CSR gate). */
  setBootstrapToken(node: string, tokenId: string, expiresAt: number): Promise<void>;
  getBootstrapToken(node: string): Promise<{ tokenId: string; expiresAt: number } | undefined>;
  nodeForBootstrapToken(tokenId: string): Promise<string | undefined>;
  deleteBootstrapToken(node: string): Promise<void>;

  close(): Promise<void>;
}
