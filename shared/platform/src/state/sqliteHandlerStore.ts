/**
 * The embedded SQLite backend of HandlerStore (better-sqlite3), with sqliteStore.ts's habits: a 0600 file in a
 * 0700 directory (checked), WAL with `synchronous = FULL` (a write is on disk when the call returns: the webhook
 * is answered 2xx only after its job is), `secure_delete` (webhook bodies name devices and BMC references). Every
 * "first one wins" is one conditional statement or an IMMEDIATE transaction, so several processes on one file
 * (a restart overlapping its predecessor, the CLI) never both win.
 */
import type Database from "better-sqlite3";
import { openStateDb, StateFileError } from "./sqliteFile.js";
import type { HandlerIntentRecord, HandlerJob, HandlerStore, IntentClaim, JobFailure, NewHandlerJob } from "./handlerStore.js";

/** The schema this code writes (PRAGMA user_version); another version is refused. */
const SCHEMA_VERSION = 1;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, device_id INTEGER NOT NULL, source TEXT NOT NULL, received_at TEXT NOT NULL,
  hint_event TEXT, attempts INTEGER NOT NULL DEFAULT 0, not_before INTEGER NOT NULL DEFAULT 0, last_error TEXT, parked_at INTEGER,
  claimed_by TEXT, claimed_at INTEGER);
CREATE INDEX IF NOT EXISTS jobs_order ON jobs (parked_at, received_at, id);
CREATE TABLE IF NOT EXISTS deliveries (id TEXT PRIMARY KEY, expires_at INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS deliveries_expiry ON deliveries (expires_at);
CREATE TABLE IF NOT EXISTS intents (key TEXT PRIMARY KEY, device_id INTEGER NOT NULL, intent TEXT NOT NULL, effect TEXT,
  state TEXT NOT NULL, recorded_at INTEGER NOT NULL, step INTEGER NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS intents_one_claim ON intents (device_id) WHERE state = 'claimed';
CREATE INDEX IF NOT EXISTS intents_step ON intents (state, step);
`;

interface JobRow {
  id: string;
  device_id: number;
  source: string;
  received_at: string;
  hint_event: string | null;
  attempts: number;
  not_before: number;
  last_error: string | null;
  parked_at: number | null;
  claimed_by: string | null;
  claimed_at: number | null;
}
interface IntentRow {
  key: string;
  device_id: number;
  intent: string;
  effect: string | null;
  state: string;
  recorded_at: number;
  step: number;
}

const toJob = (r: JobRow): HandlerJob => ({
  id: r.id,
  deviceId: r.device_id,
  source: r.source as HandlerJob["source"],
  receivedAt: r.received_at,
  hintEvent: r.hint_event,
  attempts: r.attempts,
  notBefore: r.not_before,
  lastError: r.last_error,
  parkedAt: r.parked_at,
});
const toIntent = (r: IntentRow): HandlerIntentRecord => ({
  key: r.key,
  deviceId: r.device_id,
  intent: JSON.parse(r.intent) as Record<string, unknown>,
  ...(r.effect !== null ? { effect: JSON.parse(r.effect) as Record<string, unknown> } : {}),
  state: r.state as HandlerIntentRecord["state"],
  recordedAt: r.recorded_at,
});

export class SqliteHandlerStore implements HandlerStore {
  private readonly db: Database.Database;
  private remembered = 0;

  /** `path`: a file (created 0600) in a directory only its owner can enter, or ":memory:". Throws StateFileError. */
  constructor(path: string) {
    const { db, version, hasTables } = openStateDb(path, ["synchronous = FULL"], "jobs");
    this.db = db;
    if (hasTables && version !== SCHEMA_VERSION) {
      this.db.close();
      throw new StateFileError(`${path}: the handler state database has schema version ${version}, this fleetd needs ${SCHEMA_VERSION}`);
    }
    this.db.exec(SCHEMA);
    this.db.pragma(`user_version = ${SCHEMA_VERSION}`);
  }

  private job(id: string): HandlerJob | undefined {
    const r = this.db.prepare(`SELECT * FROM jobs WHERE id = ?`).get(id) as JobRow | undefined;
    return r ? toJob(r) : undefined;
  }

  async enqueueJob(j: NewHandlerJob): Promise<HandlerJob> {
    this.db
      .prepare(`INSERT OR IGNORE INTO jobs (id,device_id,source,received_at,hint_event) VALUES (?,?,?,?,?)`)
      .run(j.id, j.deviceId, j.source, j.receivedAt, j.hintEvent);
    const got = this.job(j.id);
    if (!got) throw new Error(`job ${j.id} was not stored`);
    return got;
  }

  async rememberDelivery(id: string, expiresAt: number, now: number): Promise<boolean> {
    const first = this.db.transaction(() => {
      const cur = this.db.prepare(`SELECT expires_at FROM deliveries WHERE id = ?`).get(id) as { expires_at: number } | undefined;
      if (cur && cur.expires_at > now) return false;
      this.db.prepare(`INSERT OR REPLACE INTO deliveries (id, expires_at) VALUES (?, ?)`).run(id, expiresAt);
      return true;
    }).immediate();
    // ids past their window are dropped now and then (a replay that old is refused as stale anyway)
    if (++this.remembered % 100 === 1) this.db.prepare(`DELETE FROM deliveries WHERE expires_at <= ?`).run(now);
    return first;
  }

  async takeJobs(now: number, claimer: string, staleMs: number, limit: number): Promise<HandlerJob[]> {
    return this.db.transaction(() => {
      const rows = this.db
        .prepare(
          `SELECT * FROM jobs WHERE parked_at IS NULL AND not_before <= ? AND (claimed_by IS NULL OR claimed_at <= ?)
           ORDER BY received_at, id LIMIT ?`,
        )
        .all(now, now - staleMs, limit) as JobRow[];
      const claim = this.db.prepare(`UPDATE jobs SET claimed_by = ?, claimed_at = ? WHERE id = ?`);
      for (const r of rows) claim.run(claimer, now, r.id);
      return rows.map(toJob);
    }).immediate();
  }

  async completeJob(id: string, claimer: string): Promise<boolean> {
    return this.db.prepare(`DELETE FROM jobs WHERE id = ? AND claimed_by = ?`).run(id, claimer).changes === 1;
  }

  async failJob(id: string, claimer: string, error: string, notBefore: number, maxAttempts: number): Promise<JobFailure> {
    return this.db.transaction((): JobFailure => {
      const r = this.db.prepare(`SELECT * FROM jobs WHERE id = ? AND claimed_by = ?`).get(id, claimer) as JobRow | undefined;
      if (!r) return "lost";
      const attempts = r.attempts + 1;
      const parked = attempts >= maxAttempts;
      this.db
        .prepare(`UPDATE jobs SET attempts = ?, last_error = ?, not_before = ?, parked_at = ?, claimed_by = NULL, claimed_at = NULL WHERE id = ?`)
        .run(attempts, error.slice(0, 2000), notBefore, parked ? Date.now() : null, id);
      return parked ? "parked" : "retry";
    }).immediate();
  }

  async releaseJobs(claimer?: string): Promise<number> {
    const res =
      claimer === undefined
        ? this.db.prepare(`UPDATE jobs SET claimed_by = NULL, claimed_at = NULL WHERE claimed_by IS NOT NULL`).run()
        : this.db.prepare(`UPDATE jobs SET claimed_by = NULL, claimed_at = NULL WHERE claimed_by = ?`).run(claimer);
    return res.changes;
  }

  async listJobs(which: "pending" | "parked"): Promise<HandlerJob[]> {
    const rows = this.db
      .prepare(`SELECT * FROM jobs WHERE parked_at IS ${which === "parked" ? "NOT " : ""}NULL ORDER BY received_at, id`)
      .all() as JobRow[];
    return rows.map(toJob);
  }

  private intent(key: string): IntentRow | undefined {
    return this.db.prepare(`SELECT * FROM intents WHERE key = ?`).get(key) as IntentRow | undefined;
  }
  private nextStep(): number {
    return ((this.db.prepare(`SELECT COALESCE(MAX(step), 0) AS s FROM intents`).get() as { s: number }).s) + 1;
  }

  async claimIntent(key: string, deviceId: number, intent: Record<string, unknown>, now: number): Promise<IntentClaim> {
    return this.db.transaction((): IntentClaim => {
      const cur = this.intent(key);
      if (cur?.state === "settled") return "settled";
      if (cur?.state === "claimed") return "claimed";
      const other = this.db.prepare(`SELECT key FROM intents WHERE device_id = ? AND state = 'claimed'`).get(deviceId);
      if (other !== undefined) return "busy";
      this.db
        .prepare(`INSERT OR REPLACE INTO intents (key,device_id,intent,effect,state,recorded_at,step) VALUES (?,?,?,NULL,'claimed',?,?)`)
        .run(key, deviceId, JSON.stringify(intent), now, this.nextStep());
      return "claimed";
    }).immediate();
  }

  async abandonIntent(key: string, deviceId: number, now: number): Promise<void> {
    this.db.transaction(() => {
      this.db.prepare(`UPDATE intents SET state = 'abandoned', recorded_at = ?, step = ? WHERE key = ? AND device_id = ? AND state = 'claimed'`).run(now, this.nextStep(), key, deviceId);
    }).immediate();
  }

  async settleIntent(key: string, deviceId: number, intent: Record<string, unknown>, effect: Record<string, unknown> | undefined, now: number): Promise<HandlerIntentRecord | undefined> {
    return this.db.transaction(() => {
      if (this.intent(key)?.state === "settled") return undefined;
      this.db
        .prepare(`INSERT OR REPLACE INTO intents (key,device_id,intent,effect,state,recorded_at,step) VALUES (?,?,?,?,'settled',?,?)`)
        .run(key, deviceId, JSON.stringify(intent), effect === undefined ? null : JSON.stringify(effect), now, this.nextStep());
      const r = this.intent(key);
      return r ? toIntent(r) : undefined;
    }).immediate();
  }

  async unsettledIntent(deviceId: number): Promise<HandlerIntentRecord | undefined> {
    const r = this.db.prepare(`SELECT * FROM intents WHERE device_id = ? AND state = 'claimed'`).get(deviceId) as IntentRow | undefined;
    return r ? toIntent(r) : undefined;
  }

  async listIntents(): Promise<HandlerIntentRecord[]> {
    return (this.db.prepare(`SELECT * FROM intents WHERE state = 'settled' ORDER BY step`).all() as IntentRow[]).map(toIntent);
  }

  async close(): Promise<void> {
    this.db.close();
  }
}
