/**
 * JSON views of parsed/replayed/interpreted logs, for the CLI and the API. Bytes are lowercase hex,
 * banks are keyed by lowercase name, PCRs by decimal index.
 */
import { algName } from "../tcg/constants.js";
import type { CertSummary } from "./certs.js";
import { eventTypeName } from "./events.js";
import type { Finding } from "./findings.js";
import type { BootInterpretation } from "./interpret.js";
import type { EventLog } from "./parse.js";
import type { Replay } from "./replay.js";
import type { Authority, SecureBootState, SignatureDatabase } from "./secureboot.js";

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

export function certJson(c: CertSummary & { owner?: string }) {
  return { commonName: c.commonName, subject: c.subject, issuer: c.issuer, sha256: c.sha256, ...(c.owner ? { owner: c.owner } : {}) };
}

function dbJson(db: SignatureDatabase | undefined) {
  if (!db) return null;
  return { event: db.event, certs: db.certs.map(certJson), sha256: db.sha256, entries: db.certs.length + db.sha256.length + db.other.reduce((a, o) => a + o.count, 0), other: db.other };
}

function authorityJson(a: Authority) {
  return {
    event: a.event,
    variable: a.variable,
    guid: a.guid,
    ...(a.cert ? { cert: certJson(a.cert) } : {}),
    ...(a.sha256 ? { sha256: a.sha256 } : {}),
    ...(a.owner ? { owner: a.owner } : {}),
    quirks: a.quirks,
  };
}

export function secureBootJson(sb: SecureBootState | undefined) {
  if (!sb) return null;
  return {
    enabled: sb.enabled,
    secureBootVariable: sb.secureBootValue ?? null,
    pk: dbJson(sb.pk),
    kek: dbJson(sb.kek),
    db: dbJson(sb.db),
    dbx: dbJson(sb.dbx),
    separatorEvent: sb.separatorEvent ?? null,
    authorities: { beforeSeparator: sb.preSeparatorAuthorities.map(authorityJson), afterSeparator: sb.postSeparatorAuthorities.map(authorityJson) },
    sbatLevel: sb.sbatLevel?.value ?? null,
    mokListTrusted: sb.mokListTrusted?.value ?? null,
    mokSbState: sb.mokSbState?.value ?? null,
    dmaProtectionDisabled: sb.dmaProtectionDisabled,
    debugMode: sb.debugMode,
    otherVariables: sb.otherVariables,
  };
}

export function pcrsJson(replay: Replay): Record<string, Record<string, string>> {
  const out: Record<string, Record<string, string>> = {};
  for (const [alg, bank] of replay.banks) {
    const m: Record<string, string> = {};
    for (const [pcr, v] of [...bank.pcrs].sort((a, b) => a[0] - b[0])) m[String(pcr)] = hex(v);
    out[algName(alg).toLowerCase()] = m;
  }
  return out;
}

export function eventsJson(log: EventLog) {
  return log.events.map((e) => ({
    index: e.index,
    offset: e.offset,
    pcr: e.pcr,
    type: eventTypeName(e.type),
    digests: Object.fromEntries(e.digests.map((d) => [algName(d.hashAlg).toLowerCase(), hex(d.digest)])),
    dataSize: e.data.length,
  }));
}

export function findingJson(f: Finding) {
  return { check: f.check, severity: f.severity, ...(f.pcr !== undefined ? { pcr: f.pcr } : {}), ...(f.event !== undefined ? { event: f.event } : {}), detail: f.detail };
}

/** The whole `fleetd verify eventlog --json` object. */
export function eventLogReport(log: EventLog, replay: Replay, mb: BootInterpretation) {
  return {
    format: log.format,
    banks: log.banks.map((b) => ({ name: b.name, digestSize: b.size, computable: b.computable })),
    eventCount: log.events.length,
    pcr0Start: replay.pcr0Start,
    pcrs: pcrsJson(replay),
    secureBoot: secureBootJson(mb.secureBoot),
    bootApplications: mb.bootApplications,
    bootDrivers: mb.bootDrivers,
    exitBootServicesEvent: mb.exitBootServices ?? null,
    events: eventsJson(log),
    warnings: [
      ...log.warnings.map((w) => ({ check: "log-format", severity: "warning" as const, detail: w })),
      ...log.banks.filter((b) => !b.computable).map((b) => ({ check: "bank", severity: "warning" as const, detail: `bank ${b.name} (${b.size}-byte digests) cannot be computed here and was skipped` })),
      ...mb.findings.map(findingJson),
    ],
  };
}
