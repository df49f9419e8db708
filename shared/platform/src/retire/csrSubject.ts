/**
 * The subject common names of a PKCS#10 CertificationRequest (RFC 2986 §4.1), from the PEM a Kubernetes CSR
 * carries in spec.request, read with @fleetd/verify/x509's PEM codec and request reader. Nothing is verified:
 * the names only pick which CSRs to delete. A text that is not well-formed PEM or holds no request block has no
 * names; a malformed request is a ParseError.
 */
import { CERTIFICATE_REQUEST_LABELS, CertificateError, type PemBlock, nameValues, parseCertificationRequest, pemBlocks } from "@fleetd/verify/x509";

const OID_CN = "2.5.4.3";

export function csrCommonNames(pem: string): string[] {
  let blocks: PemBlock[];
  try {
    blocks = pemBlocks(pem);
  } catch (e) {
    if (e instanceof CertificateError) return [];
    throw e;
  }
  const block = blocks.find((b) => CERTIFICATE_REQUEST_LABELS.has(b.label));
  if (!block) return [];
  return nameValues(parseCertificationRequest(block.der).subject, OID_CN);
}
