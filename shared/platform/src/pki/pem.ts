/**
 * Certificates in PEM, as the CA reads them: the codec is @fleetd/verify/x509's (strict RFC 7468); these wrappers
 * only turn its errors into PkiError "certificate-invalid" naming what was read.
 */
import { CertificateError, certificatesFromPem as pemCertificates } from "@fleetd/verify/x509";
import { PkiError } from "./errors.js";

/** Every CERTIFICATE block of a PEM text, as DER; any other block, bad base64 or no certificate is a PkiError. */
export function certificatesFromPem(text: string, what = "PEM"): Uint8Array[] {
  try {
    return pemCertificates(text);
  } catch (e) {
    if (e instanceof CertificateError) throw new PkiError("certificate-invalid", `${what}: ${e.message}`);
    throw e;
  }
}

/** A certificate given as DER bytes or as a PEM text holding exactly one certificate. */
export function certificateDer(input: Uint8Array | string, what = "certificate"): Uint8Array {
  if (typeof input !== "string") return input;
  const all = certificatesFromPem(input, what);
  if (all.length !== 1) throw new PkiError("certificate-invalid", `${what}: expected one certificate, found ${all.length}`);
  return all[0] as Uint8Array;
}
