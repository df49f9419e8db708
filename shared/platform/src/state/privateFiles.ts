/**
 * Files that hold secrets or state only fleetd may read (the SQLite state, the CA bundle state, netbox-script's
 * queue, PIN files, the action's outputs): 0600 files in a directory that only its owner can enter (0700).
 * Checked, not assumed: a directory or file others can read is refused with the path and its mode, so a
 * mis-mounted volume stops the start instead of leaking a cluster secret.
 */
import { closeSync, existsSync, fchmodSync, fsyncSync, mkdirSync, openSync, renameSync, rmSync, statSync, writeSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { dirname, join, basename } from "node:path";

const octal = (m: number) => (m & 0o777).toString(8).padStart(3, "0");

/** A directory for private files: created 0700 when missing; refused when group or others have any access. */
export function ensurePrivateDir(dir: string, err: (message: string) => Error = (m) => new Error(m)): void {
  if (!existsSync(dir)) mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = statSync(dir);
  if (!st.isDirectory()) throw err(`${dir} is not a directory`);
  if ((st.mode & 0o077) !== 0) throw err(`${dir} has mode ${octal(st.mode)}: it holds secrets, so only its owner may have access (chmod 700 ${dir})`);
  if (typeof process.getuid === "function" && st.uid !== process.getuid()) throw err(`${dir} belongs to uid ${st.uid}, not to this process (uid ${process.getuid()})`);
}

/** An existing private file must not be readable or writable by group or others. */
export function checkPrivateFile(path: string, err: (message: string) => Error = (m) => new Error(m)): void {
  if (!existsSync(path)) return;
  const st = statSync(path);
  if ((st.mode & 0o077) !== 0) throw err(`${path} has mode ${octal(st.mode)}: it holds secrets, so only its owner may read it (chmod 600 ${path})`);
}

/**
 * The checks for a file about to be opened by a library that creates it (SQLite): its directory is private,
 * the file and its `-wal`/`-shm`/`-journal` companions (if present) are 0600. Sets the process umask to 077
 * while the caller opens it; returns the function that restores the previous umask.
 */
export function privateDirOf(path: string, err: (message: string) => Error = (m) => new Error(m)): () => void {
  ensurePrivateDir(dirname(path), err);
  for (const p of [path, `${path}-wal`, `${path}-shm`, `${path}-journal`]) checkPrivateFile(p, err);
  const previous = process.umask(0o077);
  return () => void process.umask(previous);
}

/**
 * Replaces `path` with `data` atomically and durably: an exclusive temporary file (random name) in the same
 * directory with exactly `mode`, every byte written, fsync, rename over `path`, fsync of the directory. A crash
 * leaves the old file or the new one, never half of one; a failed write removes the temporary file. The
 * directory must exist. fleetd's one atomic file writer (the CA bundle state, netbox-script's handled.log, the
 * SPIRE node list and sync status, private state files).
 */
export function writeFileAtomic(path: string, data: string | Uint8Array, mode = 0o600): void {
  const dir = dirname(path);
  const tmp = join(dir, `.${basename(path)}.${randomBytes(6).toString("hex")}.tmp`);
  const fd = openSync(tmp, "wx", mode);
  try {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
    let off = 0;
    while (off < bytes.byteLength) off += writeSync(fd, bytes, off, bytes.byteLength - off);
    fchmodSync(fd, mode); // exactly `mode`, whatever the umask
    fsyncSync(fd);
    closeSync(fd);
    renameSync(tmp, path);
  } catch (e) {
    try {
      closeSync(fd);
    } catch {
      // already closed
    }
    rmSync(tmp, { force: true });
    throw e;
  }
  const dfd = openSync(dir, "r");
  try {
    fsyncSync(dfd);
  } finally {
    closeSync(dfd);
  }
}

/** Writes `data` to `path` as a private file (0600, in a private directory), atomically (writeFileAtomic). */
export function writePrivateFile(path: string, data: string | Uint8Array, err: (message: string) => Error = (m) => new Error(m)): void {
  ensurePrivateDir(dirname(path), err);
  writeFileAtomic(path, data, 0o600);
}
