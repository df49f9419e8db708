/**
 * Reading a PKCS#10 certification request (RFC 2986) from a Kubernetes CertificateSigningRequest's
 * `spec.request` (PEM, one `CERTIFICATE REQUEST` block) into the fields the kubelet CSR gate judges: subject
 * attributes, requested SANs and other requested extensions, other attributes, the public key, and whether
 * the request's self-signature verifies. The PEM codec and the request reader are @fleetd/verify/x509's
 * (strict DER, signature over the exact certificationRequestInfo bytes); this maps them to the gate's fields.
 * Parsing only; `csrGate.ts` judges.
 *
 * Bad input (garbage, truncated, oversized, BER instead of DER, trailing data) is a `CsrError` with a stable
 * code, never a raw exception.
 */
import { createPublicKey, type KeyObject } from "node:crypto";
import { ParseError } from "@fleetd/verify/codec";
import {
  CertificateError,
  type CertificationRequest,
  parseCertificationRequest,
  type PemBlock,
  pemBlocks,
  REQUEST_SIGNATURE_ALGORITHMS,
  verifyRequestSignature,
} from "@fleetd/verify/x509";
import { CodedError } from "../fleet/codedError.js";

export type CsrErrorCode = "too-large" | "not-pem" | "pem-type" | "pem-count" | "base64" | "asn1" | "not-der" | "version" | "key" | "signature-algorithm";

export class CsrError extends CodedError<CsrErrorCode> {
  override readonly name = "CsrError";
}

/** A kubelet CSR is a few hundred bytes; anything near this is not one. */
export const MAX_CSR_PEM_BYTES = 16 * 1024;

const OID_CN = "2.5.4.3";
const OID_O = "2.5.4.10";

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

/** The DER of the one CERTIFICATE REQUEST block in a PEM text. */
export function csrDerFromPem(pem: Uint8Array | string): Uint8Array {
  const bytes = typeof pem === "string" ? Buffer.byteLength(pem) : pem.length;
  if (bytes > MAX_CSR_PEM_BYTES) throw new CsrError("too-large", `the request is ${bytes} bytes; a kubelet CSR is under ${MAX_CSR_PEM_BYTES}`);
  const text = typeof pem === "string" ? pem : Buffer.from(pem).toString("latin1");
  let blocks: PemBlock[];
  try {
    blocks = pemBlocks(text);
  } catch (e) {
    // bad base64, encapsulated headers, or a BEGIN line without its END
    if (e instanceof CertificateError) throw new CsrError("base64", `the request is not well-formed PEM: ${e.message}`);
    throw e;
  }
  const [block, ...more] = blocks;
  if (!block) throw new CsrError("not-pem", "the request holds no PEM block");
  if (more.length > 0) throw new CsrError("pem-count", `the request holds ${blocks.length} PEM blocks; expected one CERTIFICATE REQUEST`);
  if (block.label !== "CERTIFICATE REQUEST") throw new CsrError("pem-type", `the PEM block is ${block.label}, not CERTIFICATE REQUEST`);
  return block.der;
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

function readRequest(der: Uint8Array): CertificationRequest {
  try {
    return parseCertificationRequest(der);
  } catch (e) {
    if (e instanceof ParseError) {
      const code = e.code === "not-der" || (e.code === "trailing-bytes" && e.path === "CertificationRequest") ? "not-der" : "asn1";
      throw new CsrError(code, `the request does not parse as a DER PKCS#10 CertificationRequest: ${e.message}`);
    }
    if (e instanceof CertificateError) throw new CsrError("asn1", `the request's extensions do not parse: ${e.message}`);
    throw e;
  }
}

/** Parse a PEM CSR (text or bytes) and check its self-signature. */
export function parseCsr(pem: Uint8Array | string): ParsedCsr {
  const req = readRequest(csrDerFromPem(pem));
  if (req.version !== 0) throw new CsrError("version", `CertificationRequestInfo.version is ${req.version}; only v1 (0) exists`);

  const subject = req.subject.rdns.flat().map((a) => ({ oid: a.type, value: a.value }));
  const sans: ParsedCsr["sans"] = { dns: [], ip: [], email: [], uri: [], other: 0 };
  for (const n of req.ext.subjectAltName ?? []) {
    if (n.kind === "dNSName") sans.dns.push(n.value);
    else if (n.kind === "iPAddress") sans.ip.push(n.value);
    else if (n.kind === "rfc822Name") sans.email.push(n.value);
    else if (n.kind === "uniformResourceIdentifier") sans.uri.push(n.value);
    else sans.other++;
  }
  const k = keyOf(req.spki.der);
  const alg = REQUEST_SIGNATURE_ALGORITHMS[req.signatureAlgorithm.oid];
  if (!alg) throw new CsrError("signature-algorithm", `signature algorithm ${req.signatureAlgorithm.oid} is not one a kubelet uses (ECDSA, RSA PKCS#1 v1.5 with SHA-2, Ed25519)`);
  return {
    subject,
    commonNames: subject.filter((a) => a.oid === OID_CN).map((a) => a.value),
    organizations: subject.filter((a) => a.oid === OID_O).map((a) => a.value),
    sans,
    otherExtensions: req.extensions.filter((e) => e.oid !== "2.5.29.17").map((e) => e.oid),
    otherAttributes: req.attributes.map((a) => a.type),
    key: { kind: k.kind, detail: k.detail, spki: req.spki.der },
    signatureAlgorithm: alg.name,
    signatureValid: verifyRequestSignature(req, k.key),
  };
}
