/**
 * The values that bind TPM evidence to one protocol session (attestation-protocol.md, "Messages"):
 *   quote extraData   = SHA-256("fleetd/quote/v1"          ‖ nonce ‖ sessionId ‖ claimsHash)
 *   certify extraData = SHA-256("fleetd/certify/ldevid/v1" ‖ nonce ‖ sessionId)   (…/lak/v1 for the LAK)
 *   confirm digest    = SHA-256("fleetd/confirm/v1"        ‖ sessionId ‖ H(LDevID cert) ‖ H(LAK cert))
 *   TPM 1.2 externalData = SHA-256("fleetd/tpm12/quote/v1" ‖ nonce ‖ sessionId ‖ claimsHash), first 20 bytes
 *                          (TPM_Quote takes a 20-byte TPM_NONCE; 160 bits of SHA-256 bind as well as the session needs)
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

/** TPM_Quote's 20-byte externalData for a TPM 1.2 session. */
export function quoteExternalData12(nonce: Uint8Array, sessionId: string, claims: Uint8Array): Uint8Array {
  return sha256("fleetd/tpm12/quote/v1", nonce, sessionId, claims).slice(0, 20);
}

export function certifyExtraData(kind: "ldevid" | "lak", nonce: Uint8Array, sessionId: string): Uint8Array {
  return sha256(`fleetd/certify/${kind}/v1`, nonce, sessionId);
}

/**
 * The confirm digest's preimage. The TPM signs the digest (TPM2_Sign with a SHA-256 scheme), which is a plain
 * SHA-256 signature over this message — so verifiers check it as one.
 */
export function confirmMessage(sessionId: string, ldevidCertDer: Uint8Array, lakCertDer: Uint8Array): Uint8Array {
  return new Uint8Array(Buffer.concat([Buffer.from("fleetd/confirm/v1"), Buffer.from(sessionId), sha256(ldevidCertDer), sha256(lakCertDer)]));
}

export function confirmDigest(sessionId: string, ldevidCertDer: Uint8Array, lakCertDer: Uint8Array): Uint8Array {
  return sha256(confirmMessage(sessionId, ldevidCertDer, lakCertDer));
}

/*
 * Renewal with runtime attestation (talos-config-server/README.md "Renewal"):
 *   renew quote extraData = SHA-256("fleetd/renew/quote/v1"      ‖ nonce ‖ sessionId)
 *   possession digest     = SHA-256("fleetd/renew/possession/v1" ‖ nonce ‖ sessionId ‖ SHA-256(quote.message))
 *   renew confirm digest  = SHA-256("fleetd/renew/confirm/v1"    ‖ sessionId ‖ SHA-256(new LDevID DER) ‖ SHA-256(new LAK DER))
 * The possession and confirm signatures are TPM2_Sign by the LDevID over the digest: plain SHA-256 signatures over
 * the preimages below, verified as such.
 */
export function renewQuoteExtraData(nonce: Uint8Array, sessionId: string): Uint8Array {
  return sha256("fleetd/renew/quote/v1", nonce, sessionId);
}

/** The possession digest's preimage (signed by the current LDevID). */
export function renewPossessionMessage(nonce: Uint8Array, sessionId: string, quoteMessage: Uint8Array): Uint8Array {
  return new Uint8Array(Buffer.concat([Buffer.from("fleetd/renew/possession/v1"), nonce, Buffer.from(sessionId), sha256(quoteMessage)]));
}

/** The renewal confirm digest's preimage (signed by the LDevID key, which the new certificate certifies again). */
export function renewConfirmMessage(sessionId: string, ldevidCertDer: Uint8Array, lakCertDer: Uint8Array): Uint8Array {
  return new Uint8Array(Buffer.concat([Buffer.from("fleetd/renew/confirm/v1"), Buffer.from(sessionId), sha256(ldevidCertDer), sha256(lakCertDer)]));
}
