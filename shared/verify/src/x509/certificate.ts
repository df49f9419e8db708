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
import { type Extension, type ParsedExtensions, parseExtensions, readExtensions } from "./extensions.js";
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

export interface ParseOptions {
  /**
   * Refuse what DER forbids and BER allows (ParseError "not-der"): non-minimal lengths and INTEGERs, BOOLEANs
   * other than 00/FF, DEFAULT values written out (version v1, critical FALSE, cA FALSE). For certificates fleetd
   * issues and reads back; EK certificates are read leniently (vendors' encodings, signatures over the bytes).
   */
  strict?: boolean;
}

/** Decode exactly one certificate from `der` (no trailing bytes; see ek/certificateInput.ts for NV quirks). */
export function parseCertificate(der: Uint8Array, options: ParseOptions = {}): Certificate {
  const top = DerReader.of(der, "Certificate", options);
  const cert = top.enter(TAG.SEQUENCE, "Certificate SEQUENCE");
  top.expectEnd("certificate");

  const tbsFields = cert.field("tbsCertificate", () => readTbsCertificate(cert));
  const signatureAlgorithm = cert.field("signatureAlgorithm", () => readAlgorithmIdentifier(cert));
  const signatureValue = cert.field("signatureValue", () => cert.bitStringBytes());
  cert.expectEnd("Certificate");

  return {
    der,
    ...tbsFields,
    signatureAlgorithm,
    signatureValue,
    ext: parseExtensions(tbsFields.extensions, options),
    fingerprint: createHash("sha256").update(der).digest("hex"),
  };
}

type TbsFields = Pick<
  Certificate,
  "tbs" | "version" | "serialNumber" | "tbsSignatureAlgorithm" | "issuer" | "notBefore" | "notAfter" | "subject" | "spki" | "extensions"
>;

function readTbsCertificate(cert: DerReader): TbsFields {
  const { inner: tbs, tlv: tbsTlv } = cert.enterTlv(TAG.SEQUENCE, "tbsCertificate");
  let version = 1;
  if (tbs.peekTag() === contextTag(0, true)) {
    version = tbs.field("version", () => {
      const v = tbs.enter(contextTag(0, true));
      const n = v.smallInteger();
      v.expectEnd("version");
      if (n === 0) v.notDer("version v1 is the DEFAULT and must be omitted");
      if (n > 2) v.fail(`unknown certificate version ${n + 1}`);
      return n + 1;
    });
  }
  const serialNumber = tbs.field("serialNumber", () => tbs.integerBytes());
  const tbsSignatureAlgorithm = tbs.field("signature", () => readAlgorithmIdentifier(tbs));
  const issuer = tbs.field("issuer", () => readName(tbs));
  const { notBefore, notAfter } = tbs.field("validity", () => {
    const v = tbs.enter(TAG.SEQUENCE, "Validity");
    const nb = v.field("notBefore", () => v.time());
    const na = v.field("notAfter", () => v.time());
    v.expectEnd("Validity");
    return { notBefore: nb, notAfter: na };
  });
  const subject = tbs.field("subject", () => readName(tbs));
  const spki = tbs.field("subjectPublicKeyInfo", () => readSubjectPublicKeyInfo(tbs));
  if (tbs.peekTag() === contextTag(1, false)) tbs.field("issuerUniqueID", () => tbs.any());
  if (tbs.peekTag() === contextTag(2, false)) tbs.field("subjectUniqueID", () => tbs.any());
  const extensions: Extension[] = [];
  if (tbs.peekTag() === contextTag(3, true)) {
    if (version !== 3) tbs.fail(`a version ${version} certificate has extensions`);
    tbs.field("extensions", () => {
      const wrap = tbs.enter(contextTag(3, true));
      extensions.push(...readExtensions(wrap));
      wrap.expectEnd("extensions");
    });
  }
  tbs.expectEnd("tbsCertificate");

  return { tbs: tlvBytes(tbsTlv), version, serialNumber, tbsSignatureAlgorithm, issuer, notBefore, notAfter, subject, spki, extensions };
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

/**
 * Serial number as OpenSSL's BN_bn2hex prints it (what node's X509Certificate.serialNumber gives), lowercased:
 * whole bytes without leading zero bytes, "-" and the magnitude when negative, "0" for zero.
 */
export function serialNumberText(c: Certificate): string {
  let bytes = Uint8Array.from(c.serialNumber);
  const negative = ((bytes[0] ?? 0) & 0x80) !== 0;
  if (negative) {
    let carry = 1; // two's complement → magnitude
    for (let i = bytes.length - 1; i >= 0; i--) {
      const v = (~(bytes[i] ?? 0) & 0xff) + carry;
      bytes[i] = v & 0xff;
      carry = v >> 8;
    }
  }
  let i = 0;
  while (i < bytes.length && bytes[i] === 0) i++;
  bytes = bytes.subarray(i);
  if (bytes.length === 0) return "0";
  return (negative ? "-" : "") + Buffer.from(bytes).toString("hex");
}

/** Serial number as lowercase hex of its encoded bytes. */
export function serialHex(c: Certificate): string {
  return Buffer.from(c.serialNumber).toString("hex");
}
