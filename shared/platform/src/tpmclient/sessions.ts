/**
 * Authorization sessions (Part 1 §19): the password session TPM_RS_PW (the auth value in clear, fine for the
 * empty auth values fleetd's keys have) and policy sessions (for the EK, whose authPolicy is
 * PolicySecret(TPM_RH_ENDORSEMENT)). An unbound, unsalted policy session satisfied by PolicySecret needs no
 * HMAC: its TPMS_AUTH_COMMAND carries only the handle and attributes.
 */
import { type TPMS_AUTH_COMMAND, TPMA_SESSION } from "@fleetd/verify/tpm";
import { TPM_RH } from "@fleetd/verify/tcg";

/** TPM_RS_PW (Part 2 §7.4): the password authorization "session". */
export const TPM_RS_PW = TPM_RH.PW;

const EMPTY = new Uint8Array(0);

/** Password authorization with `password` (empty by default). */
export function passwordAuth(password: Uint8Array = EMPTY): TPMS_AUTH_COMMAND {
  return { sessionHandle: TPM_RS_PW, nonce: EMPTY, sessionAttributes: TPMA_SESSION.continueSession, hmac: password };
}

/**
 * Use of a policy session. Without continueSession the TPM flushes the session after a successful command;
 * after a failed one the session stays loaded and the caller must flush it.
 */
export function policyAuth(sessionHandle: number, continueSession = false): TPMS_AUTH_COMMAND {
  return {
    sessionHandle,
    nonce: EMPTY,
    sessionAttributes: continueSession ? TPMA_SESSION.continueSession : 0,
    hmac: EMPTY,
  };
}
