/**
 * What certificate issuance needs from a CA key: its public key and a way to sign. The production
 * implementation is the PKCS#11 signer (the key never leaves the YubiKey / SoftHSM2 token).
 */
import type { PublicKeyInfo, SignatureAlgorithm } from "./algorithms.js";

export interface CertificateSigner {
  /** The CA's public key (canonical SPKI). */
  readonly publicKey: PublicKeyInfo;
  /** Fixed by the key: ECDSA with SHA-256 (P-256) / SHA-384 (P-384), or RSASSA-PKCS1-v1_5 with SHA-256. */
  readonly signatureAlgorithm: SignatureAlgorithm;
  /**
   * Signature over `data` (the DER TBSCertificate) in X.509 form: a DER ECDSA-Sig-Value, or the RSA
   * PKCS#1 v1.5 signature bytes. The hash is computed by the signer.
   */
  sign(data: Uint8Array): Promise<Uint8Array>;
}
