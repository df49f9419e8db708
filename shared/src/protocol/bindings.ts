/**
 * The values that bind TPM evidence to one protocol session (attestation-protocol.md, "Messages"):
 *   quote extraData   = SHA-256("fleetd/quote/v1"          ‖ nonce ‖ sessionId ‖ claimsHash)
 *   certify extraData = SHA-256("fleetd/certify/ldevid/v1" ‖ nonce ‖ sessionId)   (…/lak/v1 for the LAK)
 *   confirm digest    = SHA-256("fleetd/confirm/v1"        ‖ sessionId ‖ H(LDevID cert) ‖ H(LAK cert))
 * Labels are ASCII without a terminator; sessionId is its UTF-8 bytes; certificates are hashed as DER.
 */
import { createHash } from "node:crypto";
import { canonicalJson, type Canonical } from "./canonicalJson.js";

const sha256 = (...parts: (Uint8Array | string)[]): Uint8Array => {
  const h = createHash("sha256");
  for (const p of parts) h.update(p);
  return new Uint8Array(h.digest());
};

export function claimsHash(claims: Canonical): Uint8Array {
  return sha256(canonicalJson(claims));
}

export function quoteExtraData(nonce: Uint8Array, sessionId: string, claims: Uint8Array): Uint8Array {
  return sha256("fleetd/quote/v1", nonce, sessionId, claims);
}

export function certifyExtraData(kind: "ldevid" | "lak", nonce: Uint8Array, sessionId: string): Uint8Array {
  return sha256(`fleetd/certify/${kind}/v1`, nonce, sessionId);
}

export function confirmDigest(sessionId: string, ldevidCertDer: Uint8Array, lakCertDer: Uint8Array): Uint8Array {
  return sha256("fleetd/confirm/v1", sessionId, sha256(ldevidCertDer), sha256(lakCertDer));
}
