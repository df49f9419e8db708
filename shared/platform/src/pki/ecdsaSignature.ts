/**
 * PKCS#11 CKM_ECDSA returns r || s, each left-padded to the curve size (PKCS#11 v2.40 §2.3.1); X.509 wants
 * the DER ECDSA-Sig-Value ::= SEQUENCE { r INTEGER, s INTEGER } (RFC 3279 §2.2.3).
 */
import { der, derUint } from "@fleetd/verify/tpm";
import { PkiError } from "./errors.js";

export function ecdsaSignatureToDer(raw: Uint8Array, curveSize: number): Uint8Array {
  if (raw.length !== 2 * curveSize) {
    throw new PkiError("sign-failed", `ECDSA signature is ${raw.length} bytes, expected r || s of ${2 * curveSize}`);
  }
  const r = raw.subarray(0, curveSize);
  const s = raw.subarray(curveSize);
  if (r.every((b) => b === 0) || s.every((b) => b === 0)) {
    throw new PkiError("sign-failed", "ECDSA signature has a zero r or s");
  }
  return der(0x30, derUint(r), derUint(s));
}
