/**
 * Resolve a profile's authority references to certificate fingerprints:
 *  - builtin:<name> from builtin.ts;
 *  - site:<name> from the site directory (configuration): `<dir>/<name>.pem` (one or more PEM certificates),
 *    `.crt`/`.cer` (PEM or DER) or `.der`. A missing site set resolves to no certificate and is reported, so a
 *    profile that requires it fails closed.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type CertSummary, certSummary } from "../eventlog/certs.js";
import { BUILTIN_AUTHORITIES } from "./builtin.js";
import { AUTHORITY_REF } from "./schema.js";

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

const PEM = /-----BEGIN CERTIFICATE-----([A-Za-z0-9+/=\s]+?)-----END CERTIFICATE-----/g;

/** Certificates from a PEM bundle or a single DER certificate. */
export function readCertificates(bytes: Uint8Array, what: string): CertSummary[] {
  const text = Buffer.from(bytes).toString("latin1");
  const blocks = [...text.matchAll(PEM)];
  const ders = blocks.length > 0 ? blocks.map((m) => new Uint8Array(Buffer.from(m[1]!.replace(/\s+/g, ""), "base64"))) : [bytes];
  return ders.map((der, i) => {
    const c = certSummary(der);
    if (!c) throw new AuthorityConfigError("bad-certificate", `${what}: certificate ${i} is not a valid X.509 certificate`);
    return c;
  });
}

function siteSet(ref: string, name: string, siteDir: string | undefined): AuthoritySet {
  if (!siteDir) return { ref, certs: [] };
  for (const ext of [".pem", ".crt", ".cer", ".der"]) {
    const path = join(siteDir, name + ext);
    if (!existsSync(path)) continue;
    const certs = readCertificates(new Uint8Array(readFileSync(path)), path);
    return { ref, certs: certs.map((c) => ({ sha256: c.sha256, commonName: c.commonName })), source: path };
  }
  return { ref, certs: [] };
}

export function resolveAuthorities(refs: readonly string[], siteDir?: string): Map<string, AuthoritySet> {
  const out = new Map<string, AuthoritySet>();
  for (const ref of refs) {
    if (!AUTHORITY_REF.test(ref)) throw new AuthorityConfigError("bad-reference", `authority reference ${JSON.stringify(ref)} is malformed`);
    const [kind, name] = ref.split(":") as [string, string];
    if (kind === "builtin") {
      const b = BUILTIN_AUTHORITIES[name];
      if (!b) throw new AuthorityConfigError("bad-reference", `unknown built-in authority ${ref} (known: ${Object.keys(BUILTIN_AUTHORITIES).join(", ")})`);
      out.set(ref, { ref, certs: b.map((c) => ({ sha256: c.sha256, commonName: c.commonName })), source: "built in" });
    } else {
      out.set(ref, siteSet(ref, name, siteDir));
    }
  }
  return out;
}

/** The references (in order) whose sets contain the certificate with this fingerprint. */
export function matchingRefs(sha256: string, refs: readonly string[], authorities: Authorities): string[] {
  return refs.filter((r) => authorities.get(r)?.certs.some((c) => c.sha256 === sha256));
}
