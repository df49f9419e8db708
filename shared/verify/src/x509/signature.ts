/**
 * Certificate signatures: RSA PKCS#1 v1.5, RSASSA-PSS (RFC 4055) and ECDSA (RFC 5758), with SHA-1/224/256/384/512,
 * always verified over the certificate's original tbsCertificate bytes.
 */
import { verify, constants } from "node:crypto";
import { type AlgorithmIdentifier, type Certificate, readAlgorithmIdentifier } from "./certificate.js";
import { DerReader, TAG, contextTag } from "./der.js";
import { CertificateError } from "./errors.js";
import { OID } from "./oids.js";
import { type CanonicalKey, keyObjectFromCanonical } from "./spki.js";

export type SignatureHash = "sha1" | "sha224" | "sha256" | "sha384" | "sha512";

export interface SignatureScheme {
  kind: "rsa-pkcs1" | "rsa-pss" | "ecdsa";
  hash: SignatureHash;
  /** RSASSA-PSS salt length. */
  saltLength?: number;
  /** For reports: "sha256WithRSAEncryption", "RSASSA-PSS(sha384, salt 48)", "ecdsa-with-SHA384". */
  label: string;
}

const PKCS1: Record<string, SignatureHash> = {
  [OID.sha1WithRSAEncryption]: "sha1",
  [OID.sha224WithRSAEncryption]: "sha224",
  [OID.sha256WithRSAEncryption]: "sha256",
  [OID.sha384WithRSAEncryption]: "sha384",
  [OID.sha512WithRSAEncryption]: "sha512",
};
const ECDSA: Record<string, SignatureHash> = {
  [OID.ecdsaWithSHA1]: "sha1",
  [OID.ecdsaWithSHA224]: "sha224",
  [OID.ecdsaWithSHA256]: "sha256",
  [OID.ecdsaWithSHA384]: "sha384",
  [OID.ecdsaWithSHA512]: "sha512",
};
const HASH_OIDS: Record<string, SignatureHash> = {
  [OID.sha1]: "sha1",
  [OID.sha224]: "sha224",
  [OID.sha256]: "sha256",
  [OID.sha384]: "sha384",
  [OID.sha512]: "sha512",
};

function isNullOrAbsent(p: Uint8Array | undefined): boolean {
  return p === undefined || (p.length === 2 && p[0] === TAG.NULL && p[1] === 0);
}

/** The scheme an AlgorithmIdentifier names; unknown algorithms or parameters are CertificateErrors. */
export function signatureScheme(alg: AlgorithmIdentifier): SignatureScheme {
  const pk = PKCS1[alg.oid];
  if (pk) {
    if (!isNullOrAbsent(alg.params)) throw new CertificateError("unsupported-algorithm", `${alg.oid}: parameters must be NULL or absent`);
    return { kind: "rsa-pkcs1", hash: pk, label: `${pk}WithRSAEncryption` };
  }
  const ec = ECDSA[alg.oid];
  if (ec) {
    if (!isNullOrAbsent(alg.params)) throw new CertificateError("unsupported-algorithm", `${alg.oid}: ECDSA parameters must be absent`);
    return { kind: "ecdsa", hash: ec, label: `ecdsa-with-${ec.toUpperCase()}` };
  }
  if (alg.oid === OID.rsassaPss) return pssScheme(alg.params);
  throw new CertificateError("unsupported-algorithm", `signature algorithm ${alg.oid} is not supported`);
}

function hashOf(a: AlgorithmIdentifier, what: string): SignatureHash {
  const h = HASH_OIDS[a.oid];
  if (!h) throw new CertificateError("unsupported-algorithm", `RSASSA-PSS ${what} ${a.oid} is not supported`);
  if (!isNullOrAbsent(a.params)) throw new CertificateError("unsupported-algorithm", `RSASSA-PSS ${what} has unexpected parameters`);
  return h;
}

/** RSASSA-PSS-params (RFC 4055 §3.1), with its defaults (SHA-1, MGF1-SHA-1, salt 20, trailer 1). */
function pssScheme(params: Uint8Array | undefined): SignatureScheme {
  if (!params) throw new CertificateError("unsupported-algorithm", "RSASSA-PSS without parameters");
  const d = DerReader.of(params, "RSASSA-PSS-params");
  const s = d.enter(TAG.SEQUENCE, "RSASSA-PSS-params");
  let hash: SignatureHash = "sha1";
  let mgfHash: SignatureHash = "sha1";
  let saltLength = 20;
  if (s.peekTag() === contextTag(0, true)) {
    const e = s.enter(contextTag(0, true));
    hash = hashOf(readAlgorithmIdentifier(e), "hashAlgorithm");
    e.expectEnd("hashAlgorithm");
  }
  if (s.peekTag() === contextTag(1, true)) {
    const e = s.enter(contextTag(1, true));
    const mgf = readAlgorithmIdentifier(e);
    e.expectEnd("maskGenAlgorithm");
    if (mgf.oid !== OID.mgf1 || !mgf.params) throw new CertificateError("unsupported-algorithm", `RSASSA-PSS mask generation ${mgf.oid} is not MGF1`);
    const md = DerReader.of(mgf.params, "MGF1 hash");
    mgfHash = hashOf(readAlgorithmIdentifier(md), "MGF1 hash");
    md.expectEnd("MGF1 hash");
  }
  if (s.peekTag() === contextTag(2, true)) {
    const e = s.enter(contextTag(2, true));
    saltLength = e.smallInteger();
    e.expectEnd("saltLength");
  }
  if (s.peekTag() === contextTag(3, true)) {
    const e = s.enter(contextTag(3, true));
    const trailer = e.smallInteger();
    e.expectEnd("trailerField");
    if (trailer !== 1) throw new CertificateError("unsupported-algorithm", `RSASSA-PSS trailerField ${trailer} is not 1`);
  }
  s.expectEnd("RSASSA-PSS-params");
  d.expectEnd("RSASSA-PSS-params");
  if (mgfHash !== hash) throw new CertificateError("unsupported-algorithm", `RSASSA-PSS with MGF1-${mgfHash} and hash ${hash} differ (not supported)`);
  return { kind: "rsa-pss", hash, saltLength, label: `RSASSA-PSS(${hash}, salt ${saltLength})` };
}

export type SignatureCheck = { ok: true; scheme: SignatureScheme } | { ok: false; detail: string };

/** Verify `cert`'s signature with `issuerKey` over the original tbsCertificate bytes. */
export function verifyCertificateSignature(cert: Certificate, issuerKey: CanonicalKey): SignatureCheck {
  let scheme: SignatureScheme;
  try {
    scheme = signatureScheme(cert.signatureAlgorithm);
  } catch (e) {
    return { ok: false, detail: (e as Error).message };
  }
  const wantRsa = scheme.kind !== "ecdsa";
  if (wantRsa !== (issuerKey.alg === "rsa")) {
    return { ok: false, detail: `${scheme.label} signature cannot come from an ${issuerKey.alg.toUpperCase()} key` };
  }
  const key = keyObjectFromCanonical(issuerKey.spki);
  let ok = false;
  try {
    if (scheme.kind === "rsa-pss") {
      ok = verify(scheme.hash, cert.tbs, { key, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: scheme.saltLength ?? 20 }, cert.signatureValue);
    } else if (scheme.kind === "rsa-pkcs1") {
      ok = verify(scheme.hash, cert.tbs, { key, padding: constants.RSA_PKCS1_PADDING }, cert.signatureValue);
    } else {
      ok = verify(scheme.hash, cert.tbs, { key, dsaEncoding: "der" }, cert.signatureValue);
    }
  } catch (e) {
    return { ok: false, detail: `${scheme.label} signature is malformed: ${(e as Error).message}` };
  }
  return ok ? { ok: true, scheme } : { ok: false, detail: `${scheme.label} signature does not verify` };
}
