/**
 * Certificates found in Secure Boot variables and authority events, summarised for reports and policy:
 * subject, issuer, SHA-256 fingerprint of the DER. Parsing is @fleetd/verify/x509's (lenient DER, as for EK
 * certificates: vendors' encodings are read as they are); names are printed as OpenSSL prints them (what
 * node's X509Certificate showed before, and what policy profiles match on). A blob that is not a certificate
 * is reported as such, never thrown past the caller.
 */
import { hash } from "node:crypto";
import { type Certificate, parseCertificate, serialNumberText } from "../x509/certificate.js";
import { opensslNameText } from "../x509/names.js";

export interface CertSummary {
  /** Lowercase hex SHA-256 of the DER encoding: the identity policies match on. */
  sha256: string;
  subject: string;
  issuer: string;
  /** The subject's CN, or the whole subject when it has none. */
  commonName: string;
  serialNumber: string;
  der: Uint8Array;
}

function oneLine(dn: string): string {
  return dn.split("\n").filter((s) => s.length > 0).join(", ");
}

function commonNameOf(dn: string): string | undefined {
  for (const line of dn.split("\n")) if (line.startsWith("CN=")) return line.slice(3);
  return undefined;
}

/**
 * Summaries by SHA-256 of their DER. The same vendor certificates (Microsoft's CAs, the lab's keys) appear in
 * nearly every log a verifier sees. Bounded: cleared when full.
 */
const cache = new Map<string, CertSummary | null>();
const CACHE_MAX = 4096;

function summarise(der: Uint8Array, sha256: string): CertSummary | undefined {
  let cert: Certificate;
  let subject: string;
  let issuer: string;
  try {
    cert = parseCertificate(der);
    subject = opensslNameText(cert.subject);
    issuer = opensslNameText(cert.issuer);
  } catch {
    return undefined;
  }
  return {
    sha256,
    subject: oneLine(subject),
    issuer: oneLine(issuer),
    commonName: commonNameOf(subject) ?? oneLine(subject),
    serialNumber: serialNumberText(cert),
    der: new Uint8Array(der),
  };
}

/** Summarise a DER certificate; undefined when the bytes are not exactly one parseable certificate. */
export function certSummary(der: Uint8Array): CertSummary | undefined {
  const sha256 = hash("sha256", der, "hex");
  const hit = cache.get(sha256);
  if (hit !== undefined) return hit ?? undefined;
  const c = summarise(der, sha256);
  if (cache.size >= CACHE_MAX) cache.clear();
  cache.set(sha256, c ?? null);
  return c;
}
