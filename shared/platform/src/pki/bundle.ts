/**
 * CA rollover. The bundle (SPIRE's `devid_ca_path`, fleetd's own verifier) holds the issuing CA, any CA
 * added to activate later (so it can be published before it signs anything), and each retired CA until its
 * removal date = its last issuance + the maximum leaf lifetime (30 days) — and never before the latest
 * notAfter it signed, nor before it was retired. A CA that never issued leaves the bundle when retired.
 *
 * Record an issuance (and persist the state) before the certificate is released: a crash in between
 * then only keeps a CA a little longer, never drops a CA a live certificate chains to.
 * All functions are pure: they return a new state.
 */
import { PkiError } from "./errors.js";
import { checkCaCertificate, fingerprint } from "./issueLeaf.js";
import { parseIssuedCertificate } from "./parseCertificate.js";
import { certificateToPem } from "@fleetd/verify/x509";
import { DAY_MS, MAX_LEAF_LIFETIME_DAYS } from "./profiles.js";
import { checkBundleState, type BundleState, type CaRecord } from "./bundleState.js";

export function emptyBundleState(): BundleState {
  return { cas: [] };
}

/** Add a CA that issues from `activatesAt` on (use "now" to switch at once); the previous CA is retired then. */
export function addCa(state: BundleState, certificate: Uint8Array | string, activatesAt: Date): BundleState {
  const info = parseIssuedCertificate(certificate, "new CA certificate");
  checkCaCertificate(info);
  const fp = fingerprint(info.der);
  if (state.cas.some((c) => c.fingerprint === fp)) throw new PkiError("ca-duplicate", `CA "${info.subjectCn}" (${fp}) is already in the bundle`);
  const last = state.cas[state.cas.length - 1];
  if (last && !(activatesAt > last.activatesAt)) {
    throw new PkiError("activation-order", `the new CA must activate after the last one (${last.activatesAt.toISOString()}), not at ${activatesAt.toISOString()}`);
  }
  if (activatesAt < info.notBefore || activatesAt >= info.notAfter) {
    throw new PkiError("activation-order", `CA "${info.subjectCn}" is not valid at its activation time ${activatesAt.toISOString()}`);
  }
  const record: CaRecord = { certificatePem: certificateToPem(info.der), fingerprint: fp, activatesAt, lastIssuance: null, lastNotAfter: null };
  const next = { cas: [...state.cas, record] };
  checkBundleState(next);
  return next;
}

/** The CA that issues at time t: the last one activated at or before t. */
export function currentCa(state: BundleState, t: Date): CaRecord {
  let current: CaRecord | undefined;
  for (const ca of state.cas) if (ca.activatesAt <= t) current = ca;
  if (!current) throw new PkiError("no-current-ca", `no CA is active at ${t.toISOString()}`);
  return current;
}

/** When a CA leaves the bundle; undefined while it is the last-added CA (current or pending). */
export function removalDate(state: BundleState, ca: CaRecord): Date | undefined {
  const i = state.cas.indexOf(ca);
  const successor = state.cas[i + 1];
  if (i < 0 || !successor) return undefined;
  let removal = successor.activatesAt.getTime();
  if (ca.lastIssuance) removal = Math.max(removal, ca.lastIssuance.getTime() + MAX_LEAF_LIFETIME_DAYS * DAY_MS);
  if (ca.lastNotAfter) removal = Math.max(removal, ca.lastNotAfter.getTime());
  return new Date(removal);
}

/** Record that the CA with this fingerprint issued a certificate at `at`, valid until `notAfter`. */
export function recordIssuance(state: BundleState, issuance: { issuerFingerprint: string; at: Date; notAfter: Date }): BundleState {
  const current = currentCa(state, issuance.at);
  if (current.fingerprint !== issuance.issuerFingerprint) {
    throw new PkiError("ca-not-current", `CA ${issuance.issuerFingerprint} is not the issuing CA at ${issuance.at.toISOString()} (that is ${current.fingerprint})`);
  }
  const later = (a: Date | null, b: Date): Date => (a && a > b ? a : b);
  return {
    cas: state.cas.map((c) =>
      c === current ? { ...c, lastIssuance: later(c.lastIssuance, issuance.at), lastNotAfter: later(c.lastNotAfter, issuance.notAfter) } : c,
    ),
  };
}

export interface BundleEntry {
  record: CaRecord;
  status: "current" | "pending" | "retired";
  /** Set for retired CAs. */
  removalDate?: Date;
}

/** The CAs to trust at time t: current first, then pending, then retired ones not yet past their removal date. */
export function bundleAt(state: BundleState, t: Date): BundleEntry[] {
  const current = state.cas.filter((c) => c.activatesAt <= t).at(-1);
  const out: BundleEntry[] = [];
  if (current) out.push({ record: current, status: "current" });
  for (const c of state.cas) if (c.activatesAt > t) out.push({ record: c, status: "pending" });
  for (const c of [...state.cas].reverse()) {
    if (c === current || c.activatesAt > t) continue;
    const removal = removalDate(state, c);
    if (removal && removal > t) out.push({ record: c, status: "retired", removalDate: removal });
  }
  return out;
}

/** The bundle at time t as one PEM file (SPIRE `devid_ca_path`). */
export function bundlePem(state: BundleState, t: Date): string {
  return bundleAt(state, t)
    .map((e) => e.record.certificatePem)
    .join("");
}

/** Drop CAs past their removal date at t from the state itself. */
export function pruneBundleState(state: BundleState, t: Date): BundleState {
  const keep = new Set(bundleAt(state, t).map((e) => e.record));
  return { cas: state.cas.filter((c) => keep.has(c)) };
}
