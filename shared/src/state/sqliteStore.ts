/** The embedded SQLite backend of AttestationStore (better-sqlite3; WAL; every CAS is one UPDATE … WHERE). */
import Database from "better-sqlite3";
import type { AttestationStore, InstallCodeRecord, IssuedCertificate, PendingEk, SessionRecord, SessionState } from "./store.js";

const SCHEMA = `
CREATE TABLE IF NOT EXISTS sessions (
  id TEXT PRIMARY KEY, node TEXT NOT NULL, mode TEXT NOT NULL, nonce TEXT NOT NULL, claims_hash TEXT NOT NULL,
  ak_name TEXT NOT NULL, ak_public TEXT NOT NULL, secret_hashes TEXT NOT NULL, ek_bindings TEXT NOT NULL,
  data TEXT NOT NULL, state TEXT NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS ak_names (ak_name TEXT PRIMARY KEY, node TEXT NOT NULL, seen_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS pending_eks (binding TEXT PRIMARY KEY, serial TEXT NOT NULL, macs TEXT NOT NULL,
  source_address TEXT NOT NULL, first_seen INTEGER NOT NULL, last_seen INTEGER NOT NULL, count INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS install_codes (code_hash TEXT PRIMARY KEY, node TEXT NOT NULL, uuid TEXT NOT NULL,
  source_address TEXT NOT NULL, config TEXT NOT NULL, expires_at INTEGER NOT NULL, claimed_by TEXT, claimed_at INTEGER);
CREATE TABLE IF NOT EXISTS issued (serial TEXT PRIMARY KEY, node TEXT NOT NULL, kind TEXT NOT NULL,
  generation INTEGER NOT NULL, not_after INTEGER NOT NULL, issued_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS generations (node TEXT PRIMARY KEY, last INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS bootstrap_tokens (node TEXT PRIMARY KEY, token_id TEXT NOT NULL UNIQUE, expires_at INTEGER NOT NULL);
`;

interface SessionRow {
  id: string;
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
}
interface CodeRow {
  code_hash: string;
  node: string;
  uuid: string;
  source_address: string;
  config: string;
  expires_at: number;
  claimed_by: string | null;
  claimed_at: number | null;
}

const toSession = (r: SessionRow): SessionRecord => ({
  id: r.id,
  node: r.node,
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
});
const toCode = (r: CodeRow): InstallCodeRecord => ({
  codeHash: r.code_hash,
  node: r.node,
  uuid: r.uuid,
  sourceAddress: r.source_address,
  config: r.config,
  expiresAt: r.expires_at,
  claimedBy: r.claimed_by,
  claimedAt: r.claimed_at,
});

export class SqliteAttestationStore implements AttestationStore {
  private readonly db: Database.Database;

  /** `path` is a file (created if missing) or ":memory:". */
  constructor(path: string) {
    this.db = new Database(path);
    this.db.pragma("journal_mode = WAL");
    this.db.pragma("busy_timeout = 5000");
    this.db.pragma("foreign_keys = ON");
    this.db.exec(SCHEMA);
  }

  async createSession(s: SessionRecord): Promise<void> {
    this.db
      .prepare(
        `INSERT INTO sessions (id,node,mode,nonce,claims_hash,ak_name,ak_public,secret_hashes,ek_bindings,data,state,created_at,expires_at)
         VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)`,
      )
      .run(s.id, s.node, s.mode, s.nonce, s.claimsHash, s.akName, s.akPublic, JSON.stringify(s.secretHashes), JSON.stringify(s.ekBindings), JSON.stringify(s.data), s.state, s.createdAt, s.expiresAt);
  }
  async getSession(id: string): Promise<SessionRecord | undefined> {
    const r = this.db.prepare(`SELECT * FROM sessions WHERE id = ?`).get(id) as SessionRow | undefined;
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
  async expireSessions(now: number): Promise<number> {
    return this.db.prepare(`DELETE FROM sessions WHERE expires_at <= ?`).run(now).changes;
  }

  async recordAkName(akName: string, node: string, now: number): Promise<boolean> {
    return this.db.prepare(`INSERT OR IGNORE INTO ak_names (ak_name,node,seen_at) VALUES (?,?,?)`).run(akName, node, now).changes === 1;
  }

  async recordPendingEk(p: Omit<PendingEk, "firstSeen" | "lastSeen" | "count">, now: number): Promise<void> {
    this.db
      .prepare(
        `INSERT INTO pending_eks (binding,serial,macs,source_address,first_seen,last_seen,count) VALUES (?,?,?,?,?,?,1)
         ON CONFLICT(binding) DO UPDATE SET serial=excluded.serial, macs=excluded.macs, source_address=excluded.source_address,
           last_seen=excluded.last_seen, count=count+1`,
      )
      .run(p.binding, p.serial, JSON.stringify(p.macs), p.sourceAddress, now, now);
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

  async putInstallCode(r: Omit<InstallCodeRecord, "claimedBy" | "claimedAt">): Promise<void> {
    const tx = this.db.transaction(() => {
      // One live code per node: a new provision replaces the previous code.
      this.db.prepare(`DELETE FROM install_codes WHERE node = ?`).run(r.node);
      this.db
        .prepare(`INSERT INTO install_codes (code_hash,node,uuid,source_address,config,expires_at) VALUES (?,?,?,?,?,?)`)
        .run(r.codeHash, r.node, r.uuid, r.sourceAddress, r.config, r.expiresAt);
    });
    tx();
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
    return this.db.prepare(`DELETE FROM install_codes WHERE code_hash = ? AND claimed_by = ?`).run(codeHash, claimer).changes === 1;
  }
  async hasInstallCodeFor(node: string, now: number): Promise<boolean> {
    return this.db.prepare(`SELECT 1 FROM install_codes WHERE node = ? AND expires_at > ?`).get(node, now) !== undefined;
  }

  async recordIssued(c: IssuedCertificate): Promise<void> {
    this.db
      .prepare(`INSERT INTO issued (serial,node,kind,generation,not_after,issued_at) VALUES (?,?,?,?,?,?)`)
      .run(c.serial, c.node, c.kind, c.generation, c.notAfter, c.issuedAt);
  }
  async nextGeneration(node: string): Promise<number> {
    const row = this.db
      .prepare(`INSERT INTO generations (node,last) VALUES (?,1) ON CONFLICT(node) DO UPDATE SET last = last + 1 RETURNING last`)
      .get(node) as { last: number };
    return row.last;
  }
  async listIssued(node: string): Promise<IssuedCertificate[]> {
    const rows = this.db.prepare(`SELECT * FROM issued WHERE node = ? ORDER BY issued_at`).all(node) as {
      serial: string;
      node: string;
      kind: string;
      generation: number;
      not_after: number;
      issued_at: number;
    }[];
    return rows.map((r) => ({ serial: r.serial, node: r.node, kind: r.kind as IssuedCertificate["kind"], generation: r.generation, notAfter: r.not_after, issuedAt: r.issued_at }));
  }

  async setBootstrapToken(node: string, tokenId: string, expiresAt: number): Promise<void> {
    this.db
      .prepare(`INSERT INTO bootstrap_tokens (node,token_id,expires_at) VALUES (?,?,?) ON CONFLICT(node) DO UPDATE SET token_id=excluded.token_id, expires_at=excluded.expires_at`)
      .run(node, tokenId, expiresAt);
  }
  async getBootstrapToken(node: string): Promise<{ tokenId: string; expiresAt: number } | undefined> {
    const r = this.db.prepare(`SELECT token_id, expires_at FROM bootstrap_tokens WHERE node = ?`).get(node) as { token_id: string; expires_at: number } | undefined;
    return r ? { tokenId: r.token_id, expiresAt: r.expires_at } : undefined;
  }
  async nodeForBootstrapToken(tokenId: string): Promise<string | undefined> {
    const r = this.db.prepare(`SELECT node FROM bootstrap_tokens WHERE token_id = ?`).get(tokenId) as { node: string } | undefined;
    return r?.node;
  }
  async deleteBootstrapToken(node: string): Promise<void> {
    this.db.prepare(`DELETE FROM bootstrap_tokens WHERE node = ?`).run(node);
  }

  async close(): Promise<void> {
    this.db.close();
  }
}
