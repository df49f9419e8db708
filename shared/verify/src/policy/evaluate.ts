/**
 * Evaluate a class profile against evidence: a parsed event log and (normally) the PCR values a verified
 * quote vouches for. Steps, each adding reasons rather than stopping at the first:
 *  1. banks: which evidence banks the profile lets vouch for events (SHA-1 only if listed); the profile's
 *     required banks must be quoted; the quote and the log must carry the same allowed banks (a quoted allowed
 *     bank the log has no digests of fails, and so does an allowed bank the log carries that is not quoted);
 *  2. replay: every enforced PCR must be quoted in, and replay in, EVERY quoted allowed bank, and must not
 *     mismatch in any quoted bank; zero-event PCRs are unexplained (issue 10: one matching bank is not enough,
 *     the other bank's values would be the machine's choice);
 *  3. interpret only the PCRs that replayed (eventlog/interpret.ts), turning error findings into reasons;
 *     the profile's firmware-quirk tolerances (tolerances.ts) are the only exceptions, each reported;
 *  4. Secure Boot state, PK/KEK/db/dbx, authorities before and after the separator, shim's SBAT level.
 * Without quote PCRs the log is replayed against itself: useful to inspect a log, proves nothing, and the
 * verdict carries a warning saying so.
 */
import { bufferOf } from "../crypto/hash.js";
import { algName, TPM_ALG } from "../tcg/constants.js";
import type { Authority, SecureBootState, SignatureDatabase } from "../eventlog/secureboot.js";
import { interpretLog, type BootInterpretation } from "../eventlog/interpret.js";
import type { EventLog } from "../eventlog/parse.js";
import type { PcrValues } from "../attest/pcrs.js";
import { checkReplay, initialValue, type PcrReplayCheck, type Replay, replayLog } from "../eventlog/replay.js";
import { parseSbatLevel } from "../eventlog/sbat.js";
import { type Authorities, matchingRefs } from "./authorities.js";
import { ebsTolerance, interpretOptions, TOLERANCES } from "./tolerances.js";
import type { BankName, Profile } from "./schema.js";
import type { PolicyVerdict, Reason } from "./verdict.js";

export interface Evidence {
  log: EventLog;
  replay?: Replay;
  /** PCR values from a verified quote, by bank (TPM_ALG_ID) then PCR. */
  pcrs?: PcrValues;
  /** Which TPM made the quote (default 2.0): a profile judges only its own TPM family's evidence. */
  tpm?: "2.0" | "1.2";
}

export interface PcrStatus {
  pcr: number;
  role: "enforced" | "informational";
  /** Replay status per quoted bank name. */
  banks: Record<string, PcrReplayCheck["status"] | "not-quoted">;
  trusted: boolean;
}

export interface Evaluation extends PolicyVerdict {
  pcrSource: "quote" | "log";
  banksUsed: string[];
  pcrs: PcrStatus[];
  measuredBoot: BootInterpretation;
}

const BANK_ALGS: Record<BankName, number> = { sha1: TPM_ALG.SHA1, sha256: TPM_ALG.SHA256, sha384: TPM_ALG.SHA384, sha512: TPM_ALG.SHA512 };
const bankName = (alg: number) => algName(alg).toLowerCase();
const hex = (b: Uint8Array) => bufferOf(b).toString("hex");

/** Log-only mode: the replayed values themselves (start values for PCRs the log never extends). */
function selfPcrs(log: EventLog, replay: Replay, wanted: Set<number>): PcrValues {
  const out: PcrValues = new Map();
  for (const [alg, bank] of replay.banks) {
    const size = log.banks.find((b) => b.alg === alg)?.size ?? 0;
    const m = new Map<number, Uint8Array>();
    for (const pcr of wanted) m.set(pcr, bank.pcrs.get(pcr) ?? initialValue(size, pcr, replay.pcr0Start));
    out.set(alg, m);
  }
  return out;
}

function certLabel(c: { commonName: string; sha256: string }): string {
  return `"${c.commonName}" (sha256 ${c.sha256.slice(0, 16)}…)`;
}

class Collector {
  readonly reasons: Reason[] = [];
  readonly warnings: Reason[] = [];
  fail(check: string, detail: string, at: { pcr?: number; event?: number } = {}): void {
    this.reasons.push({ check, ...at, detail });
  }
  warn(check: string, detail: string, at: { pcr?: number; event?: number } = {}): void {
    this.warnings.push({ check, ...at, detail });
  }
}

/**
 * Step 2 for one PCR: it must be quoted in every bank that vouches (`trustAlgs`), replay there, and not mismatch
 * in any quoted bank. A bank the log carries no digests of is failed once for the whole bank (`bank-not-in-log`),
 * not per PCR. Returns whether the PCR's events are vouched for: it replays in every vouching bank the log
 * carries, and in at least one.
 */
function replayReasons(checks: PcrReplayCheck[], pcr: number, trustAlgs: ReadonlySet<number>, out: Collector, quoted: PcrValues): boolean {
  const mine = checks.filter((c) => c.pcr === pcr);
  let ok = true;
  for (const c of mine.filter((c) => c.status === "mismatch")) {
    ok = false;
    const hint = c.workaround ? ` (it matches only with the unlogged ${c.workaround.map((a) => JSON.stringify(a)).join(", ")} appended, which this profile does not tolerate)` : "";
    out.fail("pcr-replay", `PCR ${pcr} (${bankName(c.alg)}): the log replays to ${hex(c.replayed!)}, the quote has ${hex(c.expected)}${hint}`, { pcr });
  }
  const banks = [...trustAlgs].sort((a, b) => a - b);
  const quotedIn = banks.filter((a) => quoted.get(a)?.has(pcr));
  const notQuoted = banks.filter((a) => !quoted.get(a)?.has(pcr));
  if (quotedIn.length === 0) {
    out.fail("pcr-missing", `PCR ${pcr} is not in the evidence (${banks.map(bankName).join("/")})`, { pcr });
    return false;
  }
  if (notQuoted.length > 0) {
    ok = false;
    out.fail(
      "pcr-missing",
      `PCR ${pcr} is quoted in ${quotedIn.map(bankName).join(", ")} but not in ${notQuoted.map(bankName).join(", ")}: it must be quoted in every bank the quote carries`,
      { pcr },
    );
  }
  const of = (a: number) => mine.find((c) => c.alg === a);
  const unexplained = quotedIn.filter((a) => of(a)?.status === "no-events");
  if (unexplained.length > 0) {
    ok = false;
    const values = unexplained.map((a) => `${bankName(a)} ${hex(of(a)?.expected ?? new Uint8Array()).slice(0, 16)}…`);
    out.fail("pcr-unexplained", `PCR ${pcr}: the log extends nothing into it, so its value (${values.join(", ")}) is unexplained`, { pcr });
  }
  for (const a of quotedIn) {
    const c = of(a);
    if (c?.status !== "missing-digests") continue;
    ok = false;
    out.fail("pcr-replay", `PCR ${pcr} does not replay in ${bankName(a)}: events ${c.events?.join(", ")} carry no ${bankName(a)} digest`, { pcr });
  }
  // "no-bank" was failed for the whole bank; the PCR counts only through the banks the log does carry.
  return ok && quotedIn.some((a) => of(a)?.status === "match") && quotedIn.every((a) => of(a)?.status === "match" || of(a)?.status === "no-bank");
}

/**
 * Step 1's agreement of banks (quote evidence only): every quoted bank the profile lets vouch must be one the log
 * carries digests of, and every such bank the log carries must be quoted. Otherwise one bank's values are never
 * compared with anything — the room the issue-10 attack needs.
 */
function bankAgreement(log: EventLog, replay: Replay, quotedAllowed: number[], allowed: ReadonlySet<number>, present: number[], out: Collector): void {
  const logBanks = [...replay.banks.keys()].sort((a, b) => a - b);
  const names = (l: number[]) => l.map(bankName).join(", ") || "none";
  for (const a of quotedAllowed.filter((a) => !replay.banks.has(a))) {
    const b = bankName(a);
    const declared = log.banks.some((x) => x.alg === a);
    out.fail(
      "bank-not-in-log",
      `the quote has ${b} PCR values but the event log ${declared ? `declares ${b} without being able to replay it` : `carries no ${b} digests`} (log banks: ${names(logBanks)}), so the ${b} values are unexplained`,
    );
  }
  for (const a of logBanks.filter((a) => allowed.has(a) && !present.includes(a))) {
    const b = bankName(a);
    out.fail("bank-not-quoted", `the event log carries ${b} digests but the quote has no ${b} PCR values (quoted banks: ${names(present)}): the log's banks and the quoted banks must agree`);
  }
}

function checkDatabase(
  name: "PK" | "KEK" | "db",
  db: SignatureDatabase | undefined,
  constraint: { allowed: string[]; allowImageHashes: boolean } | undefined,
  auth: Authorities,
  out: Collector,
): void {
  if (!db || db.certs.length + db.sha256.length + db.other.reduce((a, o) => a + o.count, 0) === 0) {
    out.fail("secure-boot-keys", `${name} is ${db ? "empty" : "not measured"} although Secure Boot is on`, { pcr: 7, ...(db ? { event: db.event } : {}) });
    return;
  }
  if (!constraint) return;
  for (const c of db.certs) {
    if (matchingRefs(c.sha256, constraint.allowed, auth).length === 0) {
      out.fail(name.toLowerCase(), `${name} holds ${certLabel(c)}, which is in none of ${constraint.allowed.join(", ")}`, { pcr: 7, event: db.event });
    }
  }
  if (db.sha256.length > 0 && !constraint.allowImageHashes) {
    out.fail(name.toLowerCase(), `${name} holds ${db.sha256.length} SHA-256 image digests; this profile allows only certificates`, { pcr: 7, event: db.event });
  }
  for (const o of db.other) out.fail(name.toLowerCase(), `${name} holds ${o.count} entries of signature type ${o.type}`, { pcr: 7, event: db.event });
}

function authorityLabel(a: Authority): string {
  if (a.cert) return certLabel(a.cert);
  return `the db image digest ${a.sha256}`;
}

function checkAuthorities(sb: SecureBootState, profile: Profile, auth: Authorities, out: Collector): void {
  const pre = profile.authorities.preSeparator.allowed;
  for (const a of sb.preSeparatorAuthorities) {
    if (!a.cert || matchingRefs(a.cert.sha256, pre, auth).length === 0) {
      out.fail("authority", `a firmware driver was verified by ${authorityLabel(a)} before the separator, which profile ${profile.name} does not allow (allowed: ${pre.join(", ") || "none"})`, { pcr: 7, event: a.event });
    }
  }
  const post = profile.authorities.postSeparator;
  let required = 0;
  const requireAny = post.requireAny ?? post.allowed;
  for (const a of sb.postSeparatorAuthorities) {
    if (!a.cert) {
      if (!post.allowImageHashes) out.fail("authority", `an image was allowed by ${authorityLabel(a)}; profile ${profile.name} accepts only certificate authorities`, { pcr: 7, event: a.event });
      continue;
    }
    if (matchingRefs(a.cert.sha256, post.allowed, auth).length === 0) {
      out.fail("authority", `an image was verified by ${authorityLabel(a)} (${a.variable}), which profile ${profile.name} does not allow (allowed: ${post.allowed.join(", ")})`, { pcr: 7, event: a.event });
    }
    if (matchingRefs(a.cert.sha256, requireAny, auth).length > 0) required++;
  }
  if (required === 0) {
    const unconfigured = requireAny.filter((r) => !auth.get(r)?.source);
    out.fail(
      "authority-required",
      `no image after the separator was verified by ${requireAny.join(" or ")}${unconfigured.length ? ` (not configured: ${unconfigured.join(", ")})` : ""}`,
      { pcr: 7 },
    );
  }
}

function checkSbat(sb: SecureBootState, profile: Profile, out: Collector): void {
  const rule = profile.shim?.sbatLevel;
  if (!rule) return;
  if (!sb.sbatLevel) {
    if (rule.required) out.fail("sbat", `shim did not measure its SbatLevel (shim older than 15.3, or no shim); profile ${profile.name} requires SBAT level ≥ ${rule.minDate}`, { pcr: 7 });
    return;
  }
  const at = { pcr: 7, event: sb.sbatLevel.event };
  const level = parseSbatLevel(sb.sbatLevel.value);
  if (!level) {
    out.fail("sbat", `SbatLevel ${JSON.stringify(sb.sbatLevel.value)} is not in the sbat,1,<date> form`, at);
    return;
  }
  if (level.date < rule.minDate) out.fail("sbat", `SBAT level ${level.date} is older than the required ${rule.minDate}`, at);
  for (const [c, min] of Object.entries(rule.components)) {
    const got = level.components[c] ?? 1;
    if (got < min) out.fail("sbat", `SbatLevel has ${c},${got}; profile ${profile.name} requires ${c},${min} or higher`, at);
  }
}

function checkSecureBoot(mb: BootInterpretation, profile: Profile, auth: Authorities, out: Collector): void {
  const sb = mb.secureBoot;
  const rules = profile.secureBoot;
  if (!sb) {
    out.fail("secure-boot", "the Secure Boot state cannot be established: PCR 7 did not replay", { pcr: 7 });
    return;
  }
  if (!sb.enabled) {
    if (rules.required) {
      const how = sb.secureBootEvent === undefined ? "the SecureBoot variable was not measured" : `SecureBoot = ${sb.secureBootValue || "<empty>"}`;
      out.fail("secure-boot", `Secure Boot is not enabled (${how})`, { pcr: 7, ...(sb.secureBootEvent !== undefined ? { event: sb.secureBootEvent } : {}) });
    }
    return;
  }
  checkDatabase("PK", sb.pk, rules.pk, auth, out);
  checkDatabase("KEK", sb.kek, rules.kek, auth, out);
  checkDatabase("db", sb.db, rules.db, auth, out);
  if (rules.dbx) {
    const dbx = sb.dbx;
    const n = dbx ? dbx.certs.length + dbx.sha256.length + dbx.other.reduce((a, o) => a + o.count, 0) : 0;
    if (n < rules.dbx.minEntries) out.fail("dbx", `dbx has ${n} entries; profile ${profile.name} requires at least ${rules.dbx.minEntries}`, { pcr: 7, ...(dbx ? { event: dbx.event } : {}) });
    const have = new Set(dbx?.sha256 ?? []);
    const missing = rules.dbx.required.filter((h) => !have.has(h));
    if (missing.length) out.fail("dbx", `dbx lacks ${missing.length} required revocations (first: ${missing[0]})`, { pcr: 7, ...(dbx ? { event: dbx.event } : {}) });
  }
  if (sb.dmaProtectionDisabled && !rules.allowDmaProtectionDisabled) out.fail("dma-protection", "firmware reports DMA protection disabled", { pcr: 7 });
  checkAuthorities(sb, profile, auth, out);
  checkSbat(sb, profile, out);
}

export function evaluateProfile(profile: Profile, evidence: Evidence, authorities: Authorities): Evaluation {
  const out = new Collector();
  const { log } = evidence;
  const replay = evidence.replay ?? replayLog(log);
  const enforced = new Set(profile.pcrs.enforced);
  const informational = new Set(profile.pcrs.informational);
  const wanted = new Set([...enforced, ...informational]);
  const pcrSource = evidence.pcrs ? "quote" : "log";
  const quoted = evidence.pcrs ?? selfPcrs(log, replay, wanted);
  if (!evidence.pcrs) out.warn("evidence", "no quote-verified PCR values: the log was replayed against itself, which proves nothing about a machine");
  for (const w of log.warnings) out.warn("log-format", w);

  // 0. the profile's TPM family
  const tpm = evidence.tpm ?? "2.0";
  if (tpm !== profile.tpm) {
    out.fail("profile-tpm", `profile ${profile.name} judges TPM ${profile.tpm} evidence; this evidence comes from a TPM ${tpm}`);
  }

  // 1. banks
  const allowed = new Set(profile.banks.allowed.map((b) => BANK_ALGS[b]));
  const present = [...quoted.keys()].filter((a) => (quoted.get(a)?.size ?? 0) > 0).sort((a, b) => a - b);
  const quotedAllowed = present.filter((a) => allowed.has(a));
  let trustAlgs = new Set(quotedAllowed);
  if (trustAlgs.size === 0) {
    out.fail("bank", `the evidence has only ${present.map(bankName).join(", ") || "no"} PCR values; profile ${profile.name} accepts ${profile.banks.allowed.join(", ")}`);
    trustAlgs = new Set(present); // keep interpreting, so the verdict can name every other problem too
  }
  for (const b of profile.banks.required.filter((b) => !present.includes(BANK_ALGS[b]))) {
    out.fail("bank-required", `the evidence has no ${b} PCR values (it has ${present.map(bankName).join(", ") || "none"}); profile ${profile.name} requires ${b}, the bank firmware always extends, so that a machine cannot leave its real boot out by quoting another bank`);
  }
  if (evidence.pcrs) bankAgreement(log, replay, quotedAllowed, allowed, present, out);

  // 2. replay
  const restricted: PcrValues = new Map([...quoted].map(([a, m]) => [a, new Map([...m].filter(([p]) => wanted.has(p)))]));
  // A match that needed the unlogged Exit-Boot-Services strings counts only under the profile's tolerance.
  const checks = checkReplay(log, replay, restricted).map((c): PcrReplayCheck => {
    if (!c.workaround) return c;
    const tolerance = ebsTolerance(profile.tolerances, c.workaround);
    if (tolerance) {
      out.warn("tolerated", `PCR ${c.pcr} (${bankName(c.alg)}) replays only with the unlogged ${c.workaround.map((a) => JSON.stringify(a)).join(", ")} appended; accepted by tolerance ${tolerance} (${TOLERANCES[tolerance].source.log})`, { pcr: c.pcr });
      return c;
    }
    return { ...c, status: "mismatch", replayed: c.withoutWorkaround ?? c.replayed ?? new Uint8Array() };
  });
  const trusted = new Set<number>();
  const pcrs: PcrStatus[] = [];
  for (const pcr of [...wanted].sort((a, b) => a - b)) {
    const role = enforced.has(pcr) ? "enforced" : "informational";
    const sink = role === "enforced" ? out : new Collector();
    const ok = replayReasons(checks, pcr, trustAlgs, sink, quoted);
    if (role === "informational") for (const r of sink.reasons) if (r.check !== "pcr-missing") out.warn(r.check, r.detail, { pcr });
    if (ok) trusted.add(pcr);
    const banks: PcrStatus["banks"] = {};
    for (const a of present) banks[bankName(a)] = checks.find((c) => c.alg === a && c.pcr === pcr)?.status ?? "not-quoted";
    pcrs.push({ pcr, role, banks, trusted: ok });
  }

  // 3. interpretation of what replayed
  const mb = interpretLog(log, trusted, interpretOptions(profile.tolerances));
  for (const f of mb.findings) {
    const at = { ...(f.pcr !== undefined ? { pcr: f.pcr } : {}), ...(f.event !== undefined ? { event: f.event } : {}) };
    if (f.severity === "error" && (f.pcr === undefined || enforced.has(f.pcr))) out.fail(f.check, f.detail, at);
    else out.warn(f.check, f.detail, at);
  }

  // 4. Secure Boot and authorities
  checkSecureBoot(mb, profile, authorities, out);
  for (const set of authorities.values()) {
    if (!set.source) out.warn("authority-config", `authority set ${set.ref} is not configured (no site certificate file)`);
  }

  return {
    verdict: out.reasons.length === 0 ? "pass" : "fail",
    profile: profile.name,
    reasons: out.reasons,
    warnings: out.warnings,
    pcrSource,
    banksUsed: [...trustAlgs].map(bankName),
    pcrs,
    measuredBoot: mb,
  };
}
