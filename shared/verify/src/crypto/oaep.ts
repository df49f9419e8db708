/**
 * RSAES-OAEP encryption (RFC 8017 §7.1.1) with an explicit seed, over raw RSA. One code path for
 * production (random seed) and the deterministic test vectors (given seed), so the vectors test what runs.
 */
import { constants, publicEncrypt, randomBytes, type KeyObject } from "node:crypto";
import { digest, hashInfo } from "./hash.js";

function mgf1(hashAlg: number, seed: Uint8Array, len: number): Uint8Array {
  const { size } = hashInfo(hashAlg);
  const out = new Uint8Array(Math.ceil(len / size) * size);
  const ctr = new Uint8Array(4);
  for (let i = 0, off = 0; off < len; i++, off += size) {
    new DataView(ctr.buffer).setUint32(0, i, false);
    out.set(digest(hashAlg, seed, ctr), off);
  }
  return out.subarray(0, len);
}

export function oaepEncrypt(
  key: KeyObject,
  hashAlg: number,
  label: Uint8Array,
  message: Uint8Array,
  seed: Uint8Array = new Uint8Array(randomBytes(hashInfo(hashAlg).size)),
): Uint8Array {
  const hLen = hashInfo(hashAlg).size;
  const modulusBits = key.asymmetricKeyDetails?.modulusLength;
  if (!modulusBits) throw new Error("OAEP needs an RSA public key");
  const k = Math.ceil(modulusBits / 8);
  if (message.length > k - 2 * hLen - 2) throw new RangeError(`message of ${message.length} bytes is too long for OAEP with this key`);
  if (seed.length !== hLen) throw new RangeError(`OAEP seed must be ${hLen} bytes`);
  const db = new Uint8Array(k - hLen - 1);
  db.set(digest(hashAlg, label), 0);
  db[k - hLen - 1 - message.length - 1] = 0x01;
  db.set(message, k - hLen - 1 - message.length);
  const dbMask = mgf1(hashAlg, seed, db.length);
  for (let i = 0; i < db.length; i++) db[i] = (db[i] ?? 0) ^ (dbMask[i] ?? 0);
  const seedMask = mgf1(hashAlg, db, hLen);
  const maskedSeed = seed.map((b, i) => b ^ (seedMask[i] ?? 0));
  const em = new Uint8Array(k);
  em.set(maskedSeed, 1);
  em.set(db, 1 + hLen);
  return new Uint8Array(publicEncrypt({ key, padding: constants.RSA_NO_PADDING }, em));
}
