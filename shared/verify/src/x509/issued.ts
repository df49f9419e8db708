/**
 * Was `cert` issued by `issuer`? The two questions OpenSSL asks (X509_check_issued, then the signature), on
 * certificates this module parsed: the issuer names itself as the certificate's issuer, and the certificate's
 * signature verifies with the issuer's key over the exact tbsCertificate bytes. Path building, validity and
 * policy are the callers' (ek/chain.ts for EK chains; platform/pki for issued certificates).
 */
import type { Certificate } from "./certificate.js";
import { nameKey } from "./names.js";
import { verifyCertificateSignature } from "./signature.js";
import { canonicalKey } from "./spki.js";

/** X509_check_issued: subject = issuer (normalised names), AKI = SKI when both are present, keyCertSign when KeyUsage is present. */
export function namesIssuer(cert: Certificate, issuer: Certificate): boolean {
  if (nameKey(cert.issuer) !== nameKey(issuer.subject)) return false;
  const aki = cert.ext.authorityKeyIdentifier;
  const ski = issuer.ext.subjectKeyIdentifier;
  if (aki && ski && !Buffer.from(aki).equals(Buffer.from(ski))) return false;
  return !issuer.ext.keyUsage || issuer.ext.keyUsage.includes("keyCertSign");
}

/** The certificate's signature verifies with the issuer's key; a key or algorithm fleetd does not implement verifies nothing. */
export function signedBy(cert: Certificate, issuer: Certificate): boolean {
  try {
    return verifyCertificateSignature(cert, canonicalKey(issuer.spki)).ok;
  } catch {
    return false;
  }
}

/** Both: `issuer` issued `cert`. */
export function issuedBy(cert: Certificate, issuer: Certificate): boolean {
  return namesIssuer(cert, issuer) && signedBy(cert, issuer);
}
