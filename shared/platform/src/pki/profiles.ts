/**
 * Certificate profiles of the keys fleetd certifies (see README.md "Certificate profiles" for the reasons).
 *
 * LDevID (SPIRE tpm_devid): CN=<node>.g<generation>; KeyUsage digitalSignature (critical); EKU clientAuth
 * (non-critical — SPIRE verifies with ExtKeyUsageAny, so any EKU passes; clientAuth says what the key does
 * and keeps it from serving as a TLS server certificate); BasicConstraints CA:FALSE (critical); SKI + AKI;
 * no SAN; at most 30 days.
 * LAK: CN=<node>.g<generation>.lak; KeyUsage digitalSignature (critical); EKU tcg-kp-AIKCertificate
 * 2.23.133.8.3 (non-critical — the TCG key purpose of attestation-key certificates, and what tells fleetd's
 * verifier an LAK certificate from an LDevID one); the same other fields.
 * Both: RSA-2048 or ECC P-256 keys only (what SPIRE's templates and the design allow).
 */
import type { PublicKeyInfo } from "./algorithms.js";

export const OID_EKU_CLIENT_AUTH = "1.3.6.1.5.5.7.3.2";
/** TCG tcg-kp-AIKCertificate (2.23.133.8.3): the key purpose of attestation-key certificates. */
export const OID_EKU_TCG_AIK_CERTIFICATE = "2.23.133.8.3";

/** KeyUsage bits the CA writes. Only KeyUsage and BasicConstraints are ever critical: Go's crypto/x509 (SPIRE) refuses an unhandled critical extension. */
export type KeyUsageName = "digitalSignature" | "keyCertSign" | "cRLSign";

/** The longest LDevID/LAK lifetime; also how long a retired CA stays in the bundle after its last issuance. */
export const MAX_LEAF_LIFETIME_DAYS = 30;
export const DAY_MS = 86_400_000;

export interface LeafProfile {
  name: "ldevid" | "lak";
  keyUsage: KeyUsageName[];
  extendedKeyUsage: string[];
  keyAllowed(k: PublicKeyInfo): boolean;
}

const rsa2048OrP256 = (k: PublicKeyInfo): boolean => (k.kind === "rsa" ? k.bits === 2048 : k.curve === "P-256");

export const LDEVID_PROFILE: LeafProfile = {
  name: "ldevid",
  keyUsage: ["digitalSignature"],
  extendedKeyUsage: [OID_EKU_CLIENT_AUTH],
  keyAllowed: rsa2048OrP256,
};

export const LAK_PROFILE: LeafProfile = {
  name: "lak",
  keyUsage: ["digitalSignature"],
  extendedKeyUsage: [OID_EKU_TCG_AIK_CERTIFICATE],
  keyAllowed: rsa2048OrP256,
};

/** CA keys: what a YubiKey PIV slot holds (P-256, P-384, RSA-2048; RSA-3072/4096 on firmware 5.7+). */
export function caKeyAllowed(k: PublicKeyInfo): boolean {
  return k.kind === "rsa" ? k.bits >= 2048 && k.bits <= 4096 : true;
}
