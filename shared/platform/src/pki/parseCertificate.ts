/**
 * Reading a certificate the CA issued (or its own) into the fields the CA judges: names, validity, key, and
 * the extensions with their criticality. The parse is @fleetd/verify/x509's, in strict DER (minimal
 * encodings, no DEFAULT written out, no trailing data); this maps it to what issuance, renewal, the bundle and
 * verifyIssued read. Parsing only; `verifyIssued` and the tests judge.
 */
import { type Certificate, CertificateError, type Extension, type Name, parseCertificate } from "@fleetd/verify/x509";
import { ParseError } from "@fleetd/verify/codec";
import { PkiError } from "./errors.js";
import { commonNameOf } from "./names.js";
import { certificateDer } from "./pem.js";

export type CertificateExtension = Extension;

export interface CertificateInfo {
  der: Uint8Array;
  version: number; // 3 for v3
  /** serialNumber INTEGER content bytes as encoded. */
  serial: Uint8Array;
  signatureAlgorithm: string; // OID
  issuer: Name;
  subject: Name;
  issuerCn: string;
  subjectCn: string;
  notBefore: Date;
  notAfter: Date;
  /** The SubjectPublicKeyInfo's DER. */
  spki: Uint8Array;
  extensions: CertificateExtension[];
  basicConstraints?: { ca: boolean; pathLen?: number };
  keyUsage?: string[];
  extendedKeyUsage?: string[];
  subjectKeyIdentifier?: Uint8Array;
  authorityKeyIdentifier?: Uint8Array;
  /** The parsed certificate itself (exact TBS bytes for signature checks). */
  certificate: Certificate;
}

export function parseIssuedCertificate(input: Uint8Array | string, what = "certificate"): CertificateInfo {
  const der = certificateDer(input, what);
  let cert: Certificate;
  try {
    cert = parseCertificate(der, { strict: true });
  } catch (e) {
    if (e instanceof ParseError || e instanceof CertificateError) {
      throw new PkiError("certificate-invalid", `${what} does not parse as an X.509 certificate: ${e.message}`);
    }
    throw e;
  }
  const bc = cert.ext.basicConstraints;
  return {
    der,
    version: cert.version,
    serial: cert.serialNumber,
    signatureAlgorithm: cert.signatureAlgorithm.oid,
    issuer: cert.issuer,
    subject: cert.subject,
    issuerCn: commonNameOf(cert.issuer),
    subjectCn: commonNameOf(cert.subject),
    notBefore: cert.notBefore,
    notAfter: cert.notAfter,
    spki: cert.spki.der,
    extensions: cert.extensions,
    ...(bc ? { basicConstraints: { ca: bc.cA, ...(bc.pathLenConstraint !== undefined ? { pathLen: bc.pathLenConstraint } : {}) } } : {}),
    ...(cert.ext.keyUsage ? { keyUsage: [...cert.ext.keyUsage] } : {}),
    ...(cert.ext.extKeyUsage ? { extendedKeyUsage: cert.ext.extKeyUsage } : {}),
    ...(cert.ext.subjectKeyIdentifier ? { subjectKeyIdentifier: cert.ext.subjectKeyIdentifier } : {}),
    ...(cert.ext.authorityKeyIdentifier ? { authorityKeyIdentifier: cert.ext.authorityKeyIdentifier } : {}),
    certificate: cert,
  };
}
