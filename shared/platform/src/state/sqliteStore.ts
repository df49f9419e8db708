/**
 * The embedded SQLite backend of AttestationStore (better-sqlite3; WAL; every CAS is one UPDATE … WHERE).
 *
 * Secrets at rest: the rows hold rendered Talos configs (cluster-wide trustd token and cluster secret, the
 * node's bootstrap token, TPM key blobs) until delivery. So the database and its `-wal`/`-shm` files are
 * created 0600 in a directory that must be 0700 (the store refuses to open on a path others can read), pages are
 * zeroed when rows go (`secure_delete`), and a delivered or voided config is blanked before its row is deleted
 * and the WAL is checkpointed (TRUNCATE), so no copy of it stays in the database file or the WAL. The checkpoint
 * follows within SCRUB_CHECKPOINT_MS, one for every config gone in that time, and at close(): a checkpoint per
 * delivery made 200 concurrent config fetches wait for each other's (measured: tests/src/bench/talosConfig.ts).
 */
import type Database from "better-sqlite3";
import { openStateDb, StateFileError } from "./sqliteFile.js";
import { applyRuntimeUpdate, type AttestationStore, type InstallCodeRecord, type IssuedRecord, type LimitCharge, type NodeRef, type OutboxEntry, type OutboxItem, type PendingEk, type RuntimeRecord, type RuntimeUpdate, type SessionClaim, type SessionRecord, type SessionState, type StepRecord } from "./store.js";

/**
 * The schema this code writes (PRAGMA user_version). Version 1 keyed nodes by name; it is refused, not migrated.
 * Version 3 added `issued.voided_at`/`voided_why`; version 4 session claims and the outbox (older files are
 * migrated in place). The `runtime` table (runtime verdicts, quarantine latches) is new in version 4 files too:
 * CREATE TABLE IF NOT EXISTS adds it at open.
 */
const SCHEMA_VERSION = 4;

/** The longest a blanked config's WAL frames wait for their checkpoint (the configs are sealed to their codes). */
export const SCRUB_CHECKPOINT_MS = 100;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS sessions (
  id TEXT PRIMARY KEY, device_id INTEGER NOT NULL, node TEXT NOT NULL, mode TEXT NOT NULL, nonce TEXT NOT NULL,
  claims_hash TEXT NOT NULL, ak_name TEXT NOT NULL, ak_public TEXT NOT NULL, secret_hashes TEXT NOT NULL,
  ek_bindings TEXT NOT NULL, data TEXT NOT NULL, state TEXT NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
  claimed_by TEXT, claimed_at INTEGER);
CREATE INDEX IF NOT EXISTS sessions_ak_name ON sessions (ak_name);
CREATE TABLE IF NOT EXISTS ak_names (ak_name TEXT PRIMARY KEY, device_id INTEGER NOT NULL, seen_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS pending_eks (binding TEXT PRIMARY KEY, serial TEXT NOT NULL, macs TEXT NOT NULL,
  source_address TEXT NOT NULL, first_seen INTEGER NOT NULL, last_seen INTEGER NOT NULL, count INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS install_codes (code_hash TEXT PRIMARY KEY, device_id INTEGER NOT NULL, node TEXT NOT NULL,
  uuid TEXT NOT NULL, source_address TEXT NOT NULL, config TEXT NOT NULL, expires_at INTEGER NOT NULL, claimed_by TEXT, claimed_at INTEGER);
CREATE INDEX IF NOT EXISTS install_codes_device ON install_codes (device_id);
CREATE TABLE IF NOT EXISTS issued (serial TEXT PRIMARY KEY, device_id INTEGER NOT NULL, node TEXT NOT NULL, kind TEXT NOT NULL,
  generation INTEGER NOT NULL, not_after INTEGER NOT NULL, issued_at INTEGER NOT NULL, der TEXT NOT NULL, key_public TEXT NOT NULL,
  voided_at INTEGER, voided_why TEXT);
CREATE INDEX IF NOT EXISTS issued_device ON issued (device_id);
CREATE TABLE IF NOT EXISTS generations (device_id INTEGER PRIMARY KEY, last INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS bootstrap_tokens (device_id INTEGER PRIMARY KEY, node TEXT NOT NULL, token_id TEXT NOT NULL UNIQUE, expires_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS limits (key TEXT PRIMARY KEY, window_start INTEGER NOT NULL, count INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS once_tokens (token TEXT PRIMARY KEY, expires_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, device_id INTEGER,
  effect TEXT NOT NULL, not_before INTEGER NOT NULL, created_at INTEGER NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
  last_error TEXT, claimed_by TEXT, claimed_at INTEGER);
CREATE INDEX IF NOT EXISTS outbox_device ON outbox (device_id, seq);
CREATE TABLE IF NOT EXISTS runtime (device_id INTEGER PRIMARY KEY, record TEXT NOT NULL);
`;

/** In-place migrations from older schema versions (each leaves the file at the next version). */
const MIGRATIONS: Record<number, string> = {
  2: `ALTER TABLE issued ADD COLUMN voided_at INTEGER; ALTER TABLE issued ADD COLUMN voided_why TEXT;`,
  3: `ALTER TABLE sessions ADD COLUMN claimed_by TEXT; ALTER TABLE sessions ADD COLUMN claimed_at INTEGER;`,
};

export { StateFileError } from "./sqliteFile.js";

interface SessionRow {
  id: string;
  device_id: number;
  node: string;
  mode: string;
  nonce: string;
  claims_hash: string;
  ak_name: string;
  ak_public: string;
  secret_hashes: string;
  ek_bindings: string;
  data: string;
  state: string;
  created_at: number;
  expires_at: number;
  claimed_by: string | null;
  claimed_at: number | null;
}
interface CodeRow {
  code_hash: string;
  device_id: number;
  node: string;
  uuid: string;
  source_address: string;
  config: string;
  expires_at: number;
  claimed_by: string | null;
  claimed_at: number | null;
}
interface IssuedRow {
  serial: string;
  device_id: number;
  node: string;
  kind: string;
  generation: number;
  not_after: number;
  issued_at: number;
  der: string;
  key_public: string;
  voided_at: number | null;
  voided_why: string | null;
}

const ref = (r: { device_id: number; node: string }): NodeRef => ({ deviceId: r.device_id, name: r.node });

const toSession = (r: SessionRow): SessionRecord => ({
  id: r.id,
  node: ref(r),
  mode: r.mode as SessionRecord["mode"],
  nonce: r.nonce,
  claimsHash: r.claims_hash,
  akName: r.ak_name,
  akPublic: r.ak_public,
  secretHashes: JSON.parse(r.secret_hashes) as string[],
  ekBindings: JSON.parse(r.ek_bindings) as string[],
  data: JSON.parse(r.data) as Record<string, unknown>,
  state: r.state as SessionState,
  createdAt: r.created_at,
  expiresAt: r.expires_at,
  claimedBy: r.claimed_by,
  claimedAt: r.claimed_at,
});
interface OutboxRow {
  claimed_by: string | null;
  claimed_at: number | null;
  seq: number;
  key: string;
  device_id: number | null;
  effect: string;
  not_before: number;
  created_at: number;
  attempts: number;
  last_error: string | null;
}
const toOutbox = (r: OutboxRow): OutboxEntry => ({
  seq: r.seq,
  key: r.key,
  deviceId: r.device_id,
  effect: JSON.parse(r.effect) as Record<string, unknown>,
  notBefore: r.not_before,
  createdAt: r.created_at,
  attempts: r.attempts,
  lastError: r.last_error,
});
const toCode = (r: CodeRow): InstallCodeRecord => ({
  codeHash: r.code_hash,
  node: ref(r),
  uuid: r.uuid,
  sourceAddress: r.source_address,
  config: r.config,
  expiresAt: r.expires_at,
  claimedBy: r.claimed_by,
  claimedAt: r.claimed_at,
});
const toIssued = (r: IssuedRow): IssuedRecord => ({
  serial: r.serial,
  node: ref(r),
  kind: r.kind as IssuedRecord["kind"],
  generation: r.generation,
  notAfter: r.not_after,
  issuedAt: r.issued_at,
  der: r.der,
  keyPublic: r.key_public,
  ...(r.voided_at !== null ? { voided: { at: r.voided_at, why: r.voided_why ?? "" } } : {}),
});

export class SqliteAttestationStore implements AttestationStore {
  private readonly db: Database.Database;
  /** The checkpoint after configs were blanked and deleted, when one is due (see the file's comment). */
  private checkpointTimer: NodeJS.Timeout | undefined;

  /**
   * `path` is a file (created 0600 if missing) in a directory only its owner can read, or ":memory:". Throws
   * StateFileError when the directory or an existing database file is readable by others, and when the file
   * holds an older schema.
   */
  constructor(path: string) {
    const { db, version, hasTables } = openStateDb(path, ["foreign_keys = ON"], "sessions");
    this.db = db;
    if (hasTables && MIGRATIONS[version] !== undefined) {
      this.db.transaction(() => {
        for (let v = version; v < SCHEMA_VERSION; v++) this.db.exec(MIGRATIONS[v] ?? "");
        this.db.pragma(`user_version = ${SCHEMA_VERSION}`);
      })();
    } else if (hasTables && version !== SCHEMA_VERSION) {
      this.db.close();
      throw new StateFileError(
        `${path}: the state database has schema version ${version}, this fleetd needs ${SCHEMA_VERSION} (state is now keyed by NetBox device ID). ` +
          "Stop the server, let open sessions and install codes expire (or re-provision their nodes), move the file aside and start again.",
      );
    }
    this.db.exec(SCHEMA);
    this.db.pragma(`user_version = ${SCHEMA_VERSION}`);
  }

  async createSession(s: SessionRecord): Promise<void> {
    this.db
      .prepare(
        `INSERT INTO sessions (id,device_id,node,mode,nonce,claims_hash,ak_name,ak_public,secret_hashes,ek_bindings,data,state,created_at,expires_at)
         VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
      )
      .run(s.id, s.node.deviceId, s.node.name, s.mode, s.nonce, s.claimsHash, s.akName, s.akPublic, JSON.stringify(s.secretHashes), JSON.stringify(s.ekBindings), JSON.stringify(s.data), s.state, s.createdAt, s.expiresAt);
  }
  async getSession(id: string): Promise<SessionRecord | undefined> {
    const r = this.db.prepare(`SELECT * FROM sessions WHERE id = ?`).get(id) as SessionRow | undefined;
    return r ? toSession(r) : undefined;
  }
  async sessionByAkName(akName: string): Promise<SessionRecord | undefined> {
    const r = this.db.prepare(`SELECT * FROM sessions WHERE ak_name = ? ORDER BY created_at LIMIT 1`).get(akName) as SessionRow | undefined;
    return r ? toSession(r) : undefined;
  }
  async transitionSession(id: string, from: SessionState, to: SessionState, data: Record<string, unknown>, now: number): Promise<boolean> {
    const res = this.db
      .prepare(`UPDATE sessions SET state = ?, data = ? WHERE id = ? AND state = ? AND expires_at > ?`)
      .run(to, JSON.stringify(data), id, from, now);
    return res.changes === 1;
  }
  async deleteSession(id: string): Promise<void> {
    this.db.prepare(`DELETE FROM sessions WHERE id = ?`).run(id);
  }
  async claimSession(id: string, from: SessionState, claimer: string, now: number, staleMs: number): Promise<SessionClaim> {
    const res = this.db
      .prepare(
        `UPDATE sessions SET claimed_by = ?, claimed_at = ?
         WHERE id = ? AND state = ? AND expires_at > ? AND (claimed_by IS NULL OR claimed_at <= ?)`,
      )
      .run(claimer, now, id, from, now, now - staleMs);
    const row = this.db.prepare(`SELECT * FROM sessions WHERE id = ?`).get(id) as SessionRow | undefined;
    if (!row) return { ok: false, why: "unknown" };
    const session = toSession(row);
    if (res.changes === 1) return { ok: true, session };
    if (!(row.expires_at > now)) return { ok: false, why: "expired", session };
    return { ok: false, why: row.state !== from ? "state" : "busy", session };
  }
  async releaseSession(id: string, claimer: string): Promise<void> {
    this.db.prepare(`UPDATE sessions SET claimed_by = NULL, claimed_at = NULL WHERE id = ? AND claimed_by = ?`).run(id, claimer);
  }
  async releaseAllClaims(): Promise<number> {
    const n =
      this.db.prepare(`UPDATE sessions SET claimed_by = NULL, claimed_at = NULL WHERE claimed_by IS NOT NULL`).run().changes +
      this.db.prepare(`DELETE FROM limits WHERE key LIKE 'lock:%' AND count > 0`).run().changes;
    // an outbox item a dead process held may have been delivered: its next delivery checks (attempts > 0)
    return n + this.db.prepare(`UPDATE outbox SET claimed_by = NULL, claimed_at = NULL, attempts = attempts + 1 WHERE claimed_by IS NOT NULL`).run().changes;
  }
  async commit(step: StepRecord, now: number): Promise<boolean> {
    let scrubbed = false;
    const tx = this.db.transaction((): boolean => {
      if (step.session) {
        const { id, claimer, to, data } = step.session;
        const moved = this.db
          .prepare(`UPDATE sessions SET state = ?, data = ?, claimed_by = NULL, claimed_at = NULL WHERE id = ? AND claimed_by = ?`)
          .run(to, JSON.stringify(data), id, claimer).changes;
        if (moved !== 1) return false;
      }
      if (step.delivered) {
        const { codeHash, claimer } = step.delivered;
        this.db.prepare(`UPDATE install_codes SET config = '' WHERE code_hash = ? AND claimed_by = ?`).run(codeHash, claimer);
        if (this.db.prepare(`DELETE FROM install_codes WHERE code_hash = ? AND claimed_by = ?`).run(codeHash, claimer).changes !== 1) {
          throw new LostClaim();
        }
        scrubbed = true;
      }
      for (const c of step.issued ?? []) this.upsertIssued(c);
      if (step.runtime) this.updateRuntime(step.runtime);
      if (step.installCode) {
        const r = step.installCode;
        this.db.prepare(`UPDATE install_codes SET config = '' WHERE device_id = ?`).run(r.node.deviceId);
        scrubbed ||= this.db.prepare(`DELETE FROM install_codes WHERE device_id = ?`).run(r.node.deviceId).changes > 0;
        this.db
          .prepare(`INSERT INTO install_codes (code_hash,device_id,node,uuid,source_address,config,expires_at) VALUES (?,?,?,?,?,?,?)`)
          .run(r.codeHash, r.node.deviceId, r.node.name, r.uuid, r.sourceAddress, r.config, r.expiresAt);
      }
      if (step.bootstrapToken) this.putToken(step.bootstrapToken.node, step.bootstrapToken.tokenId, step.bootstrapToken.expiresAt);
      this.insertOutbox(step.outbox ?? [], now);
      for (const key of step.cancel ?? []) this.db.prepare(`DELETE FROM outbox WHERE key = ?`).run(key);
      return true;
    });
    let ok: boolean;
    try {
      ok = tx.immediate();
    } catch (e) {
      if (e instanceof LostClaim) return false;
      throw e;
    }
    if (ok && scrubbed) this.checkpointSoon();
    return ok;
  }
  async expireSessions(now: number): Promise<number> {
    const n = this.db.prepare(`DELETE FROM sessions WHERE expires_at <= ?`).run(now).changes;
    this.db.prepare(`DELETE FROM once_tokens WHERE expires_at <= ?`).run(now);
    return n;
  }

  async recordAkName(akName: string, deviceId: number, now: number): Promise<boolean> {
    return this.db.prepare(`INSERT OR IGNORE INTO ak_names (ak_name,device_id,seen_at) VALUES (?,?,?)`).run(akName, deviceId, now).changes === 1;
  }

  async recordPendingEk(p: Omit<PendingEk, "firstSeen" | "lastSeen" | "count">, now: number, max: number): Promise<boolean> {
    const tx = this.db.transaction((): boolean => {
      const known = this.db.prepare(`SELECT 1 FROM pending_eks WHERE binding = ?`).get(p.binding) !== undefined;
      if (!known && (this.db.prepare(`SELECT count(*) AS n FROM pending_eks`).get() as { n: number }).n >= max) return false;
      this.db
        .prepare(
          `INSERT INTO pending_eks (binding,serial,macs,source_address,first_seen,last_seen,count) VALUES (?,?,?,?,?,?,1)
           ON CONFLICT(binding) DO UPDATE SET serial=excluded.serial, macs=excluded.macs, source_address=excluded.source_address,
             last_seen=excluded.last_seen, count=count+1`,
        )
        .run(p.binding, p.serial, JSON.stringify(p.macs), p.sourceAddress, now, now);
      return true;
    });
    return tx.immediate();
  }
  async listPendingEks(): Promise<PendingEk[]> {
    const rows = this.db.prepare(`SELECT * FROM pending_eks ORDER BY first_seen`).all() as {
      binding: string;
      serial: string;
      macs: string;
      source_address: string;
      first_seen: number;
      last_seen: number;
      count: number;
    }[];
    return rows.map((r) => ({
      binding: r.binding,
      serial: r.serial,
      macs: JSON.parse(r.macs) as string[],
      sourceAddress: r.source_address,
      firstSeen: r.first_seen,
      lastSeen: r.last_seen,
      count: r.count,
    }));
  }
  async deletePendingEk(binding: string): Promise<void> {
    this.db.prepare(`DELETE FROM pending_eks WHERE binding = ?`).run(binding);
  }

  /** Blank the configs of the matching rows, delete them, and push the WAL into the (zeroed) database file. */
  private scrub(where: string, ...args: (string | number)[]): number {
    const tx = this.db.transaction(() => {
      this.db.prepare(`UPDATE install_codes SET config = '' WHERE ${where}`).run(...args);
      return this.db.prepare(`DELETE FROM install_codes WHERE ${where}`).run(...args).changes;
    });
    const n = tx();
    if (n > 0) this.checkpointSoon();
    return n;
  }

  /** The WAL into the database file and truncated, within SCRUB_CHECKPOINT_MS: one checkpoint for every scrub until then. */
  private checkpointSoon(): void {
    if (this.checkpointTimer) return;
    this.checkpointTimer = setTimeout(() => this.checkpointNow(), SCRUB_CHECKPOINT_MS);
    this.checkpointTimer.unref();
  }

  private checkpointNow(): void {
    clearTimeout(this.checkpointTimer);
    this.checkpointTimer = undefined;
    this.db.pragma("wal_checkpoint(TRUNCATE)");
  }

  async putInstallCode(r: Omit<InstallCodeRecord, "claimedBy" | "claimedAt">): Promise<void> {
    // One live code per node: a new provision replaces the previous code.
    this.scrub(`device_id = ?`, r.node.deviceId);
    this.db
      .prepare(`INSERT INTO install_codes (code_hash,device_id,node,uuid,source_address,config,expires_at) VALUES (?,?,?,?,?,?,?)`)
      .run(r.codeHash, r.node.deviceId, r.node.name, r.uuid, r.sourceAddress, r.config, r.expiresAt);
  }
  async claimInstallCode(codeHash: string, claimer: string, now: number, staleMs: number): Promise<InstallCodeRecord | undefined> {
    const res = this.db
      .prepare(
        `UPDATE install_codes SET claimed_by = ?, claimed_at = ?
         WHERE code_hash = ? AND expires_at > ? AND (claimed_by IS NULL OR claimed_at <= ?)`,
      )
      .run(claimer, now, codeHash, now, now - staleMs);
    if (res.changes !== 1) return undefined;
    const row = this.db.prepare(`SELECT * FROM install_codes WHERE code_hash = ?`).get(codeHash) as CodeRow | undefined;
    return row ? toCode(row) : undefined;
  }
  async releaseInstallCode(codeHash: string, claimer: string): Promise<void> {
    this.db.prepare(`UPDATE install_codes SET claimed_by = NULL, claimed_at = NULL WHERE code_hash = ? AND claimed_by = ?`).run(codeHash, claimer);
  }
  async finishInstallCode(codeHash: string, claimer: string): Promise<boolean> {
    return this.scrub(`code_hash = ? AND claimed_by = ?`, codeHash, claimer) === 1;
  }
  async hasInstallCodeFor(deviceId: number, now: number): Promise<boolean> {
    return this.db.prepare(`SELECT 1 FROM install_codes WHERE device_id = ? AND expires_at > ?`).get(deviceId, now) !== undefined;
  }
  async voidInstallCodes(deviceId: number): Promise<number> {
    return this.scrub(`device_id = ?`, deviceId);
  }
  async takeExpiredInstallCodes(now: number, effects?: (r: InstallCodeRecord) => OutboxItem[]): Promise<InstallCodeRecord[]> {
    const tx = this.db.transaction(() => {
      const rows = (this.db.prepare(`SELECT * FROM install_codes WHERE expires_at <= ?`).all(now) as CodeRow[]).map(toCode);
      if (rows.length === 0) return rows;
      this.db.prepare(`UPDATE install_codes SET config = '' WHERE expires_at <= ?`).run(now);
      this.db.prepare(`DELETE FROM install_codes WHERE expires_at <= ?`).run(now);
      for (const r of rows) this.insertOutbox(effects?.(r) ?? [], now);
      return rows;
    });
    const rows = tx.immediate();
    if (rows.length > 0) this.checkpointSoon();
    return rows.map((r) => ({ ...r, config: "" }));
  }

  async recordIssued(c: IssuedRecord): Promise<void> {
    this.db
      .prepare(`INSERT INTO issued (serial,device_id,node,kind,generation,not_after,issued_at,der,key_public,voided_at,voided_why) VALUES (?,?,?,?,?,?,?,?,?,?,?)`)
      .run(c.serial, c.node.deviceId, c.node.name, c.kind, c.generation, c.notAfter, c.issuedAt, c.der, c.keyPublic, c.voided?.at ?? null, c.voided?.why ?? null);
  }
  /** A reservation (recordIssued with `voided`) becomes the issued certificate; a serial not reserved is inserted. */
  private upsertIssued(c: IssuedRecord): void {
    this.db
      .prepare(
        `INSERT INTO issued (serial,device_id,node,kind,generation,not_after,issued_at,der,key_public,voided_at,voided_why) VALUES (?,?,?,?,?,?,?,?,?,?,?)
         ON CONFLICT(serial) DO UPDATE SET device_id=excluded.device_id, node=excluded.node, kind=excluded.kind, generation=excluded.generation,
           not_after=excluded.not_after, issued_at=excluded.issued_at, der=excluded.der, key_public=excluded.key_public,
           voided_at=excluded.voided_at, voided_why=excluded.voided_why`,
      )
      .run(c.serial, c.node.deviceId, c.node.name, c.kind, c.generation, c.notAfter, c.issuedAt, c.der, c.keyPublic, c.voided?.at ?? null, c.voided?.why ?? null);
  }
  async nextGeneration(deviceId: number): Promise<number> {
    const row = this.db
      .prepare(`INSERT INTO generations (device_id,last) VALUES (?,1) ON CONFLICT(device_id) DO UPDATE SET last = last + 1 RETURNING last`)
      .get(deviceId) as { last: number };
    return row.last;
  }
  async listIssued(deviceId: number): Promise<IssuedRecord[]> {
    return (this.db.prepare(`SELECT * FROM issued WHERE device_id = ? ORDER BY issued_at, generation`).all(deviceId) as IssuedRow[]).map(toIssued);
  }
  async issuedBySerial(serial: string): Promise<IssuedRecord | undefined> {
    const r = this.db.prepare(`SELECT * FROM issued WHERE serial = ?`).get(serial) as IssuedRow | undefined;
    return r ? toIssued(r) : undefined;
  }
  async getRuntime(deviceId: number): Promise<RuntimeRecord | undefined> {
    const r = this.db.prepare(`SELECT record FROM runtime WHERE device_id = ?`).get(deviceId) as { record: string } | undefined;
    return r ? (JSON.parse(r.record) as RuntimeRecord) : undefined;
  }
  /** Inside commit's transaction: read, apply, write. */
  private updateRuntime(u: RuntimeUpdate): void {
    const r = this.db.prepare(`SELECT record FROM runtime WHERE device_id = ?`).get(u.node.deviceId) as { record: string } | undefined;
    const next = applyRuntimeUpdate(r ? (JSON.parse(r.record) as RuntimeRecord) : undefined, u);
    this.db.prepare(`INSERT INTO runtime (device_id, record) VALUES (?, ?) ON CONFLICT(device_id) DO UPDATE SET record = excluded.record`).run(u.node.deviceId, JSON.stringify(next));
  }
  async voidIssued(serials: string[], at: number, why: string): Promise<void> {
    const mark = this.db.prepare(`UPDATE issued SET voided_at = ?, voided_why = ? WHERE serial = ? AND voided_at IS NULL`);
    this.db.transaction(() => {
      for (const serial of serials) mark.run(at, why, serial);
    })();
  }

  async setBootstrapToken(node: NodeRef, tokenId: string, expiresAt: number): Promise<void> {
    this.putToken(node, tokenId, expiresAt);
  }
  private putToken(node: NodeRef, tokenId: string, expiresAt: number): void {
    this.db
      .prepare(
        `INSERT INTO bootstrap_tokens (device_id,node,token_id,expires_at) VALUES (?,?,?,?)
         ON CONFLICT(device_id) DO UPDATE SET node=excluded.node, token_id=excluded.token_id, expires_at=excluded.expires_at`,
      )
      .run(node.deviceId, node.name, tokenId, expiresAt);
  }
  async getBootstrapToken(deviceId: number): Promise<{ tokenId: string; expiresAt: number } | undefined> {
    const r = this.db.prepare(`SELECT token_id, expires_at FROM bootstrap_tokens WHERE device_id = ?`).get(deviceId) as { token_id: string; expires_at: number } | undefined;
    return r ? { tokenId: r.token_id, expiresAt: r.expires_at } : undefined;
  }
  async nodeForBootstrapToken(tokenId: string): Promise<NodeRef | undefined> {
    const r = this.db.prepare(`SELECT device_id, node FROM bootstrap_tokens WHERE token_id = ?`).get(tokenId) as { device_id: number; node: string } | undefined;
    return r ? ref(r) : undefined;
  }
  async deleteBootstrapToken(deviceId: number): Promise<void> {
    this.db.prepare(`DELETE FROM bootstrap_tokens WHERE device_id = ?`).run(deviceId);
  }

  async chargeLimit(key: string, now: number, windowMs: number, max: number): Promise<LimitCharge> {
    const row = this.db
      .prepare(
        `INSERT INTO limits (key,window_start,count) VALUES (?,?,1)
         ON CONFLICT(key) DO UPDATE SET
           count = CASE WHEN ? - window_start >= ? THEN 1 ELSE count + 1 END,
           window_start = CASE WHEN ? - window_start >= ? THEN excluded.window_start ELSE window_start END
         RETURNING count`,
      )
      .get(key, now, now, windowMs, now, windowMs) as { count: number };
    return { allowed: row.count <= max, count: row.count };
  }
  async refundLimit(key: string, now: number, windowMs: number): Promise<void> {
    this.db.prepare(`UPDATE limits SET count = count - 1 WHERE key = ? AND count > 0 AND ? - window_start < ?`).run(key, now, windowMs);
  }

  async recordOnce(token: string, expiresAt: number, now: number): Promise<boolean> {
    this.db.prepare(`DELETE FROM once_tokens WHERE token = ? AND expires_at <= ?`).run(token, now);
    return this.db.prepare(`INSERT OR IGNORE INTO once_tokens (token,expires_at) VALUES (?,?)`).run(token, expiresAt).changes === 1;
  }

  private insertOutbox(items: OutboxItem[], now: number): void {
    const put = this.db.prepare(`INSERT INTO outbox (key,device_id,effect,not_before,created_at) VALUES (?,?,?,?,?) ON CONFLICT(key) DO NOTHING`);
    for (const i of items) put.run(i.key, i.deviceId, JSON.stringify(i.effect), i.notBefore, now);
  }
  async enqueue(items: OutboxItem[], now: number): Promise<void> {
    this.db.transaction(() => this.insertOutbox(items, now))();
  }
  async claimOutbox(now: number, claimer: string, staleMs: number, limit: number, deviceId?: number, due = now): Promise<OutboxEntry[]> {
    const tx = this.db.transaction((): OutboxEntry[] => {
      const rows = this.db
        .prepare(
          `SELECT * FROM outbox o WHERE not_before <= ? AND (claimed_by IS NULL OR claimed_at <= ?)
             AND (device_id IS NULL OR NOT EXISTS (SELECT 1 FROM outbox p WHERE p.device_id = o.device_id AND p.seq < o.seq))
             ${deviceId === undefined ? "" : "AND device_id = ?"}
           ORDER BY seq LIMIT ?`,
        )
        .all(...(deviceId === undefined ? [due, now - staleMs, limit] : [due, now - staleMs, deviceId, limit])) as OutboxRow[];
      // an item whose previous claim went stale may have been delivered by its dead claimer: count that attempt
      const mark = this.db.prepare(`UPDATE outbox SET claimed_by = ?, claimed_at = ?, attempts = attempts + ? WHERE seq = ?`);
      return rows.map((r) => {
        const taken = r.claimed_by !== null ? 1 : 0;
        mark.run(claimer, now, taken, r.seq);
        return toOutbox({ ...r, attempts: r.attempts + taken });
      });
    });
    return tx.immediate();
  }
  async claimOutboxRun(now: number, claimer: string, staleMs: number, deviceId: number, limit: number, due = now): Promise<OutboxEntry[]> {
    const tx = this.db.transaction((): OutboxEntry[] => {
      const rows = this.db.prepare(`SELECT * FROM outbox WHERE device_id = ? ORDER BY seq LIMIT ?`).all(deviceId, limit) as OutboxRow[];
      const mark = this.db.prepare(`UPDATE outbox SET claimed_by = ?, claimed_at = ?, attempts = attempts + ? WHERE seq = ?`);
      const out: OutboxEntry[] = [];
      for (const r of rows) {
        if (r.not_before > due || (r.claimed_by !== null && (r.claimed_at ?? 0) > now - staleMs)) break;
        // as claimOutbox: a stale claim's item may have been delivered by its dead claimer
        const taken = r.claimed_by !== null ? 1 : 0;
        mark.run(claimer, now, taken, r.seq);
        out.push(toOutbox({ ...r, attempts: r.attempts + taken }));
      }
      return out;
    });
    return tx.immediate();
  }
  async completeOutbox(key: string, claimer: string): Promise<void> {
    this.db.prepare(`DELETE FROM outbox WHERE key = ? AND claimed_by = ?`).run(key, claimer);
  }
  async deferOutbox(key: string, claimer: string, notBefore: number, error: string): Promise<void> {
    this.db
      .prepare(`UPDATE outbox SET attempts = attempts + 1, last_error = ?, not_before = ?, claimed_by = NULL, claimed_at = NULL WHERE key = ? AND claimed_by = ?`)
      .run(error.slice(0, 2000), notBefore, key, claimer);
  }
  async listOutbox(deviceId?: number): Promise<OutboxEntry[]> {
    const rows = deviceId === undefined ? this.db.prepare(`SELECT * FROM outbox ORDER BY seq`).all() : this.db.prepare(`SELECT * FROM outbox WHERE device_id = ? ORDER BY seq`).all(deviceId);
    return (rows as OutboxRow[]).map(toOutbox);
  }
  async recover(): Promise<void> {
    // one transaction per commit: nothing is ever left half-applied
  }

  async close(): Promise<void> {
    if (this.checkpointTimer) this.checkpointNow();
    this.db.close();
  }
}

/** A claim named by a commit was lost: the transaction rolls back. */
class LostClaim extends Error {}
