/**
 * One error type for the CA: a stable code for programs, a sentence naming the evidence for people.
 * Messages never contain a PIN; they name where the PIN came from (env var name or file path).
 */
import { type MaybeOutage, Unavailable } from "../outage/outage.js";
export type PkiErrorCode =
  // PKCS#11 signer
  | "invalid-config"
  | "pkcs11-module" // the module could not be loaded or initialized
  | "token-not-found"
  | "token-ambiguous"
  | "pin-unavailable" // the PIN source (env var, file) is missing or empty
  | "pin-incorrect"
  | "pin-locked"
  | "login-failed"
  | "key-not-found"
  | "key-ambiguous"
  | "key-unsupported"
  | "public-key-not-found"
  | "mechanism-unsupported"
  | "token-unavailable" // device removed, session lost: the next signature reopens the session
  | "signer-disabled" // a PIN was refused once; no further logins (a YubiKey blocks after 3 tries)
  | "signer-closed"
  | "sign-failed"
  // issuance
  | "invalid-node-name"
  | "invalid-generation"
  | "invalid-lifetime"
  | "lifetime-too-long"
  | "invalid-validity"
  | "outlives-ca"
  | "unsupported-key"
  | "invalid-key"
  | "invalid-serial"
  | "ca-key-mismatch"
  | "not-a-ca"
  | "certificate-invalid"
  // bundle
  | "bundle-state-invalid"
  | "no-current-ca"
  | "ca-not-current"
  | "ca-duplicate"
  | "activation-order";

export class PkiError extends Error implements MaybeOutage {
  override readonly name = "PkiError";
  constructor(
    readonly code: PkiErrorCode,
    message: string,
  ) {
    super(message);
  }

  /** The token is gone or its session was lost: an outage the next signature may not meet. A refused PIN is not. */
  outage(): Unavailable | undefined {
    return this.code === "token-unavailable" || this.code === "token-not-found" ? new Unavailable("signer-unavailable", this.message) : undefined;
  }
}
