/** Reading TPM objects from the files tools write (tpm2-tools "tss" format is the marshalled TPM2B/TPMT). */
import { decodeExact, ParseError } from "../codec/codec.js";
import { TPM2B_PUBLIC, TPMT_PUBLIC, type TPMT_PUBLIC as Public } from "./structures.js";

/**
 * A public area from a file holding either a TPM2B_PUBLIC (`tpm2_createak -u`, `tpm2_createek -u`) or a bare
 * TPMT_PUBLIC. Returns the decoded value and the exact TPMT_PUBLIC bytes (for the Name).
 */
export function readPublicArea(bytes: Uint8Array): { pub: Public; tpmtBytes: Uint8Array } {
  if (bytes.length >= 2 && ((bytes[0] ?? 0) << 8) + (bytes[1] ?? 0) === bytes.length - 2) {
    const tpmtBytes = bytes.subarray(2);
    return { pub: decodeExact(TPM2B_PUBLIC, bytes), tpmtBytes };
  }
  return { pub: decodeExact(TPMT_PUBLIC, bytes), tpmtBytes: bytes };
}

/** A sized structure may come with or without its u16 size prefix (tpm2-tools writes attestations bare). */
export function stripSizePrefix(bytes: Uint8Array): Uint8Array {
  if (bytes.length >= 2 && ((bytes[0] ?? 0) << 8) + (bytes[1] ?? 0) === bytes.length - 2) return bytes.subarray(2);
  return bytes;
}

export { ParseError };
