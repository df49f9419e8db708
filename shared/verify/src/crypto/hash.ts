/** Hashing by TPM algorithm id, and constant-time comparison. */
import { createHash, createHmac, timingSafeEqual } from "node:crypto";
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

export function digest(alg: number, ...parts: Uint8Array[]): Uint8Array {
  const h = createHash(hashInfo(alg).name);
  for (const p of parts) h.update(p);
  return new Uint8Array(h.digest());
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

export function hex(b: Uint8Array): string {
  return Buffer.from(b).toString("hex");
}

export function fromHex(s: string, what = "hex"): Uint8Array {
  const t = s.trim().replace(/^0x/i, "");
  if (t.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(t)) throw new Error(`${what} is not valid hex`);
  return new Uint8Array(Buffer.from(t, "hex"));
}

export function concat(...parts: Uint8Array[]): Uint8Array {
  return new Uint8Array(Buffer.concat(parts));
}
