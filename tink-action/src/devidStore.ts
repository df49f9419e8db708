/**
 * The node's LDevID files: the seed Talos writes at every boot, and the devid directory the node agent alone owns.
 *
 * Seed (`/var/lib/fleetd/seed/`, read-only to the agent; machine.files of the node's Talos config, each file the
 * base64 of its bytes — SEED_FILES in @fleetd/platform/talos/config): the LDevID certificate chain (leaf, then the
 * CA bundle), the LDevID and LAK key blobs, and the LAK certificate.
 *
 * Devid directory (`/var/lib/fleetd/devid/`, 0700, files 0600):
 *   g<N>/            one generation's complete set: ldevid.crt (leaf, then the CA bundle), ldevid.pub, ldevid.priv
 *                    (no TPM2B size prefix, as SPIRE's tpm_devid reads them), lak.crt, lak.pub, lak.priv,
 *                    ca-bundle.pem
 *   current -> g<N>  the generation in use (a relative symlink)
 *   ldevid.crt -> current/ldevid.crt, …   fixed symlinks: the paths spire-agent's agent.conf names
 *   seeded.json      the record that the seed was copied (written once; later boots never copy the same seed again)
 * A renewal writes the whole next generation into its own directory (each file written to a temporary name,
 * fsynced, renamed; the directory fsynced) and then replaces `current` with one rename(2), fsyncing the parent:
 * a crash at any point leaves `current` naming either the old complete set or the new complete set, never a mix.
 * The previous generation is kept (one step back for an operator); older ones are removed.
 * A renewal stages the next generation (`stageGeneration`: g<N+1>/ complete and fsynced, `current` untouched)
 * before the agent confirms it with the server, and switches `current` (`switchCurrent`) after the confirm. A
 * generation directory newer than `current` is therefore a staged one whose confirm may or may not have happened;
 * the agent resolves it with the server before anything else (renewAgent.ts).
 *
 * Rules for the seed (`ensureSeeded`): no generation yet → the seed is copied; the devid directory holds the seed's
 * generation or a newer one → kept, whatever the seed says (Talos rewrites the seed from the original config at
 * every boot, so it is usually older than what renewal made); the seed is a strictly newer generation of the same
 * node (a re-provision rendered a new config) → it is adopted as a new generation. A devid directory that is there
 * but not a complete, parseable set — or holds another node — is an error naming what is wrong, never re-seeded.
 */
import { createHash } from "node:crypto";
import { chmodSync, closeSync, fsyncSync, lstatSync, mkdirSync, openSync, readdirSync, readFileSync, readlinkSync, renameSync, rmSync, statSync, symlinkSync, writeSync } from "node:fs";
import { join } from "node:path";
import { SEED_FILES } from "@fleetd/platform/talos/config";
import { certificatesFromPem, parseIssuedCertificate, type CertificateInfo } from "@fleetd/platform/pki";
import { certificateToPem } from "@fleetd/verify/x509";
import { decodeExact } from "@fleetd/verify/codec";
import { objectName, TPMT_PUBLIC } from "@fleetd/verify/tpm";
import { TPM_ALG } from "@fleetd/verify/tcg";
import { CodedError } from "@fleetd/platform/fleet";
import type { KeyAlg, KeyBlobs } from "@fleetd/platform/tpmclient";

export const DEVID_FILES = ["ldevid.crt", "ldevid.pub", "ldevid.priv", "lak.crt", "lak.pub", "lak.priv", "ca-bundle.pem"] as const;
export type DevidFile = (typeof DEVID_FILES)[number];
export const CURRENT_LINK = "current";
export const SEEDED_RECORD = "seeded.json";
/** Largest file either directory holds (certificates and key blobs are a few KiB). */
const MAX_FILE = 256 * 1024;

export const DEVID_ERROR_CODES = ["seed-missing", "seed-invalid", "devid-corrupt", "devid-other-node", "devid-io"] as const;
export type DevidErrorCode = (typeof DEVID_ERROR_CODES)[number];

export class DevidStoreError extends CodedError<DevidErrorCode> {
  override readonly name = "DevidStoreError";
  constructor(
    code: DevidErrorCode,
    readonly path: string,
    detail: string,
  ) {
    super(code, `${path}: ${detail}`);
  }
}

/** One generation's complete set, as the agent uses it. */
export interface DevidSet {
  node: string;
  generation: number;
  /** DER of the LDevID leaf and the LAK certificate. */
  ldevidCertificate: Uint8Array;
  lakCertificate: Uint8Array;
  /** The CA bundle (PEM) the certificates chain to. */
  caBundle: string;
  ldevidPublic: Uint8Array;
  ldevidPrivate: Uint8Array;
  lakPublic: Uint8Array;
  lakPrivate: Uint8Array;
}

/** `CN=<node>.g<generation>` (attestation-protocol.md "Keys and certificates"); the LAK's CN adds `.lak`. */
export function generationOf(cert: CertificateInfo, kind: "ldevid" | "lak"): { node: string; generation: number } | undefined {
  const m = (kind === "ldevid" ? /^(.+)\.g(\d{1,9})$/ : /^(.+)\.g(\d{1,9})\.lak$/).exec(cert.subjectCn);
  return m ? { node: m[1] as string, generation: Number(m[2]) } : undefined;
}

/** Checks a set's certificates against each other: the same node and generation in both CNs. Returns it. */
export function checkedSet(parts: Omit<DevidSet, "node" | "generation">, where: string, code: DevidErrorCode): DevidSet {
  let ld: CertificateInfo;
  let lak: CertificateInfo;
  try {
    ld = parseIssuedCertificate(parts.ldevidCertificate, "LDevID certificate");
    lak = parseIssuedCertificate(parts.lakCertificate, "LAK certificate");
    if (certificatesFromPem(parts.caBundle, "CA bundle").length === 0) throw new Error("the CA bundle holds no certificate");
  } catch (e) {
    throw new DevidStoreError(code, where, (e as Error).message);
  }
  const a = generationOf(ld, "ldevid");
  const b = generationOf(lak, "lak");
  if (!a) throw new DevidStoreError(code, where, `the LDevID's subject CN ${JSON.stringify(ld.subjectCn)} is not <node>.g<generation>`);
  if (!b) throw new DevidStoreError(code, where, `the LAK's subject CN ${JSON.stringify(lak.subjectCn)} is not <node>.g<generation>.lak`);
  if (a.node !== b.node || a.generation !== b.generation) {
    throw new DevidStoreError(code, where, `the LDevID (${ld.subjectCn}) and the LAK (${lak.subjectCn}) are not of one generation`);
  }
  for (const [k, v] of [["ldevid.pub", parts.ldevidPublic], ["ldevid.priv", parts.ldevidPrivate], ["lak.pub", parts.lakPublic], ["lak.priv", parts.lakPrivate]] as const) {
    if (v.length === 0) throw new DevidStoreError(code, where, `${k} is empty`);
  }
  for (const [k, v] of [["ldevid.pub", parts.ldevidPublic], ["lak.pub", parts.lakPublic]] as const) {
    try {
      decodeExact(TPMT_PUBLIC, v);
    } catch (e) {
      throw new DevidStoreError(code, where, `${k} is not a TPMT_PUBLIC: ${(e as Error).message}`);
    }
  }
  return { ...parts, ...a };
}

/** A key of the set as the TPM client loads it (the public area decoded, its Name computed). */
export function keyBlobs(publicBytes: Uint8Array, privateBytes: Uint8Array): KeyBlobs {
  return { public: decodeExact(TPMT_PUBLIC, publicBytes), publicBytes, name: objectName(publicBytes), private: privateBytes };
}

/** The algorithm of the SRK the set's keys live under (the LDevID's own). */
export function keyAlgOf(set: DevidSet): KeyAlg {
  return decodeExact(TPMT_PUBLIC, set.ldevidPublic).type === TPM_ALG.ECC ? "ecc" : "rsa";
}

function readBounded(path: string, code: DevidErrorCode, missing: DevidErrorCode = code): Uint8Array {
  let size: number;
  try {
    const st = statSync(path);
    if (!st.isFile()) throw new DevidStoreError(code, path, "not a regular file");
    size = st.size;
  } catch (e) {
    if (e instanceof DevidStoreError) throw e;
    const errno = (e as NodeJS.ErrnoException).code;
    throw new DevidStoreError(errno === "ENOENT" ? missing : code, path, errno === "ENOENT" ? "missing" : `cannot read: ${errno ?? (e as Error).message}`);
  }
  if (size > MAX_FILE) throw new DevidStoreError(code, path, `larger than ${MAX_FILE} bytes`);
  try {
    return new Uint8Array(readFileSync(path));
  } catch (e) {
    throw new DevidStoreError(code, path, `cannot read: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

function readSeedFile(seedDir: string, name: string): Uint8Array {
  const path = join(seedDir, name);
  const text = Buffer.from(readBounded(path, "seed-invalid", "seed-missing")).toString("latin1").replace(/\s+/g, "");
  if (text.length === 0 || !BASE64.test(text)) throw new DevidStoreError("seed-invalid", path, "not base64 (machine.files content is the base64 of the file's bytes)");
  return new Uint8Array(Buffer.from(text, "base64"));
}

/** The seed as Talos wrote it: decoded and checked (certificates parse, one node and generation). */
export function readSeed(seedDir: string): DevidSet {
  const chainPem = Buffer.from(readSeedFile(seedDir, SEED_FILES.ldevidCertChainPem)).toString("utf8");
  const lakPem = Buffer.from(readSeedFile(seedDir, SEED_FILES.lakCertPem)).toString("utf8");
  let chain: Uint8Array[];
  let lak: Uint8Array[];
  try {
    chain = certificatesFromPem(chainPem, SEED_FILES.ldevidCertChainPem);
    lak = certificatesFromPem(lakPem, SEED_FILES.lakCertPem);
  } catch (e) {
    throw new DevidStoreError("seed-invalid", seedDir, (e as Error).message);
  }
  const [leaf, ...bundle] = chain;
  if (!leaf || bundle.length === 0) throw new DevidStoreError("seed-invalid", join(seedDir, SEED_FILES.ldevidCertChainPem), "needs the LDevID certificate followed by the CA bundle");
  if (lak.length !== 1) throw new DevidStoreError("seed-invalid", join(seedDir, SEED_FILES.lakCertPem), `needs exactly one certificate, has ${lak.length}`);
  return checkedSet(
    {
      ldevidCertificate: leaf,
      lakCertificate: lak[0] as Uint8Array,
      caBundle: bundle.map((d) => certificateToPem(d)).join(""),
      ldevidPublic: readSeedFile(seedDir, SEED_FILES.ldevidPublic),
      ldevidPrivate: readSeedFile(seedDir, SEED_FILES.ldevidPrivate),
      lakPublic: readSeedFile(seedDir, SEED_FILES.lakPublic),
      lakPrivate: readSeedFile(seedDir, SEED_FILES.lakPrivate),
    },
    seedDir,
    "seed-invalid",
  );
}

/** The files of a generation directory, as written. */
export function setFiles(s: DevidSet): Record<DevidFile, Uint8Array | string> {
  const bundle = s.caBundle.trim() + "\n";
  return {
    "ldevid.crt": certificateToPem(s.ldevidCertificate) + bundle,
    "ldevid.pub": s.ldevidPublic,
    "ldevid.priv": s.ldevidPrivate,
    "lak.crt": certificateToPem(s.lakCertificate),
    "lak.pub": s.lakPublic,
    "lak.priv": s.lakPrivate,
    "ca-bundle.pem": bundle,
  };
}

const GEN_DIR = /^g(\d{1,9})$/;

function lexists(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

/** Reads one generation directory as a checked set; anything missing or unparseable is `devid-corrupt`. */
export function readGeneration(dir: string): DevidSet {
  const f = (n: DevidFile) => readBounded(join(dir, n), "devid-corrupt");
  const text = (n: DevidFile) => Buffer.from(f(n)).toString("utf8");
  let chain: Uint8Array[];
  let lak: Uint8Array[];
  try {
    chain = certificatesFromPem(text("ldevid.crt"), "ldevid.crt");
    lak = certificatesFromPem(text("lak.crt"), "lak.crt");
  } catch (e) {
    if (e instanceof DevidStoreError) throw e;
    throw new DevidStoreError("devid-corrupt", dir, (e as Error).message);
  }
  if (chain.length < 2) throw new DevidStoreError("devid-corrupt", join(dir, "ldevid.crt"), "needs the LDevID certificate followed by the CA bundle");
  if (lak.length !== 1) throw new DevidStoreError("devid-corrupt", join(dir, "lak.crt"), `needs exactly one certificate, has ${lak.length}`);
  return checkedSet(
    {
      ldevidCertificate: chain[0] as Uint8Array,
      lakCertificate: lak[0] as Uint8Array,
      caBundle: text("ca-bundle.pem"),
      ldevidPublic: f("ldevid.pub"),
      ldevidPrivate: f("ldevid.priv"),
      lakPublic: f("lak.pub"),
      lakPrivate: f("lak.priv"),
    },
    dir,
    "devid-corrupt",
  );
}

export interface SeededRecord {
  version: 1;
  seededAt: string;
  node: string;
  generation: number;
  /** SHA-256 of the seed's LDevID certificate. */
  seedLdevidSha256: string;
}

/**
 * The generation in use, or undefined when the directory holds none yet (absent, empty, or only the leftovers of a
 * seeding that crashed before `current` was set). A `current` that is not a complete set is `devid-corrupt`, as is
 * a seeded record without `current`.
 */
export function readCurrent(devidDir: string): DevidSet | undefined {
  const link = join(devidDir, CURRENT_LINK);
  if (!lexists(link)) {
    if (lexists(join(devidDir, SEEDED_RECORD))) {
      throw new DevidStoreError("devid-corrupt", link, `missing, but ${SEEDED_RECORD} says the seed was copied: the directory was damaged (restore it, or remove the directory to copy the seed again)`);
    }
    return undefined;
  }
  let target: string;
  try {
    target = readlinkSync(link);
  } catch (e) {
    throw new DevidStoreError("devid-corrupt", link, `not a symlink to a generation directory (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  const m = GEN_DIR.exec(target);
  if (!m) throw new DevidStoreError("devid-corrupt", link, `points at ${JSON.stringify(target)}, not g<generation>`);
  const set = readGeneration(join(devidDir, target));
  if (set.generation !== Number(m[1])) throw new DevidStoreError("devid-corrupt", join(devidDir, target), `holds generation ${set.generation}, not ${m[1]}`);
  return set;
}

/** Filesystem steps of an install, in order; a test fails at each to prove the swap atomic. */
export type InstallStep = "write-files" | "sync-generation" | "rename-generation" | "link-current" | "swap-current" | "sync-dir" | "links" | "prune";

export interface InstallOptions {
  /** Called before each step (tests throw here to simulate a crash). */
  beforeStep?: (step: InstallStep) => void;
}

function fsyncPath(path: string): void {
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function writeSynced(path: string, data: Uint8Array | string): void {
  const fd = openSync(path, "wx", 0o600);
  try {
    const buf = typeof data === "string" ? Buffer.from(data) : data;
    let off = 0;
    while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** The devid directory, created 0700 if missing (its parent must exist: the hostPath). */
export function ensureDir(devidDir: string): void {
  mkdirSync(devidDir, { recursive: true, mode: 0o700 });
  // a hostPath the kubelet created (DirectoryOrCreate) is 0755: the agent alone may read the key blobs
  if ((statSync(devidDir).mode & 0o777) !== 0o700) chmodSync(devidDir, 0o700);
}

/**
 * Installs `set` as the current generation: its own directory first (complete and fsynced), then one rename of
 * `current`. Before the swap nothing the readers see has changed; after it, everything has.
 */
export function installGeneration(devidDir: string, set: DevidSet, opts: InstallOptions = {}): void {
  stageGeneration(devidDir, set, opts);
  switchCurrent(devidDir, set.generation, opts);
}

function currentTarget(devidDir: string): string | undefined {
  return lexists(join(devidDir, CURRENT_LINK)) ? readlinkSync(join(devidDir, CURRENT_LINK)) : undefined;
}

/**
 * Writes `set` as its generation directory `g<N>/` (each file fsynced, the directory renamed into place, the parent
 * fsynced) without touching `current`: a staged generation. Other staged generations (newer than `current`, not
 * this one) are removed: they were never confirmed (the agent resolves a staged one before it renews again).
 */
export function stageGeneration(devidDir: string, set: DevidSet, opts: InstallOptions = {}): void {
  const step = opts.beforeStep ?? (() => undefined);
  ensureDir(devidDir);
  const name = `g${set.generation}`;
  const current = currentTarget(devidDir);
  if (current === name) throw new DevidStoreError("devid-io", join(devidDir, name), "is the current generation already");
  const currentGen = current !== undefined ? Number(GEN_DIR.exec(current)?.[1] ?? Number.NaN) : undefined;
  if (currentGen !== undefined && !Number.isNaN(currentGen)) {
    for (const e of readdirSync(devidDir)) {
      const m = GEN_DIR.exec(e);
      if (m && e !== name && Number(m[1]) > currentGen) rmSync(join(devidDir, e), { recursive: true, force: true });
    }
  }
  const tmp = join(devidDir, `.${name}.${process.pid}.tmp`);
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { mode: 0o700 });
  step("write-files");
  for (const [file, data] of Object.entries(setFiles(set))) writeSynced(join(tmp, file), data);
  step("sync-generation");
  fsyncPath(tmp);
  step("rename-generation");
  // A directory of this generation that is not current is the leftover of an install that crashed: replaced.
  rmSync(join(devidDir, name), { recursive: true, force: true });
  renameSync(tmp, join(devidDir, name));
  fsyncPath(devidDir);
}

/**
 * Makes the complete directory `g<generation>/` current: one rename of the `current` symlink, the parent fsynced,
 * the fixed links checked, older generations pruned (the previous one is kept).
 */
export function switchCurrent(devidDir: string, generation: number, opts: InstallOptions = {}): void {
  const step = opts.beforeStep ?? (() => undefined);
  const name = `g${generation}`;
  const current = currentTarget(devidDir);
  if (current === name) throw new DevidStoreError("devid-io", join(devidDir, name), "is the current generation already");
  if (!lexists(join(devidDir, name))) throw new DevidStoreError("devid-io", join(devidDir, name), "missing: stage the generation first");
  step("link-current");
  const nextLink = join(devidDir, `.${CURRENT_LINK}.${process.pid}.tmp`);
  rmSync(nextLink, { force: true });
  symlinkSync(name, nextLink);
  step("swap-current");
  renameSync(nextLink, join(devidDir, CURRENT_LINK));
  step("sync-dir");
  fsyncPath(devidDir);
  step("links");
  ensureLinks(devidDir);
  step("prune");
  prune(devidDir, [name, ...(current ? [current] : [])]);
}

/** A staged generation found at start (or before an attempt): newer than `current`, never switched to. */
export type Staged = { generation: number; dir: string; set: DevidSet } | { generation: number; dir: string; problem: string };

/**
 * The newest generation directory newer than `current`'s (undefined when there is none). Its set must be complete
 * and be the current set renewed (same node, same key blobs); otherwise `problem` says why (it cannot be used).
 */
export function readStaged(devidDir: string, current: DevidSet): Staged | undefined {
  let newest: number | undefined;
  for (const e of lexists(devidDir) ? readdirSync(devidDir) : []) {
    const m = GEN_DIR.exec(e);
    if (m && Number(m[1]) > current.generation && (newest === undefined || Number(m[1]) > newest)) newest = Number(m[1]);
  }
  if (newest === undefined) return undefined;
  const dir = join(devidDir, `g${newest}`);
  let set: DevidSet;
  try {
    set = readGeneration(dir);
  } catch (e) {
    if (!(e instanceof DevidStoreError)) throw e;
    return { generation: newest, dir, problem: e.message };
  }
  const same = (a: Uint8Array, b: Uint8Array) => Buffer.from(a).equals(Buffer.from(b));
  if (set.generation !== newest) return { generation: newest, dir, problem: `holds generation ${set.generation}, not ${newest}` };
  if (set.node !== current.node) return { generation: newest, dir, problem: `holds node ${set.node}, not ${current.node}` };
  if (!same(set.ldevidPublic, current.ldevidPublic) || !same(set.ldevidPrivate, current.ldevidPrivate) || !same(set.lakPublic, current.lakPublic) || !same(set.lakPrivate, current.lakPrivate)) {
    return { generation: newest, dir, problem: "holds other key blobs than the current generation" };
  }
  return { generation: newest, dir, set };
}

/** Removes a staged generation directory (never `current`'s target, never one at or below it). */
export function discardStaged(devidDir: string, generation: number): void {
  const current = readCurrent(devidDir);
  if (!current || generation <= current.generation) throw new DevidStoreError("devid-io", join(devidDir, `g${generation}`), `is not a staged generation (current is ${current ? `g${current.generation}` : "none"})`);
  rmSync(join(devidDir, `g${generation}`), { recursive: true, force: true });
  fsyncPath(devidDir);
}

/** The fixed symlinks agent.conf names (`ldevid.crt -> current/ldevid.crt`, …); made once, replaced if wrong. */
export function ensureLinks(devidDir: string): void {
  let changed = false;
  for (const f of DEVID_FILES) {
    const path = join(devidDir, f);
    const want = `${CURRENT_LINK}/${f}`;
    let have: string | undefined;
    try {
      have = readlinkSync(path);
    } catch {
      have = undefined;
    }
    if (have === want) continue;
    const tmp = join(devidDir, `.${f}.${process.pid}.link`);
    rmSync(tmp, { force: true });
    symlinkSync(want, tmp);
    renameSync(tmp, path);
    changed = true;
  }
  if (changed) fsyncPath(devidDir);
}

/** Removes generation directories other than `keep` and temporary leftovers. */
function prune(devidDir: string, keep: string[]): void {
  for (const e of readdirSync(devidDir)) {
    if ((GEN_DIR.test(e) && !keep.includes(e)) || /^\..*\.tmp$/.test(e)) rmSync(join(devidDir, e), { recursive: true, force: true });
  }
}

export function readSeededRecord(devidDir: string): SeededRecord | undefined {
  const path = join(devidDir, SEEDED_RECORD);
  if (!lexists(path)) return undefined;
  try {
    const r = JSON.parse(Buffer.from(readBounded(path, "devid-corrupt")).toString("utf8")) as SeededRecord;
    if (r?.version !== 1 || typeof r.generation !== "number" || typeof r.node !== "string") throw new Error("not a seeded record");
    return r;
  } catch (e) {
    if (e instanceof DevidStoreError) throw e;
    throw new DevidStoreError("devid-corrupt", path, (e as Error).message);
  }
}

function writeSeededRecord(devidDir: string, set: DevidSet, now: Date): void {
  const path = join(devidDir, SEEDED_RECORD);
  const tmp = `${path}.${process.pid}.tmp`;
  rmSync(tmp, { force: true });
  const r: SeededRecord = {
    version: 1,
    seededAt: now.toISOString(),
    node: set.node,
    generation: set.generation,
    seedLdevidSha256: createHash("sha256").update(set.ldevidCertificate).digest("hex"),
  };
  writeSynced(tmp, JSON.stringify(r, null, 2) + "\n");
  renameSync(tmp, path);
  fsyncPath(devidDir);
}

export type SeedOutcome =
  /** The seed was copied: the directory had no generation. */
  | { action: "seeded"; current: DevidSet }
  /** The directory's generation is the seed's or newer: nothing copied. */
  | { action: "kept"; current: DevidSet; seedGeneration?: number; seedProblem?: string }
  /** The seed is a newer generation of the same node (a re-provision): installed as the current generation. */
  | { action: "adopted"; current: DevidSet; previousGeneration: number };

/** Copies the seed into the devid directory once (the rules are in this file's comment). */
export function ensureSeeded(seedDir: string, devidDir: string, now: Date = new Date(), opts: InstallOptions = {}): SeedOutcome {
  ensureDir(devidDir);
  const current = readCurrent(devidDir);
  if (!current) {
    const seed = readSeed(seedDir);
    installGeneration(devidDir, seed, opts);
    writeSeededRecord(devidDir, seed, now);
    return { action: "seeded", current: seed };
  }
  let seed: DevidSet;
  try {
    seed = readSeed(seedDir);
  } catch (e) {
    // The devid directory is what the node runs on; a seed that is gone or damaged changes nothing.
    if (!(e instanceof DevidStoreError)) throw e;
    if (!readSeededRecord(devidDir)) writeSeededRecord(devidDir, current, now);
    return { action: "kept", current, seedProblem: e.message };
  }
  if (seed.node !== current.node) {
    throw new DevidStoreError("devid-other-node", devidDir, `holds node ${current.node} (generation ${current.generation}) but the seed is node ${seed.node}: remove the directory if this machine was re-provisioned as ${seed.node}`);
  }
  if (seed.generation > current.generation) {
    installGeneration(devidDir, seed, opts);
    writeSeededRecord(devidDir, seed, now);
    return { action: "adopted", current: seed, previousGeneration: current.generation };
  }
  if (!readSeededRecord(devidDir)) writeSeededRecord(devidDir, seed, now);
  return { action: "kept", current, seedGeneration: seed.generation };
}

/** The next generation's set: the renewed certificates and bundle with the same key blobs. */
export function renewedSet(current: DevidSet, issued: { ldevidCertificate: Uint8Array; lakCertificate: Uint8Array; caBundle: string }): DevidSet {
  const next = checkedSet(
    {
      ldevidCertificate: issued.ldevidCertificate,
      lakCertificate: issued.lakCertificate,
      caBundle: issued.caBundle,
      ldevidPublic: current.ldevidPublic,
      ldevidPrivate: current.ldevidPrivate,
      lakPublic: current.lakPublic,
      lakPrivate: current.lakPrivate,
    },
    "the renewed certificates",
    "devid-io",
  );
  if (next.node !== current.node) throw new DevidStoreError("devid-io", "the renewed certificates", `are for node ${next.node}, not ${current.node}`);
  if (next.generation <= current.generation) throw new DevidStoreError("devid-io", "the renewed certificates", `are generation ${next.generation}, not newer than ${current.generation}`);
  const spki = (d: Uint8Array) => Buffer.from(parseIssuedCertificate(d).spki).toString("hex");
  if (spki(next.ldevidCertificate) !== spki(current.ldevidCertificate)) throw new DevidStoreError("devid-io", "the renewed LDevID certificate", "certifies another key than the current one");
  if (spki(next.lakCertificate) !== spki(current.lakCertificate)) throw new DevidStoreError("devid-io", "the renewed LAK certificate", "certifies another key than the current one");
  return next;
}
