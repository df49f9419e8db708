/**
 * The subject common names of a PKCS#10 CertificationRequest (RFC 2986 §4.1), from the PEM a Kubernetes CSR
 * carries in spec.request. Only the subject is read (with the project's DER reader); nothing is verified.
 */
import { DerReader, TAG, nameValues, readName } from "@fleetd/verify/x509";

const OID_CN = "2.5.4.3";

export function csrCommonNames(pem: string): string[] {
  const m = /-----BEGIN (?:NEW )?CERTIFICATE REQUEST-----([A-Za-z0-9+/=\s]+)-----END (?:NEW )?CERTIFICATE REQUEST-----/.exec(pem);
  if (!m?.[1]) return [];
  const der = new Uint8Array(Buffer.from(m[1].replace(/\s+/g, ""), "base64"));
  const d = DerReader.of(der, "CertificationRequest");
  const csr = d.enter(TAG.SEQUENCE, "CertificationRequest");
  const info = csr.enter(TAG.SEQUENCE, "certificationRequestInfo");
  info.next(TAG.INTEGER, "version");
  return nameValues(readName(info), OID_CN);
}
