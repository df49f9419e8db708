/**
 * Certificates found in Secure Boot variables and authority events, summarised for reports and policy:
 * subject, issuer, SHA-256 fingerprint of the DER. Parsing uses node:crypto's X509Certificate; a blob that is
 * not a certificate is reported as such, never thrown past the caller.
 */
import { createHash, X509Certificate } from "node:crypto";

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
 * Length of the DER TLV at the start of `b` (tag, length, contents), or undefined when `b` does not start
 * with a well-formed definite-length SEQUENCE that fits.
 */
export function derSequenceLength(b: Uint8Array): number | undefined {
  if (b.length < 2 || b[0] !== 0x30) return undefined;
  const l0 = b[1]!;
  let len: number;
  let hdr: number;
  if (l0 < 0x80) {
    len = l0;
    hdr = 2;
  } else {
    const n = l0 & 0x7f;
    if (n === 0 || n > 4 || b.length < 2 + n) return undefined;
    len = 0;
    for (let i = 0; i < n; i++) len = len * 256 + b[2 + i]!;
    hdr = 2 + n;
  }
  const total = hdr + len;
  return total <= b.length ? total : undefined;
}

/**
 * Parsed certificates by SHA-256 of their DER. The same vendor certificates (Microsoft's CAs, the lab's
 * keys) appear in nearly every log a verifier sees; X509Certificate parsing dominates interpretation time.
 * Bounded: cleared when full.
 */
const cache = new Map<string, CertSummary | null>();
const CACHE_MAX = 4096;

function parseCert(der: Uint8Array, sha256: string): CertSummary | undefined {
  let x: X509Certificate;
  try {
    x = new X509Certificate(der);
  } catch {
    return undefined;
  }
  return {
    sha256,
    subject: oneLine(x.subject),
    issuer: oneLine(x.issuer),
    commonName: commonNameOf(x.subject) ?? oneLine(x.subject),
    serialNumber: x.serialNumber.toLowerCase(),
    der: new Uint8Array(der),
  };
}

/** Summarise a DER certificate; undefined when the bytes are not exactly one parseable certificate. */
export function certSummary(der: Uint8Array): CertSummary | undefined {
  if (derSequenceLength(der) !== der.length) return undefined;
  const sha256 = createHash("sha256").update(der).digest("hex");
  const hit = cache.get(sha256);
  if (hit !== undefined) return hit ?? undefined;
  const c = parseCert(der, sha256);
  if (cache.size >= CACHE_MAX) cache.clear();
  cache.set(sha256, c ?? null);
  return c;
}
