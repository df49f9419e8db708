/**
 * Public keys of TPM objects: from a TPMT_PUBLIC to a node:crypto KeyObject and to the canonical
 * DER SubjectPublicKeyInfo that fleetd's EK binding hashes.
 *
 * Canonical SPKI: RSA as rsaEncryption with NULL parameters; EC as id-ecPublicKey + named curve +
 * uncompressed point. Built by hand (DER is small and fixed here) so the bytes never depend on how a
 * library chose to encode an equivalent key.
 */
import { createPublicKey, type KeyObject } from "node:crypto";
import { CURVES, isCurve, TPM_ALG } from "../tcg/constants.js";
import type { TPMT_PUBLIC } from "./structures.js";

export class KeyError extends Error {
  override readonly name = "KeyError";
  constructor(
    readonly code: "unsupported-key" | "invalid-key",
    message: string,
  ) {
    super(message);
  }
}

// ---- minimal DER writer ----
function derLen(n: number): Uint8Array {
  if (n < 0x80) return Uint8Array.of(n);
  const bytes: number[] = [];
  for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v & 0xff);
  return Uint8Array.of(0x80 | bytes.length, ...bytes);
}
export function der(tag: number, ...parts: Uint8Array[]): Uint8Array {
  const body = Buffer.concat(parts);
  return Buffer.concat([Uint8Array.of(tag), derLen(body.length), body]);
}
/** DER INTEGER of an unsigned big-endian magnitude (leading zeros stripped, sign byte added when needed). */
export function derUint(b: Uint8Array): Uint8Array {
  let i = 0;
  while (i < b.length - 1 && b[i] === 0) i++;
  let v = b.subarray(i);
  if (v.length === 0) v = Uint8Array.of(0);
  if ((v[0] ?? 0) & 0x80) v = Buffer.concat([Uint8Array.of(0), v]);
  return der(0x02, v);
}
const oidCache = new Map<string, Uint8Array>();
export function derOid(oid: string): Uint8Array {
  const hit = oidCache.get(oid);
  if (hit) return hit;
  const enc = encodeOid(oid);
  oidCache.set(oid, enc);
  return enc;
}
function encodeOid(oid: string): Uint8Array {
  const parts = oid.split(".").map((p) => BigInt(p));
  const [a, b, ...rest] = parts;
  if (a === undefined || b === undefined) throw new Error(`bad OID ${oid}`);
  const out: number[] = [Number(a * 40n + b)];
  for (const p of rest) {
    const enc: number[] = [];
    let v = p;
    do {
      enc.unshift(Number(v & 0x7fn));
      v >>= 7n;
    } while (v > 0n);
    for (let i = 0; i < enc.length - 1; i++) enc[i] = (enc[i] ?? 0) | 0x80;
    out.push(...enc);
  }
  return der(0x06, Uint8Array.from(out));
}

const OID_RSA = "1.2.840.113549.1.1.1";
const OID_EC = "1.2.840.10045.2.1";

export function rsaSpki(n: Uint8Array, exponent: number): Uint8Array {
  const e = exponent === 0 ? 65537 : exponent;
  const eBytes = Buffer.alloc(4);
  eBytes.writeUInt32BE(e >>> 0);
  const rsaPublicKey = der(0x30, derUint(n), derUint(eBytes));
  const alg = der(0x30, derOid(OID_RSA), Uint8Array.of(0x05, 0x00));
  return der(0x30, alg, der(0x03, Uint8Array.of(0), rsaPublicKey));
}

export function ecSpki(curveOid: string, x: Uint8Array, y: Uint8Array): Uint8Array {
  const alg = der(0x30, derOid(OID_EC), derOid(curveOid));
  return der(0x30, alg, der(0x03, Uint8Array.of(0, 0x04), x, y));
}

/** RSA public exponent as a number (0 in a TPMT_PUBLIC means the default 65537). */
export function rsaExponent(pub: TPMT_PUBLIC): number {
  if (pub.parameters.kind !== "rsa") throw new KeyError("unsupported-key", "not an RSA key");
  return pub.parameters.exponent === 0 ? 65537 : pub.parameters.exponent;
}

/** Canonical DER SubjectPublicKeyInfo of an RSA or ECC TPMT_PUBLIC. */
export function spkiFromTpmPublic(pub: TPMT_PUBLIC): Uint8Array {
  if (pub.parameters.kind === "rsa" && pub.unique.kind === "rsa") {
    const bits = pub.parameters.keyBits;
    if (pub.unique.n.length !== bits / 8) {
      throw new KeyError("invalid-key", `RSA modulus is ${pub.unique.n.length} bytes, keyBits says ${bits / 8}`);
    }
    return rsaSpki(pub.unique.n, pub.parameters.exponent);
  }
  if (pub.parameters.kind === "ecc" && pub.unique.kind === "ecc") {
    const curveId = pub.parameters.curveID;
    if (!isCurve(curveId)) throw new KeyError("unsupported-key", `ECC curve 0x${curveId.toString(16)} is not supported`);
    const curve = CURVES[curveId];
    const x = leftPad(pub.unique.x, curve.size, "x");
    const y = leftPad(pub.unique.y, curve.size, "y");
    return ecSpki(curve.oid, x, y);
  }
  throw new KeyError("unsupported-key", `object type ${pub.parameters.kind} has no asymmetric public key`);
}

function leftPad(b: Uint8Array, size: number, what: string): Uint8Array {
  if (b.length > size) throw new KeyError("invalid-key", `ECC ${what} coordinate is ${b.length} bytes, curve needs ${size}`);
  if (b.length === size) return b;
  const out = new Uint8Array(size);
  out.set(b, size - b.length);
  return out;
}

/**
 * Importing a key through OpenSSL 3's decoders costs far more than one signature check, and attestation
 * sees the same few keys again and again; public keys are not secret, so keep the last few imported.
 */
const KEY_CACHE_SIZE = 256;
const keyCache = new Map<string, KeyObject>();

/** node:crypto KeyObject for a TPMT_PUBLIC (validates that the point is on the curve / modulus is sane). */
const byObject = new WeakMap<TPMT_PUBLIC, KeyObject>();
export function keyObjectFromTpmPublic(pub: TPMT_PUBLIC): KeyObject {
  const known = byObject.get(pub);
  if (known) return known;
  const key = importKey(pub);
  byObject.set(pub, key);
  return key;
}

function importKey(pub: TPMT_PUBLIC): KeyObject {
  const spki = spkiFromTpmPublic(pub);
  const cacheKey = Buffer.from(spki).toString("base64");
  const hit = keyCache.get(cacheKey);
  if (hit) return hit;
  let key: KeyObject;
  try {
    key = createPublicKey({ key: Buffer.from(spki), format: "der", type: "spki" });
  } catch (e) {
    throw new KeyError("invalid-key", `public key rejected by the crypto library: ${(e as Error).message}`);
  }
  if (keyCache.size >= KEY_CACHE_SIZE) {
    const oldest = keyCache.keys().next().value;
    if (oldest !== undefined) keyCache.delete(oldest);
  }
  keyCache.set(cacheKey, key);
  return key;
}

/** Key algorithm and size for reports and attribute checks. */
export function describeKey(pub: TPMT_PUBLIC): { alg: "rsa" | "ecc" | "other"; bits: number; curve?: string } {
  if (pub.parameters.kind === "rsa") return { alg: "rsa", bits: pub.parameters.keyBits };
  if (pub.parameters.kind === "ecc") {
    const id = pub.parameters.curveID;
    if (isCurve(id)) return { alg: "ecc", bits: CURVES[id].size * 8, curve: CURVES[id].name };
    return { alg: "ecc", bits: 0, curve: `0x${id.toString(16)}` };
  }
  return { alg: "other", bits: 0 };
}

export { TPM_ALG };
