/**
 * X.509 certificates (RFC 5280 §4.1) decoded from exact DER. Parsing only: nothing here decides whether a
 * certificate is trusted (see chain.ts and verifyEkCertificate.ts).
 *
 *   Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue BIT STRING }
 *
 * `tbs` is the original tbsCertificate bytes: signatures are always checked over them.
 */
import { createHash } from "node:crypto";
import { DerReader, TAG, contextTag, tlvBytes } from "./der.js";
import { CertificateError } from "./errors.js";
import { type Extension, type ParsedExtensions, extensionName, parseExtensions } from "./extensions.js";
import { type Name, readName } from "./names.js";

export interface AlgorithmIdentifier {
  oid: string;
  /** Parameters as their full DER element, when present. */
  params?: Uint8Array;
  /** The whole AlgorithmIdentifier as encoded. */
  der: Uint8Array;
}

export interface SubjectPublicKeyInfo {
  /** The SubjectPublicKeyInfo exactly as in the certificate (not canonical; see spki.ts). */
  der: Uint8Array;
  algorithm: AlgorithmIdentifier;
  /** subjectPublicKey BIT STRING contents (RSAPublicKey DER, or an EC point). */
  publicKey: Uint8Array;
}

export interface Certificate {
  /** The certificate's DER (outer SEQUENCE only; padding and wrappers removed). */
  der: Uint8Array;
  /** tbsCertificate exactly as received. */
  tbs: Uint8Array;
  /** 1, 2 or 3. */
  version: number;
  /** serialNumber INTEGER content bytes as encoded. */
  serialNumber: Uint8Array;
  /** tbsCertificate.signature (must equal signatureAlgorithm). */
  tbsSignatureAlgorithm: AlgorithmIdentifier;
  signatureAlgorithm: AlgorithmIdentifier;
  signatureValue: Uint8Array;
  issuer: Name;
  subject: Name;
  notBefore: Date;
  notAfter: Date;
  spki: SubjectPublicKeyInfo;
  extensions: Extension[];
  /** The extensions fleetd interprets, decoded. */
  ext: ParsedExtensions;
  /** Lowercase hex SHA-256 of `der`. */
  fingerprint: string;
}

/** Decode exactly one certificate from `der` (no trailing bytes; see certificateInput.ts for NV quirks). */
export function parseCertificate(der: Uint8Array): Certificate {
  const top = DerReader.of(der, "Certificate");
  const cert = top.enter(TAG.SEQUENCE, "Certificate SEQUENCE");
  top.expectEnd("certificate");

  const { inner: tbs, tlv: tbsTlv } = cert.field("tbsCertificate", () => cert.enterTlv(TAG.SEQUENCE, "tbsCertificate"));
  let version = 1;
  if (tbs.peekTag() === contextTag(0, true)) {
    const v = tbs.field("version", () => tbs.enter(contextTag(0, true)));
    const n = v.field("version", () => v.smallInteger());
    v.expectEnd("version");
    if (n > 2) tbs.fail(`unknown certificate version ${n + 1}`);
    version = n + 1;
  }
  const serialNumber = tbs.field("serialNumber", () => tbs.integerBytes());
  const tbsSignatureAlgorithm = tbs.field("signature", () => readAlgorithmIdentifier(tbs));
  const issuer = tbs.field("issuer", () => readName(tbs));
  const validity = tbs.field("validity", () => tbs.enter(TAG.SEQUENCE, "Validity"));
  const notBefore = validity.field("notBefore", () => validity.time());
  const notAfter = validity.field("notAfter", () => validity.time());
  validity.expectEnd("Validity");
  const subject = tbs.field("subject", () => readName(tbs));
  const spki = tbs.field("subjectPublicKeyInfo", () => readSubjectPublicKeyInfo(tbs));
  if (tbs.peekTag() === contextTag(1, false)) tbs.field("issuerUniqueID", () => tbs.any());
  if (tbs.peekTag() === contextTag(2, false)) tbs.field("subjectUniqueID", () => tbs.any());
  const extensions: Extension[] = [];
  if (tbs.peekTag() === contextTag(3, true)) {
    if (version !== 3) tbs.fail(`a version ${version} certificate has extensions`);
    const wrap = tbs.field("extensions", () => tbs.enter(contextTag(3, true)));
    const list = wrap.field("extensions", () => wrap.enter(TAG.SEQUENCE, "Extensions"));
    wrap.expectEnd("extensions");
    while (!list.atEnd) {
      const i = extensions.length;
      const e = list.field(`extensions.${i}`, () => list.enter(TAG.SEQUENCE, "Extension"));
      const oid = e.field(`extensions.${i}.extnID`, () => e.oid());
      const critical = e.peekTag() === TAG.BOOLEAN ? e.field(`extensions.${i}.critical`, () => e.boolean()) : false;
      const value = e.field(`extensions.${i}.extnValue`, () => e.octetString());
      e.expectEnd("Extension");
      if (extensions.some((x) => x.oid === oid)) {
        throw new CertificateError("duplicate-extension", `extension ${extensionName(oid)} appears twice`);
      }
      extensions.push({ oid, critical, value });
    }
  }
  tbs.expectEnd("tbsCertificate");

  const signatureAlgorithm = cert.field("signatureAlgorithm", () => readAlgorithmIdentifier(cert));
  const signatureValue = cert.field("signatureValue", () => cert.bitStringBytes());
  cert.expectEnd("Certificate");

  return {
    der,
    tbs: tlvBytes(tbsTlv),
    version,
    serialNumber,
    tbsSignatureAlgorithm,
    signatureAlgorithm,
    signatureValue,
    issuer,
    subject,
    notBefore,
    notAfter,
    spki,
    extensions,
    ext: parseExtensions(extensions),
    fingerprint: createHash("sha256").update(der).digest("hex"),
  };
}

export function readAlgorithmIdentifier(d: DerReader): AlgorithmIdentifier {
  const { inner, tlv } = d.enterTlv(TAG.SEQUENCE, "AlgorithmIdentifier");
  const oid = inner.oid();
  const alg: AlgorithmIdentifier = { oid, der: tlvBytes(tlv) };
  if (!inner.atEnd) alg.params = tlvBytes(inner.any());
  inner.expectEnd("AlgorithmIdentifier");
  return alg;
}

export function readSubjectPublicKeyInfo(d: DerReader): SubjectPublicKeyInfo {
  const { inner, tlv } = d.enterTlv(TAG.SEQUENCE, "SubjectPublicKeyInfo");
  const algorithm = inner.field("algorithm", () => readAlgorithmIdentifier(inner));
  const publicKey = inner.field("subjectPublicKey", () => inner.bitStringBytes());
  inner.expectEnd("SubjectPublicKeyInfo");
  return { der: tlvBytes(tlv), algorithm, publicKey };
}

/** A standalone DER SubjectPublicKeyInfo (e.g. from a PEM "PUBLIC KEY"). */
export function parseSubjectPublicKeyInfo(der: Uint8Array): SubjectPublicKeyInfo {
  const d = DerReader.of(der, "SubjectPublicKeyInfo");
  const spki = readSubjectPublicKeyInfo(d);
  d.expectEnd("public key");
  return spki;
}

/** Serial number as lowercase hex of its encoded bytes. */
export function serialHex(c: Certificate): string {
  return Buffer.from(c.serialNumber).toString("hex");
}
