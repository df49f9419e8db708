/**
 * Resolve a profile's authority references to certificate fingerprints:
 *  - builtin:<name> from builtin.ts;
 *  - site:<name> from the site directory (configuration): `<dir>/<name>.pem` (one or more PEM certificates),
 *    `.crt`/`.cer` (PEM or DER) or `.der`. A missing site set resolves to no certificate and is reported, so a
 *    profile that requires it fails closed.
 */
import { type CertSummary, certSummary } from "../eventlog/certs.js";
import { CertificateError } from "../x509/errors.js";
import { certificatesFromPem, looksLikePem } from "../x509/pem.js";

export interface AuthorityCert {
  sha256: string;
  commonName: string;
}

export interface AuthoritySet {
  ref: string;
  certs: AuthorityCert[];
  /** Where it came from (file path or "built in"); undefined when the set is not configured. */
  source?: string;
}

export type Authorities = ReadonlyMap<string, AuthoritySet>;

export class AuthorityConfigError extends Error {
  override readonly name = "AuthorityConfigError";
  constructor(
    readonly code: "bad-reference" | "bad-certificate",
    message: string,
  ) {
    super(message);
  }
}

/** Certificates from a PEM bundle (other blocks are ignored) or a single DER certificate. */
export function readCertificates(bytes: Uint8Array, what: string): CertSummary[] {
  let ders: Uint8Array[] = [bytes];
  if (looksLikePem(bytes)) {
    try {
      ders = certificatesFromPem(Buffer.from(bytes).toString("latin1"), { otherBlocks: "ignore" });
    } catch (e) {
      if (e instanceof CertificateError) throw new AuthorityConfigError("bad-certificate", `${what}: ${e.message}`);
      throw e;
    }
  }
  return ders.map((der, i) => {
    const c = certSummary(der);
    if (!c) throw new AuthorityConfigError("bad-certificate", `${what}: certificate ${i} is not a valid X.509 certificate`);
    return c;
  });
}

/** The references (in order) whose sets contain the certificate with this fingerprint. */
export function matchingRefs(sha256: string, refs: readonly string[], authorities: Authorities): string[] {
  return refs.filter((r) => authorities.get(r)?.certs.some((c) => c.sha256 === sha256));
}
