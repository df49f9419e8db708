/**
 * TPM key derivation functions (TPM 2.0 Library Part 1 §11.4.10).
 * KDFa: SP800-108 counter mode with HMAC. KDFe: SP800-56A concatenation KDF.
 * Both append a 0x00 after the label unless it already ends in one, and mask a partial first byte.
 */
import { createHash, createHmac } from "node:crypto";
import { hashInfo } from "./hash.js";

function labelBytes(label: string | Uint8Array): Uint8Array {
  const b = typeof label === "string" ? new TextEncoder().encode(label) : label;
  if (b.length > 0 && b[b.length - 1] === 0) return b;
  const out = new Uint8Array(b.length + 1);
  out.set(b);
  return out;
}

function u32be(n: number): Uint8Array {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, n >>> 0, false);
  return b;
}

function finish(blocks: Buffer[], bits: number): Uint8Array {
  const bytes = Math.ceil(bits / 8);
  const out = new Uint8Array(Buffer.concat(blocks).subarray(0, bytes));
  const rem = bits % 8;
  if (rem !== 0 && out.length > 0) out[0] = (out[0] ?? 0) & ((1 << rem) - 1);
  return out;
}

function checkBits(bits: number): void {
  if (!Number.isInteger(bits) || bits < 0 || bits > 8 * 1024 * 8) throw new RangeError(`KDF output of ${bits} bits is not allowed`);
}

/** KDFa(hashAlg, key, label, contextU, contextV, bits). */
export function kdfa(
  hashAlg: number,
  key: Uint8Array,
  label: string | Uint8Array,
  contextU: Uint8Array,
  contextV: Uint8Array,
  bits: number,
): Uint8Array {
  checkBits(bits);
  const { name, size } = hashInfo(hashAlg);
  const lab = labelBytes(label);
  const blocks: Buffer[] = [];
  for (let i = 1; blocks.length * size * 8 < bits; i++) {
    blocks.push(createHmac(name, key).update(u32be(i)).update(lab).update(contextU).update(contextV).update(u32be(bits)).digest());
  }
  return finish(blocks, bits);
}

/** KDFe(hashAlg, Z, label, partyUInfo, partyVInfo, bits). */
export function kdfe(
  hashAlg: number,
  z: Uint8Array,
  label: string | Uint8Array,
  partyU: Uint8Array,
  partyV: Uint8Array,
  bits: number,
): Uint8Array {
  checkBits(bits);
  const { name, size } = hashInfo(hashAlg);
  const lab = labelBytes(label);
  const blocks: Buffer[] = [];
  for (let i = 1; blocks.length * size * 8 < bits; i++) {
    blocks.push(createHash(name).update(u32be(i)).update(z).update(lab).update(partyU).update(partyV).digest());
  }
  return finish(blocks, bits);
}
