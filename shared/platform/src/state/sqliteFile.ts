/**
 * Opening a state store's SQLite file, the same way for every store: created 0600 in a directory only its owner
 * can enter (or ":memory:"), WAL, a busy timeout, secure_delete, plus the store's own pragmas; and what schema the
 * file holds, so the store can migrate or refuse it.
 */
import Database from "better-sqlite3";
import { privateDirOf } from "./privateFiles.js";

/** A state file that is unsafe to use (readable by others) or of a schema this fleetd cannot use. */
export class StateFileError extends Error {
  override readonly name = "StateFileError";
  readonly code = "state-file-unsafe";
}

export interface OpenedStateDb {
  db: Database.Database;
  /** `user_version` as found. */
  version: number;
  /** Whether the file holds the store's tables already (`marker` names one of them). */
  hasTables: boolean;
}

/** Throws StateFileError when the directory or an existing file is readable by others. */
export function openStateDb(path: string, extraPragmas: readonly string[], marker: string): OpenedStateDb {
  const onDisk = path !== ":memory:" && path !== "";
  const restore = onDisk ? privateDirOf(path, (m) => new StateFileError(m)) : undefined;
  let db: Database.Database;
  try {
    db = new Database(path);
  } finally {
    restore?.();
  }
  for (const p of ["journal_mode = WAL", "busy_timeout = 5000", "secure_delete = ON", ...extraPragmas]) db.pragma(p);
  const version = db.pragma("user_version", { simple: true }) as number;
  const hasTables = db.prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?`).get(marker) !== undefined;
  return { db, version, hasTables };
}
