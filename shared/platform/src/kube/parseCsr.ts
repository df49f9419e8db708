/**
 * Reading a PKCS#10 certification request (RFC 2986) from a Kubernetes CertificateSigningRequest's
 * `spec.request` (PEM, one `CERTIFICATE REQUEST` block) into the fields the kubelet CSR gate judges: subject
 * attributes, requested SANs and other requested extensions, other attributes, the public key, and whether
 * the request's self-signature verifies. Parsing only; `csrGate.ts` judges.
 *
 * Bad input (garbage, truncated, oversized, BER instead of DER, trailing data) is a `CsrError` with a stable
 * code, never a raw exception from the ASN.1 library.
 */
import { createPublicKey, verify, type KeyObject } from "node:crypto";
import { CertificationRequest } from "@peculiar/asn1-csr";
import { AsnConvert } from "@peculiar/asn1-schema";
import { Extensions, GeneralName, id_ce_subjectAltName, SubjectAlternativeName, SubjectPublicKeyInfo } from "@peculiar/asn1-x509";

export type CsrErrorCode = "too-large" | "not-pem" | "pem-type" | "pem-count" | "base64" | "asn1" | "not-der" | "version" | "key" | "signature-algorithm";

export class CsrError extends Error {
  override readonly name = "CsrError";
  constructor(
    readonly code: CsrErrorCode,
    message: string,
  ) {
    super(message);
  }
}

/** A kubelet CSR is a few hundred bytes; anything near this is not one. */
export const MAX_CSR_PEM_BYTES = 16 * 1024;

const OID_CN = "2.5.4.3";
const OID_O = "2.5.4.10";
/** PKCS#9 extensionRequest. */
const OID_EXTENSION_REQUEST = "1.2.840.113549.1.9.14";

const SIGNATURE_ALGORITHMS: Record<string, { name: string; hash: string | null; key: "ec" | "rsa" | "ed25519" }> = {
  "1.2.840.10045.4.3.2": { name: "ecdsa-with-SHA256", hash: "sha256", key: "ec" },
  "1.2.840.10045.4.3.3": { name: "ecdsa-with-SHA384", hash: "sha384", key: "ec" },
  "1.2.840.10045.4.3.4": { name: "ecdsa-with-SHA512", hash: "sha512", key: "ec" },
  "1.2.840.113549.1.1.11": { name: "sha256WithRSAEncryption", hash: "sha256", key: "rsa" },
  "1.2.840.113549.1.1.12": { name: "sha384WithRSAEncryption", hash: "sha384", key: "rsa" },
  "1.2.840.113549.1.1.13": { name: "sha512WithRSAEncryption", hash: "sha512", key: "rsa" },
  "1.3.101.112": { name: "Ed25519", hash: null, key: "ed25519" },
};

export interface ParsedCsr {
  /** Every subject attribute in order, as (OID, string value). */
  subject: { oid: string; value: string }[];
  /** All CN values (a kubelet CSR has exactly one). */
  commonNames: string[];
  /** All O values, in order. */
  organizations: string[];
  /** Requested subjectAltName entries, by kind. */
  sans: { dns: string[]; ip: string[]; email: string[]; uri: string[]; other: number };
  /** OIDs of requested extensions other than subjectAltName. */
  otherExtensions: string[];
  /** OIDs of attributes other than extensionRequest (challengePassword…). */
  otherAttributes: string[];
  key: { kind: "ec" | "rsa" | "ed25519" | "other"; detail: string; spki: Uint8Array };
  signatureAlgorithm: string;
  /** The self-signature over CertificationRequestInfo verifies with the request's own key. */
  signatureValid: boolean;
}

const BLOCK = /-----BEGIN ([A-Z0-9 ]+)-----\r?\n([A-Za-z0-9+/=\r\n]*?)-----END \1-----/g;

/** The DER of the one CERTIFICATE REQUEST block in a PEM text. */
export function csrDerFromPem(pem: Uint8Array | string): Uint8Array {
  const bytes = typeof pem === "string" ? Buffer.byteLength(pem) : pem.length;
  if (bytes > MAX_CSR_PEM_BYTES) throw new CsrError("too-large", `the request is ${bytes} bytes; a kubelet CSR is under ${MAX_CSR_PEM_BYTES}`);
  const text = typeof pem === "string" ? pem : Buffer.from(pem).toString("latin1");
  const blocks = [...text.matchAll(BLOCK)];
  if (blocks.length === 0) throw new CsrError("not-pem", "the request holds no PEM block");
  if (blocks.length !== 1) throw new CsrError("pem-count", `the request holds ${blocks.length} PEM blocks; expected one CERTIFICATE REQUEST`);
  const [, type, body] = blocks[0] as RegExpMatchArray;
  if (type !== "CERTIFICATE REQUEST") throw new CsrError("pem-type", `the PEM block is ${type}, not CERTIFICATE REQUEST`);
  const b64 = (body ?? "").replace(/\s+/g, "");
  const der = Buffer.from(b64, "base64");
  if (der.length === 0 || der.toString("base64") !== b64) throw new CsrError("base64", "the PEM body is not valid base64");
  return new Uint8Array(der);
}

function attributeString(value: { toString(): string }): string {
  return value.toString();
}

function keyOf(spki: Uint8Array): { key: KeyObject; kind: ParsedCsr["key"]["kind"]; detail: string } {
  let key: KeyObject;
  try {
    key = createPublicKey({ key: Buffer.from(spki), format: "der", type: "spki" });
  } catch (e) {
    throw new CsrError("key", `the request's public key is not usable: ${(e as Error).message}`);
  }
  const d = key.asymmetricKeyDetails ?? {};
  switch (key.asymmetricKeyType) {
    case "ec":
      return { key, kind: "ec", detail: `EC ${d.namedCurve ?? "unknown curve"}` };
    case "rsa":
      return { key, kind: "rsa", detail: `RSA-${d.modulusLength ?? 0}` };
    case "ed25519":
      return { key, kind: "ed25519", detail: "Ed25519" };
    default:
      return { key, kind: "other", detail: key.asymmetricKeyType ?? "unknown" };
  }
}

/** Parse a PEM CSR (text or bytes) and check its self-signature. */
export function parseCsr(pem: Uint8Array | string): ParsedCsr {
  const der = csrDerFromPem(pem);
  let req: CertificationRequest;
  let infoDer: Uint8Array;
  try {
    req = AsnConvert.parse(der, CertificationRequest);
    // a DER request re-encodes to exactly its bytes; BER or trailing data would not
    if (!Buffer.from(AsnConvert.serialize(req)).equals(Buffer.from(der))) throw new CsrError("not-der", "the request is not DER (BER encoding or trailing data)");
    infoDer = new Uint8Array(req.certificationRequestInfoRaw ?? AsnConvert.serialize(req.certificationRequestInfo));
  } catch (e) {
    if (e instanceof CsrError) throw e;
    throw new CsrError("asn1", `the request does not parse as a PKCS#10 CertificationRequest: ${(e as Error).message}`);
  }
  const info = req.certificationRequestInfo;
  if (info.version !== 0) throw new CsrError("version", `CertificationRequestInfo.version is ${info.version}; only v1 (0) exists`);

  const subject: ParsedCsr["subject"] = [];
  let sans: ParsedCsr["sans"] = { dns: [], ip: [], email: [], uri: [], other: 0 };
  const otherExtensions: string[] = [];
  const otherAttributes: string[] = [];
  try {
    for (const rdn of info.subject) for (const atv of rdn) subject.push({ oid: atv.type, value: attributeString(atv.value) });
    for (const attr of info.attributes ?? []) {
      if (attr.type !== OID_EXTENSION_REQUEST) {
        otherAttributes.push(attr.type);
        continue;
      }
      for (const v of attr.values) {
        for (const ext of AsnConvert.parse(v, Extensions)) {
          if (ext.extnID === id_ce_subjectAltName) sans = sansOf(AsnConvert.parse(ext.extnValue.buffer, SubjectAlternativeName), sans);
          else otherExtensions.push(ext.extnID);
        }
      }
    }
  } catch (e) {
    throw new CsrError("asn1", `the request's subject or attributes do not parse: ${(e as Error).message}`);
  }

  const spki = new Uint8Array(AsnConvert.serialize(info.subjectPKInfo as SubjectPublicKeyInfo));
  const k = keyOf(spki);
  const alg = SIGNATURE_ALGORITHMS[req.signatureAlgorithm.algorithm];
  if (!alg) throw new CsrError("signature-algorithm", `signature algorithm ${req.signatureAlgorithm.algorithm} is not one a kubelet uses (ECDSA, RSA PKCS#1 v1.5 with SHA-2, Ed25519)`);
  let signatureValid = false;
  if (alg.key === k.kind) {
    try {
      signatureValid = verify(alg.hash, infoDer, k.kind === "ec" ? { key: k.key, dsaEncoding: "der" } : k.key, Buffer.from(req.signature));
    } catch {
      signatureValid = false;
    }
  }
  return {
    subject,
    commonNames: subject.filter((a) => a.oid === OID_CN).map((a) => a.value),
    organizations: subject.filter((a) => a.oid === OID_O).map((a) => a.value),
    sans,
    otherExtensions,
    otherAttributes,
    key: { kind: k.kind, detail: k.detail, spki },
    signatureAlgorithm: alg.name,
    signatureValid,
  };
}

function sansOf(names: GeneralName[], into: ParsedCsr["sans"]): ParsedCsr["sans"] {
  for (const n of names) {
    if (n.dNSName !== undefined) into.dns.push(n.dNSName);
    else if (n.iPAddress !== undefined) into.ip.push(n.iPAddress);
    else if (n.rfc822Name !== undefined) into.email.push(n.rfc822Name);
    else if (n.uniformResourceIdentifier !== undefined) into.uri.push(n.uniformResourceIdentifier);
    else into.other++;
  }
  return into;
}
