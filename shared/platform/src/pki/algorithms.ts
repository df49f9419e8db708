/**
 * Signature algorithms the CA signs with, and the public keys it accepts (CA keys and leaf keys).
 * Only SHA-256/384 with ECDSA or RSASSA-PKCS1-v1_5: Go's crypto/x509 (SPIRE) rejects SHA-1, and these are
 * what a YubiKey PIV slot and a TPM LDevID can do.
 */
export type SignatureAlgorithm = "ecdsa-with-SHA256" | "ecdsa-with-SHA384" | "sha256WithRSAEncryption";

export const SIGNATURE_ALGORITHMS = {
  // RFC 5758 §3.2: ECDSA identifiers carry no parameters (absent, not NULL)
  "ecdsa-with-SHA256": { oid: "1.2.840.10045.4.3.2", hash: "sha256", nullParameters: false },
  "ecdsa-with-SHA384": { oid: "1.2.840.10045.4.3.3", hash: "sha384", nullParameters: false },
  // RFC 4055 §5: sha256WithRSAEncryption carries NULL parameters
  sha256WithRSAEncryption: { oid: "1.2.840.113549.1.1.11", hash: "sha256", nullParameters: true },
} as const satisfies Record<SignatureAlgorithm, { oid: string; hash: "sha256" | "sha384"; nullParameters: boolean }>;

export function signatureAlgorithmByOid(oid: string): SignatureAlgorithm | undefined {
  for (const [name, a] of Object.entries(SIGNATURE_ALGORITHMS)) if (a.oid === oid) return name as SignatureAlgorithm;
  return undefined;
}

export type EcCurve = "P-256" | "P-384";
export const EC_CURVES = {
  "P-256": { oid: "1.2.840.10045.3.1.7", size: 32 },
  "P-384": { oid: "1.3.132.0.34", size: 48 },
} as const satisfies Record<EcCurve, { oid: string; size: number }>;

export function curveByOid(oid: string): EcCurve | undefined {
  for (const [name, c] of Object.entries(EC_CURVES)) if (c.oid === oid) return name as EcCurve;
  return undefined;
}

/** A public key as the CA sees it: its kind, size and canonical DER SubjectPublicKeyInfo. */
export type PublicKeyInfo =
  | { kind: "ec"; curve: EcCurve; spki: Uint8Array }
  | { kind: "rsa"; bits: number; spki: Uint8Array };

export function describePublicKey(k: PublicKeyInfo): string {
  return k.kind === "ec" ? `ECC ${k.curve}` : `RSA-${k.bits}`;
}

/** The signature algorithm a CA key signs certificates with. */
export function signatureAlgorithmForKey(k: PublicKeyInfo): SignatureAlgorithm {
  if (k.kind === "rsa") return "sha256WithRSAEncryption";
  return k.curve === "P-384" ? "ecdsa-with-SHA384" : "ecdsa-with-SHA256";
}
