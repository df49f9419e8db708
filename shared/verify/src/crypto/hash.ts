/** Hashing by TPM algorithm id, and constant-time comparison. */
import { createHash, createHmac, hash, timingSafeEqual } from "node:crypto";
import { algName, HASHES, isHashAlg, type HashAlgId } from "../tcg/constants.js";

export class UnsupportedHashError extends Error {
  override readonly name = "UnsupportedHashError";
  constructor(readonly alg: number) {
    super(`hash algorithm ${algName(alg)} is not supported`);
  }
}

export function hashInfo(alg: number): (typeof HASHES)[HashAlgId] {
  if (!isHashAlg(alg)) throw new UnsupportedHashError(alg);
  return HASHES[alg];
}

/** A Uint8Array over a digest Buffer's own memory (node:crypto gives each digest its own ArrayBuffer): no copy. */
function asBytes(b: Buffer): Uint8Array {
  return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

/** Up to this many bytes, parts are copied into one buffer and hashed one-shot (cheaper than an update per part). */
const ONE_SHOT_MAX = 64 * 1024;

export function digest(alg: number, ...parts: Uint8Array[]): Uint8Array {
  const name = hashInfo(alg).name;
  if (parts.length === 1) return asBytes(hash(name, parts[0]!, "buffer")); // one-shot: no Hash object
  let total = 0;
  for (const p of parts) total += p.length;
  if (total <= ONE_SHOT_MAX) {
    const all = new Uint8Array(total);
    let at = 0;
    for (const p of parts) {
      all.set(p, at);
      at += p.length;
    }
    return asBytes(hash(name, all, "buffer"));
  }
  const h = createHash(name);
  for (const p of parts) h.update(p);
  return asBytes(h.digest());
}

/**
 * PCR extension for one bank: `extend(pcr, d)` = H(pcr ‖ d), with one reusable input buffer and node:crypto's
 * one-shot hash (no Hash object per event). `pcr` and `d` must both have the bank's digest size.
 */
export function pcrExtender(alg: number): (pcr: Uint8Array, d: Uint8Array) => Uint8Array {
  const { name, size } = hashInfo(alg);
  const input = new Uint8Array(2 * size);
  return (pcr, d) => {
    if (pcr.length !== size || d.length !== size) throw new Error(`${name} extend needs two ${size}-byte values, got ${pcr.length} and ${d.length}`);
    input.set(pcr, 0);
    input.set(d, size);
    return asBytes(hash(name, input, "buffer"));
  };
}

export function hmac(alg: number, key: Uint8Array, ...parts: Uint8Array[]): Uint8Array {
  const h = createHmac(hashInfo(alg).name, key);
  for (const p of parts) h.update(p);
  return new Uint8Array(h.digest());
}

/** Constant-time equality for secrets and MACs (length is not secret). */
export function ctEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  return timingSafeEqual(a, b);
}

/** A Buffer over the same memory as `b` (no copy): for toString, compare and reads. */
export function bufferOf(b: Uint8Array): Buffer {
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength);
}

export function hex(b: Uint8Array): string {
  return bufferOf(b).toString("hex");
}

export function fromHex(s: string, what = "hex"): Uint8Array {
  const t = s.trim().replace(/^0x/i, "");
  if (t.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(t)) throw new Error(`${what} is not valid hex`);
  return new Uint8Array(Buffer.from(t, "hex"));
}

export function concat(...parts: Uint8Array[]): Uint8Array {
  return new Uint8Array(Buffer.concat(parts));
}
