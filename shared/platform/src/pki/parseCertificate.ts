/**
 * Reading a certificate into the fields the CA judges: names, validity, key, and the extensions with their
 * criticality. Parsing only; `verifyIssued` and the tests judge.
 */
import { AsnConvert } from "@peculiar/asn1-schema";
import {
  AuthorityKeyIdentifier,
  BasicConstraints,
  Certificate,
  ExtendedKeyUsage,
  id_ce_authorityKeyIdentifier,
  id_ce_basicConstraints,
  id_ce_extKeyUsage,
  id_ce_keyUsage,
  id_ce_subjectKeyIdentifier,
  KeyUsage,
  Name,
  SubjectKeyIdentifier,
  SubjectPublicKeyInfo,
} from "@peculiar/asn1-x509";
import { PkiError } from "./errors.js";
import { commonNameOf } from "./names.js";
import { certificateDer } from "./pem.js";

export interface CertificateExtension {
  oid: string;
  critical: boolean;
  value: Uint8Array;
}

export interface CertificateInfo {
  der: Uint8Array;
  version: number; // 3 for v3
  serial: Uint8Array;
  signatureAlgorithm: string; // OID
  issuer: Name;
  subject: Name;
  issuerCn: string;
  subjectCn: string;
  notBefore: Date;
  notAfter: Date;
  spki: Uint8Array;
  extensions: CertificateExtension[];
  basicConstraints?: { ca: boolean; pathLen?: number };
  keyUsage?: string[];
  extendedKeyUsage?: string[];
  subjectKeyIdentifier?: Uint8Array;
  authorityKeyIdentifier?: Uint8Array;
}

export function parseIssuedCertificate(input: Uint8Array | string, what = "certificate"): CertificateInfo {
  const der = certificateDer(input, what);
  let cert: Certificate;
  try {
    cert = AsnConvert.parse(der, Certificate);
    // a DER certificate re-encodes to exactly its bytes; trailing data or BER would not
    if (!Buffer.from(AsnConvert.serialize(cert)).equals(Buffer.from(der))) throw new Error("not DER, or trailing data");
  } catch (e) {
    throw new PkiError("certificate-invalid", `${what} does not parse as an X.509 certificate: ${(e as Error).message}`);
  }
  const tbs = cert.tbsCertificate;
  const info: CertificateInfo = {
    der,
    version: tbs.version + 1,
    serial: new Uint8Array(tbs.serialNumber),
    signatureAlgorithm: cert.signatureAlgorithm.algorithm,
    issuer: tbs.issuer,
    subject: tbs.subject,
    issuerCn: commonNameOf(tbs.issuer),
    subjectCn: commonNameOf(tbs.subject),
    notBefore: tbs.validity.notBefore.getTime(),
    notAfter: tbs.validity.notAfter.getTime(),
    spki: new Uint8Array(AsnConvert.serialize(tbs.subjectPublicKeyInfo as SubjectPublicKeyInfo)),
    extensions: [],
  };
  for (const ext of tbs.extensions ?? []) {
    const value = new Uint8Array(ext.extnValue.buffer);
    info.extensions.push({ oid: ext.extnID, critical: ext.critical, value });
    try {
      switch (ext.extnID) {
        case id_ce_basicConstraints: {
          const bc = AsnConvert.parse(value, BasicConstraints);
          info.basicConstraints = { ca: bc.cA, ...(bc.pathLenConstraint !== undefined ? { pathLen: bc.pathLenConstraint } : {}) };
          break;
        }
        case id_ce_keyUsage:
          info.keyUsage = AsnConvert.parse(value, KeyUsage).toJSON();
          break;
        case id_ce_extKeyUsage:
          info.extendedKeyUsage = [...AsnConvert.parse(value, ExtendedKeyUsage)];
          break;
        case id_ce_subjectKeyIdentifier:
          info.subjectKeyIdentifier = new Uint8Array(AsnConvert.parse(value, SubjectKeyIdentifier).buffer);
          break;
        case id_ce_authorityKeyIdentifier: {
          const aki = AsnConvert.parse(value, AuthorityKeyIdentifier);
          if (aki.keyIdentifier) info.authorityKeyIdentifier = new Uint8Array(aki.keyIdentifier.buffer);
          break;
        }
      }
    } catch (e) {
      throw new PkiError("certificate-invalid", `${what}: extension ${ext.extnID} does not parse: ${(e as Error).message}`);
    }
  }
  const oids = info.extensions.map((x) => x.oid);
  const dup = oids.find((o, i) => oids.indexOf(o) !== i);
  if (dup) throw new PkiError("certificate-invalid", `${what}: extension ${dup} appears twice (RFC 5280 §4.2)`);
  return info;
}
