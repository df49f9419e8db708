/**
 * Finding the token (by label or slot id), opening a session and logging in. A wrong PIN is never retried:
 * a YubiKey blocks its PIN after three wrong tries, so one refusal disables the signer (see pkcs11Signer).
 */
import type { PKCS11 } from "pkcs11js";
import { PkiError } from "./errors.js";
import { describePinSource, readPin, type PinSource } from "./pin.js";
import { pkcs11Code, pkcs11js, pkcs11Reason } from "./pkcs11Module.js";
import type { Pkcs11SignerSettings } from "./pkcs11Config.js";

export type Handle = Buffer;

/** A slot handle is a native CK_ULONG. */
export function slotId(handle: Handle): number {
  if (handle.length === 8) return Number(handle.readBigUInt64LE(0));
  if (handle.length === 4) return handle.readUInt32LE(0);
  throw new PkiError("pkcs11-module", `unexpected slot handle size ${handle.length}`);
}

export function describeToken(token: Pkcs11SignerSettings["token"]): string {
  return "label" in token ? `token "${token.label}"` : `slot ${token.slot}`;
}

export function findSlot(api: PKCS11, token: Pkcs11SignerSettings["token"]): Handle {
  let slots: Handle[];
  try {
    slots = api.C_GetSlotList(true);
  } catch (e) {
    throw new PkiError("token-unavailable", `cannot list PKCS#11 slots: ${pkcs11Reason(e)}`);
  }
  if ("slot" in token) {
    const hit = slots.find((s) => slotId(s) === token.slot);
    if (!hit) throw new PkiError("token-not-found", `no token present in slot ${token.slot} (${slots.length} slots with a token)`);
    return hit;
  }
  const matches = slots.filter((s) => {
    try {
      return api.C_GetTokenInfo(s).label.trimEnd() === token.label;
    } catch {
      return false;
    }
  });
  if (matches.length === 0) throw new PkiError("token-not-found", `no token labelled "${token.label}" (${slots.length} slots with a token)`);
  if (matches.length > 1) throw new PkiError("token-ambiguous", `${matches.length} tokens are labelled "${token.label}"; name the slot instead`);
  return matches[0] as Handle;
}

export function openSession(api: PKCS11, slot: Handle, what: string): Handle {
  try {
    return api.C_OpenSession(slot, pkcs11js().CKF_SERIAL_SESSION);
  } catch (e) {
    throw new PkiError("token-unavailable", `cannot open a session on ${what}: ${pkcs11Reason(e)}`);
  }
}

/**
 * C_Login as CKU_USER (once per session) or CKU_CONTEXT_SPECIFIC (before each signature with a key whose
 * CKA_ALWAYS_AUTHENTICATE is set — YubiKey PIV slot 9c by default). The PIN is read here and dropped.
 */
export function login(api: PKCS11, session: Handle, pin: PinSource, contextSpecific: boolean, what: string): void {
  const p = pkcs11js();
  const value = readPin(pin);
  try {
    api.C_Login(session, contextSpecific ? p.CKU_CONTEXT_SPECIFIC : p.CKU_USER, value);
  } catch (e) {
    const code = pkcs11Code(e);
    if (code === p.CKR_USER_ALREADY_LOGGED_IN && !contextSpecific) return; // another session of this process
    const from = describePinSource(pin);
    if (code === p.CKR_PIN_INCORRECT || code === p.CKR_PIN_LEN_RANGE || code === p.CKR_PIN_INVALID) {
      throw new PkiError("pin-incorrect", `${what}: the PIN from ${from} was refused (${pkcs11Reason(e)}); not retrying — a YubiKey blocks its PIN after 3 wrong tries`);
    }
    if (code === p.CKR_PIN_LOCKED) {
      throw new PkiError("pin-locked", `${what}: the PIN is blocked (CKR_PIN_LOCKED); unblock it with the PUK (ykman piv access unblock-pin)`);
    }
    throw new PkiError("login-failed", `${what}: login with the PIN from ${from} failed: ${pkcs11Reason(e)}`);
  }
}

export function closeSession(api: PKCS11, session: Handle): void {
  try {
    api.C_CloseSession(session); // closing the last session also logs the user out (PKCS#11 §5.6)
  } catch {
    // the session is gone already (device removed); nothing left to release
  }
}
