/**
 * Canonical SubjectPublicKeyInfo of a certificate's (or a PEM file's) public key — the bytes fleetd's EK
 * binding hashes, identical to `spkiFromTpmPublic` for the same key:
 *   RSA: rsaEncryption + NULL parameters, also when the certificate says id-RSAES-OAEP or id-RSASSA-PSS;
 *   EC:  id-ecPublicKey + named curve + uncompressed point (compressed points are expanded).
 */
import { ECDH, createPublicKey, type KeyObject } from "node:crypto";
import { CURVES, type CurveId } from "../tcg/constants.js";
import { ecSpki, rsaSpki } from "../tpm/publicKey.js";
import type { SubjectPublicKeyInfo } from "./certificate.js";
import { DerReader, TAG, decodeOid, tlvContent } from "./der.js";
import { CertificateError } from "./errors.js";
import { OID } from "./oids.js";

export type CanonicalKey =
  | { alg: "rsa"; spki: Uint8Array; bits: number; n: Uint8Array; exponent: number }
  | { alg: "ecc"; spki: Uint8Array; bits: number; curveId: CurveId; curve: string; x: Uint8Array; y: Uint8Array };

const RSA_KEY_OIDS = new Set<string>([OID.rsaEncryption, OID.rsaesOaep, OID.rsassaPss]);

function curveByOid(oid: string): CurveId | undefined {
  for (const [id, c] of Object.entries(CURVES)) if (c.oid === oid) return Number(id) as CurveId;
  return undefined;
}

/** Decode a SubjectPublicKeyInfo into its canonical form; unsupported or invalid keys are CertificateErrors. */
export function canonicalKey(spki: SubjectPublicKeyInfo): CanonicalKey {
  const alg = spki.algorithm.oid;
  if (RSA_KEY_OIDS.has(alg)) return canonicalRsa(spki);
  if (alg === OID.ecPublicKey) return canonicalEc(spki);
  throw new CertificateError("unsupported-key", `public key algorithm ${alg} is neither RSA nor EC`);
}

function canonicalRsa(spki: SubjectPublicKeyInfo): CanonicalKey {
  const { params } = spki.algorithm;
  if (spki.algorithm.oid === OID.rsaEncryption && params && !(params.length === 2 && params[0] === TAG.NULL && params[1] === 0)) {
    throw new CertificateError("invalid-key", "rsaEncryption key has parameters other than NULL");
  }
  const d = DerReader.of(spki.publicKey, "RSAPublicKey");
  const seq = d.enter(TAG.SEQUENCE, "RSAPublicKey");
  const n = seq.field("modulus", () => seq.unsignedInteger());
  const e = seq.field("publicExponent", () => seq.unsignedInteger());
  seq.expectEnd("RSAPublicKey");
  d.expectEnd("RSAPublicKey");
  if (e.length > 4) throw new CertificateError("unsupported-key", "RSA public exponent is larger than 32 bits");
  const exponent = e.reduce((a, b) => a * 256 + b, 0);
  if (exponent < 3 || exponent % 2 === 0) throw new CertificateError("invalid-key", `RSA public exponent ${exponent} is invalid`);
  const bits = bitLength(n);
  if (bits < 512) throw new CertificateError("invalid-key", `RSA modulus of ${bits} bits is too small`);
  const out = new Uint8Array(rsaSpki(n, exponent));
  checkWithCrypto(out);
  return { alg: "rsa", spki: out, bits, n, exponent };
}

function canonicalEc(spki: SubjectPublicKeyInfo): CanonicalKey {
  const params = spki.algorithm.params;
  if (!params || params[0] !== TAG.OID) throw new CertificateError("unsupported-key", "EC key without a named curve (explicit curve parameters are not supported)");
  const pd = DerReader.of(params, "ECParameters");
  const t = pd.next(TAG.OID, "namedCurve");
  pd.expectEnd("ECParameters");
  const curveOid = decodeOid(tlvContent(t), pd, 0);
  const curveId = curveByOid(curveOid);
  if (curveId === undefined) throw new CertificateError("unsupported-key", `EC curve ${curveOid} is not supported (P-256, P-384, P-521 are)`);
  const curve = CURVES[curveId];
  let point = spki.publicKey;
  if (point.length === 1 + curve.size && (point[0] === 0x02 || point[0] === 0x03)) {
    try {
      point = new Uint8Array(ECDH.convertKey(Buffer.from(point), curve.nodeName, undefined, undefined, "uncompressed") as Buffer);
    } catch (e) {
      throw new CertificateError("invalid-key", `compressed EC point is not on ${curve.name}: ${(e as Error).message}`);
    }
  }
  if (point.length !== 1 + 2 * curve.size || point[0] !== 0x04) {
    throw new CertificateError("invalid-key", `EC point is ${point.length} bytes with prefix 0x${(point[0] ?? 0).toString(16)}; ${curve.name} needs 04 ‖ x ‖ y (${1 + 2 * curve.size} bytes)`);
  }
  const x = point.slice(1, 1 + curve.size);
  const y = point.slice(1 + curve.size);
  const out = new Uint8Array(ecSpki(curve.oid, x, y));
  checkWithCrypto(out);
  return { alg: "ecc", spki: out, bits: curve.size * 8, curveId, curve: curve.name, x, y };
}

function checkWithCrypto(spki: Uint8Array): void {
  keyObjectFromCanonical(spki);
}

/** node:crypto KeyObject from canonical SPKI bytes (point-on-curve and modulus checks happen here). */
export function keyObjectFromCanonical(spki: Uint8Array): KeyObject {
  try {
    return createPublicKey({ key: Buffer.from(spki), format: "der", type: "spki" });
  } catch (e) {
    throw new CertificateError("invalid-key", `public key rejected by the crypto library: ${(e as Error).message}`);
  }
}

function bitLength(n: Uint8Array): number {
  let i = 0;
  while (i < n.length && n[i] === 0) i++;
  if (i === n.length) return 0;
  return (n.length - i - 1) * 8 + (32 - Math.clz32(n[i] ?? 0));
}

/** "RSA-2048", "ECC P-384". */
export function describeCanonicalKey(k: CanonicalKey): string {
  return k.alg === "rsa" ? `RSA-${k.bits}${k.exponent === 65537 ? "" : ` e=${k.exponent}`}` : `ECC ${k.curve}`;
}
