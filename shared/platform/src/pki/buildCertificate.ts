/**
 * Assembling and signing a certificate: the TBSCertificate is built with @peculiar/asn1-x509, serialized
 * to DER, signed by the CertificateSigner (the token), and wrapped. The signature algorithm comes from the
 * signer's key, in both the TBS `signature` field and the outer `signatureAlgorithm` (RFC 5280 §4.1.1.2).
 */
import { AsnConvert } from "@peculiar/asn1-schema";
import { AlgorithmIdentifier, Certificate, Extensions, Name, SubjectPublicKeyInfo, TBSCertificate, Validity, Version, type Extension } from "@peculiar/asn1-x509";
import { SIGNATURE_ALGORITHMS } from "./algorithms.js";
import type { CertificateSigner } from "./signer.js";

export interface CertificateFields {
  serial: Uint8Array;
  issuer: Name;
  subject: Name;
  notBefore: Date;
  notAfter: Date;
  spki: Uint8Array;
  extensions: Extension[];
}

function toArrayBuffer(b: Uint8Array): ArrayBuffer {
  return new Uint8Array(b).buffer;
}

export async function signCertificate(fields: CertificateFields, signer: CertificateSigner): Promise<Uint8Array> {
  const alg = SIGNATURE_ALGORITHMS[signer.signatureAlgorithm];
  const algorithm = (): AlgorithmIdentifier =>
    new AlgorithmIdentifier(alg.nullParameters ? { algorithm: alg.oid, parameters: null } : { algorithm: alg.oid });
  const tbs = new TBSCertificate({
    version: Version.v3,
    serialNumber: toArrayBuffer(fields.serial),
    signature: algorithm(),
    issuer: fields.issuer,
    validity: new Validity({ notBefore: fields.notBefore, notAfter: fields.notAfter }),
    subject: fields.subject,
    subjectPublicKeyInfo: AsnConvert.parse(fields.spki, SubjectPublicKeyInfo),
    extensions: new Extensions(fields.extensions),
  });
  const tbsDer = new Uint8Array(AsnConvert.serialize(tbs));
  const signature = await signer.sign(tbsDer);
  const cert = new Certificate({ tbsCertificate: tbs, signatureAlgorithm: algorithm(), signatureValue: toArrayBuffer(signature) });
  return new Uint8Array(AsnConvert.serialize(cert));
}

/** Whole seconds: X.509 times carry no fractions, and validity arithmetic must match what is encoded. */
export function wholeSeconds(d: Date): Date {
  return new Date(Math.floor(d.getTime() / 1000) * 1000);
}
