/**
 * Object Names (Part 1 §16): Name = nameAlg ‖ H_nameAlg(marshalled TPMT_PUBLIC), computed over the exact bytes
 * received (never a re-encoding), so a verifier and the TPM always agree.
 */
import { decodeExact, encode } from "../codec/codec.js";
import { digest } from "../crypto/hash.js";
import { TPM_ALG } from "../tcg/constants.js";
import { TPMT_PUBLIC } from "./structures.js";

/** Name of an object from its marshalled TPMT_PUBLIC bytes. A NULL nameAlg gives an empty Name. */
export function objectName(tpmtPublicBytes: Uint8Array): Uint8Array {
  const pub = decodeExact(TPMT_PUBLIC, tpmtPublicBytes);
  if (pub.nameAlg === TPM_ALG.NULL) return new Uint8Array(0);
  const h = digest(pub.nameAlg, tpmtPublicBytes);
  const out = new Uint8Array(2 + h.length);
  out[0] = pub.nameAlg >> 8;
  out[1] = pub.nameAlg & 0xff;
  out.set(h, 2);
  return out;
}

/** Name of a decoded public area (re-encodes it; round trips are exact, so this equals objectName(bytes)). */
export function nameOf(pub: TPMT_PUBLIC): Uint8Array {
  return objectName(encode(TPMT_PUBLIC, pub));
}
