/**
 * Signing a certificate: @fleetd/verify/x509 encodes the TBSCertificate, the CertificateSigner (the token) signs
 * its DER, and x509 wraps it. The signature algorithm comes from the signer's key.
 */
import { type CertificateFields as X509CertificateFields, buildCertificate } from "@fleetd/verify/x509";
import { SIGNATURE_ALGORITHMS } from "./algorithms.js";
import type { CertificateSigner } from "./signer.js";

export type CertificateFields = Omit<X509CertificateFields, "signatureAlgorithm">;

export async function signCertificate(fields: CertificateFields, signer: CertificateSigner): Promise<Uint8Array> {
  const alg = SIGNATURE_ALGORITHMS[signer.signatureAlgorithm];
  return buildCertificate({ ...fields, signatureAlgorithm: { oid: alg.oid, nullParameters: alg.nullParameters } }, (tbs) => signer.sign(tbs));
}

/** Whole seconds: X.509 times carry no fractions, and validity arithmetic must match what is encoded. */
export function wholeSeconds(d: Date): Date {
  return new Date(Math.floor(d.getTime() / 1000) * 1000);
}
