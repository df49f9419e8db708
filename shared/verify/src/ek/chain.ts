/**
 * Certification path building and validation (RFC 5280 §6, restricted to what EK chains need):
 * leaf → intermediates → a self-signed root found in the CA store.
 *
 * Every candidate issuer with the right subject name is tried (key identifiers only order the search);
 * an edge exists when the issuer's key verifies the child's signature over its original tbsCertificate.
 * A complete path is then judged: validity at `at`, CA basicConstraints, keyCertSign, pathLenConstraint,
 * unknown critical extensions, and the root's own signature. The first path with no failed check passes;
 * otherwise the reasons of the best path (or of the search) are returned.
 *
 * Expiry: enforced by default. EK certificates are long-lived identity documents and several real EK
 * intermediates have expired (Infineon "IFX TPM EK Intermediate CA 01", 2025-10-20) while TPMs they
 * certified remain genuine; `allowExpired: true` accepts an expired certificate with a warning. notBefore
 * is always enforced. SHA-1 signatures are accepted with a warning (Infineon's EK intermediates are
 * SHA-1-signed by their root), unless `rejectSha1: true`.
 */
import type { Reason as VerdictReason } from "../attest/verdict.js";
import { type Certificate, serialHex } from "../x509/certificate.js";
import { UNDERSTOOD_EXTENSIONS, extensionName } from "../x509/extensions.js";
import { formatName, nameKey } from "../x509/names.js";
import { verifyCertificateSignature, signatureScheme } from "../x509/signature.js";
import { type CanonicalKey, canonicalKey } from "../x509/spki.js";
import type { CaStore } from "./store.js";

export interface ChainOptions {
  /** Validation time; default now. */
  at?: Date;
  /** Accept certificates past notAfter (each reported as a warning). Default false. */
  allowExpired?: boolean;
  /** Refuse SHA-1 signatures in the chain. Default false (accepted with a warning). */
  rejectSha1?: boolean;
  /** Let a store certificate that is not self-signed end the chain (openssl -partial_chain). Default false. */
  partialChain?: boolean;
  /** Untrusted certificates usable as intermediates (e.g. the rest of a PEM bundle). */
  intermediates?: Certificate[];
  /** Longest path considered, leaf and root included. Default 8. */
  maxLength?: number;
  /** Most issuer signatures tried while searching (bounds stores full of same-named cross-certificates). Default 2000. */
  maxSignatureChecks?: number;
}

/** Chain refusals are the same `{ check, detail }` reasons as every other verdict. */
export type ChainReason = Pick<VerdictReason, "check" | "detail">;

export interface ChainLink {
  subject: string;
  issuer: string;
  serial: string;
  fingerprint: string;
  notBefore: string;
  notAfter: string;
  /** "input", "input#n" (bundle), or the store file it came from. */
  source: string;
}

export interface ChainVerdict {
  verdict: "pass" | "fail";
  chain: ChainLink[];
  reasons: ChainReason[];
  warnings: ChainReason[];
}

interface Node {
  cert: Certificate;
  source: string;
  trusted: boolean;
}

export function isSelfIssued(c: Certificate): boolean {
  return nameKey(c.subject) === nameKey(c.issuer);
}

/** `"CN=…"` or, for an empty subject (EK certificates), the serial and issuer. */
export function describeCertificate(c: Certificate): string {
  if (c.subject.rdns.length > 0) return `"${formatName(c.subject)}"`;
  return `certificate ${serialHex(c)} issued by "${formatName(c.issuer)}"`;
}

export function chainLink(n: { cert: Certificate; source: string }): ChainLink {
  return {
    subject: formatName(n.cert.subject),
    issuer: formatName(n.cert.issuer),
    serial: serialHex(n.cert),
    fingerprint: n.cert.fingerprint,
    notBefore: n.cert.notBefore.toISOString(),
    notAfter: n.cert.notAfter.toISOString(),
    source: n.source,
  };
}

export function verifyCertificateChain(leaf: Certificate, store: CaStore, opts: ChainOptions = {}): ChainVerdict {
  const at = opts.at ?? new Date();
  const maxLength = opts.maxLength ?? 8;
  const keys = new Map<string, CanonicalKey | Error>();
  const keyOf = (c: Certificate): CanonicalKey | Error => {
    let k = keys.get(c.fingerprint);
    if (!k) {
      try {
        k = canonicalKey(c.spki);
      } catch (e) {
        k = e as Error;
      }
      keys.set(c.fingerprint, k);
    }
    return k;
  };
  const extra: Node[] = (opts.intermediates ?? []).map((cert, i) => ({ cert, source: `input#${i + 1}`, trusted: false }));
  const storeFp = (c: Certificate) => store.byFingerprint.get(c.fingerprint);
  const issuersOf = (c: Certificate): Node[] => {
    const k = nameKey(c.issuer);
    const fromStore = (store.bySubject.get(k) ?? []).map((e) => ({ cert: e.cert, source: e.source, trusted: true }));
    const fromInput = extra.filter((n) => nameKey(n.cert.subject) === k && !storeFp(n.cert));
    const all = [...fromStore, ...fromInput];
    const aki = c.ext.authorityKeyIdentifier;
    if (!aki) return all;
    const hex = Buffer.from(aki).toString("hex");
    const skiOf = (n: Node) => (n.cert.ext.subjectKeyIdentifier ? Buffer.from(n.cert.ext.subjectKeyIdentifier).toString("hex") : undefined);
    return [...all.filter((n) => skiOf(n) === hex), ...all.filter((n) => skiOf(n) !== hex)];
  };

  const budget = opts.maxSignatureChecks ?? 2000;
  const edges = new Map<string, ReturnType<typeof verifyCertificateSignature>>();
  const edge = (child: Certificate, parent: Certificate, key: CanonicalKey) => {
    const k = `${child.fingerprint}>${parent.fingerprint}`;
    let r = edges.get(k);
    if (!r) {
      r = verifyCertificateSignature(child, key);
      edges.set(k, r);
    }
    return r;
  };
  let exhausted = false;
  const searchFailures: ChainReason[] = [];
  const complete: { path: Node[]; reasons: ChainReason[]; warnings: ChainReason[] }[] = [];
  let deepest: Node[] = [];
  let passed = false;

  const start = storeFp(leaf);
  const leafNode: Node = { cert: leaf, source: start ? start.source : "input", trusted: start !== undefined };

  const finish = (path: Node[]) => {
    const judged = judgePath(path, at, opts, keyOf);
    complete.push({ path, ...judged });
    if (judged.reasons.length === 0) passed = true;
  };

  const search = (path: Node[]): void => {
    if (passed) return;
    if (path.length > deepest.length) deepest = path;
    const node = path[path.length - 1] as Node;
    const c = node.cert;
    if (isSelfIssued(c)) {
      if (node.trusted) finish(path);
      else searchFailures.push({ check: "chain", detail: `${describeCertificate(c)} is self-signed but not in the trust store` });
      return;
    }
    if (path.length >= maxLength) {
      searchFailures.push({ check: "chain", detail: `no root within ${maxLength} certificates` });
      return;
    }
    const candidates = issuersOf(c).filter((n) => !path.some((p) => p.cert.fingerprint === n.cert.fingerprint));
    if (candidates.length === 0) {
      if (opts.partialChain && node.trusted) finish(path);
      else searchFailures.push({ check: "chain", detail: `no certificate in the trust store has subject "${formatName(c.issuer)}" (issuer of ${describeCertificate(c)})` });
      return;
    }
    for (const cand of candidates) {
      if (passed || exhausted) return;
      if (edges.size >= budget) {
        exhausted = true;
        searchFailures.push({ check: "chain", detail: `path search stopped after ${budget} signature checks` });
        return;
      }
      const key = keyOf(cand.cert);
      if (key instanceof Error) {
        searchFailures.push({ check: "signature", detail: `issuer candidate ${describeCertificate(cand.cert)} has an unusable key: ${key.message}` });
        continue;
      }
      const sig = edge(c, cand.cert, key);
      if (!sig.ok) {
        searchFailures.push({ check: "signature", detail: `${describeCertificate(c)}: ${sig.detail} with the key of ${describeCertificate(cand.cert)} (${cand.source})` });
        continue;
      }
      search([...path, cand]);
    }
    if (!passed && opts.partialChain && node.trusted && path.length > 1) finish(path);
  };

  search([leafNode]);

  const best = complete.find((p) => p.reasons.length === 0) ?? [...complete].sort((a, b) => a.reasons.length - b.reasons.length)[0];
  if (best) {
    return {
      verdict: best.reasons.length === 0 ? "pass" : "fail",
      chain: best.path.map(chainLink),
      reasons: best.reasons,
      warnings: best.warnings,
    };
  }
  return { verdict: "fail", chain: deepest.map(chainLink), reasons: dedupe(searchFailures), warnings: [] };
}

function dedupe(rs: ChainReason[]): ChainReason[] {
  const seen = new Set<string>();
  return rs.filter((r) => {
    const k = `${r.check}\u0000${r.detail}`;
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}

/** The checks on a complete path [leaf, …, anchor] whose signatures have already been verified edge by edge. */
function judgePath(
  path: Node[],
  at: Date,
  opts: ChainOptions,
  keyOf: (c: Certificate) => CanonicalKey | Error,
): { reasons: ChainReason[]; warnings: ChainReason[] } {
  const reasons: ChainReason[] = [];
  const warnings: ChainReason[] = [];
  const last = path.length - 1;
  path.forEach(({ cert: c }, i) => {
    const who = describeCertificate(c);
    if (!equalBytes(c.tbsSignatureAlgorithm.der, c.signatureAlgorithm.der)) {
      reasons.push({ check: "signature-algorithm", detail: `${who}: tbsCertificate.signature differs from signatureAlgorithm` });
    }
    if (at < c.notBefore) {
      reasons.push({ check: "validity", detail: `${who} is not valid before ${c.notBefore.toISOString()} (checked at ${at.toISOString()})` });
    }
    if (at > c.notAfter) {
      const r = { check: "validity", detail: `${who} expired ${c.notAfter.toISOString()} (checked at ${at.toISOString()})` };
      if (opts.allowExpired) warnings.push({ ...r, detail: `${r.detail}; accepted because expired certificates are allowed` });
      else reasons.push(r);
    }
    for (const e of c.extensions) {
      if (e.critical && !UNDERSTOOD_EXTENSIONS.has(e.oid)) {
        reasons.push({ check: "critical-extension", detail: `${who} has critical extension ${extensionName(e.oid)} that fleetd does not process` });
      }
    }
    if (i < last && schemeHash(c) === "sha1") {
      // The signature on c was made by path[i+1]; a root's own SHA-1 self-signature carries no trust.
      const r = { check: "sha1", detail: `${who} is signed with SHA-1` };
      if (opts.rejectSha1) reasons.push(r);
      else warnings.push(r);
    }
    if (i >= 1) {
      const bc = c.ext.basicConstraints;
      if (!bc) {
        if (i === last && c.version < 3) warnings.push({ check: "ca", detail: `trust anchor ${who} is a v${c.version} certificate without basicConstraints` });
        else reasons.push({ check: "ca", detail: `issuer ${who} has no basicConstraints, so it is not a CA` });
      } else if (!bc.cA) {
        reasons.push({ check: "ca", detail: `issuer ${who} has basicConstraints cA=FALSE` });
      } else if (bc.pathLenConstraint !== undefined) {
        const below = path.slice(1, i).filter((n) => !isSelfIssued(n.cert)).length;
        if (below > bc.pathLenConstraint) {
          reasons.push({ check: "path-length", detail: `issuer ${who} allows ${bc.pathLenConstraint} intermediate CA(s) below it, the path has ${below}` });
        }
      }
      const ku = c.ext.keyUsage;
      if (ku && !ku.includes("keyCertSign")) reasons.push({ check: "key-usage", detail: `issuer ${who} keyUsage lacks keyCertSign` });
    }
  });
  const anchor = path[last] as Node;
  if (isSelfIssued(anchor.cert)) {
    const key = keyOf(anchor.cert);
    const sig = key instanceof Error ? { ok: false as const, detail: key.message } : verifyCertificateSignature(anchor.cert, key);
    if (!sig.ok) reasons.push({ check: "root", detail: `root ${describeCertificate(anchor.cert)}: self-signature: ${sig.detail}` });
  }
  return { reasons, warnings };
}

function schemeHash(c: Certificate): string | undefined {
  try {
    return signatureScheme(c.signatureAlgorithm).hash;
  } catch {
    return undefined;
  }
}

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}
