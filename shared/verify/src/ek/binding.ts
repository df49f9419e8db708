/**
 * EK binding (design: attestation-protocol.md "Keys and certificates"): lowercase hex SHA-256 of the
 * canonical DER SubjectPublicKeyInfo of the EK public key. The same value from a certificate, a
 * TPM2B_PUBLIC/TPMT_PUBLIC, or a PEM public key (`tpm2_createek -f pem`).
 */
import { createHash } from "node:crypto";
import { spkiFromTpmPublic } from "../tpm/publicKey.js";
import type { TPMT_PUBLIC } from "../tpm/structures.js";
import type { Certificate, SubjectPublicKeyInfo } from "../x509/certificate.js";
import { canonicalKey, keyObjectFromCanonical } from "../x509/spki.js";

/** Binding of canonical SPKI bytes. */
export function ekBinding(canonicalSpki: Uint8Array): string {
  return createHash("sha256").update(canonicalSpki).digest("hex");
}

/** Binding of any SubjectPublicKeyInfo (canonicalised first). */
export function ekBindingFromSpki(spki: SubjectPublicKeyInfo): string {
  return ekBinding(canonicalKey(spki).spki);
}

export function ekBindingFromCertificate(cert: Certificate): string {
  return ekBindingFromSpki(cert.spki);
}

/** Binding of a TPM public area; the key is also checked by the crypto library (point on curve, modulus). */
export function ekBindingFromTpmPublic(pub: TPMT_PUBLIC): string {
  const spki = spkiFromTpmPublic(pub);
  keyObjectFromCanonical(spki);
  return ekBinding(spki);
}
