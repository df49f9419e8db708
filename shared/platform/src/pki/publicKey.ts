/**
 * Public keys entering a certificate: a DER SubjectPublicKeyInfo, a TPMT_PUBLIC, or raw key parts read from
 * a token, all turned into one canonical SPKI (rsaEncryption + NULL; id-ecPublicKey + named curve +
 * uncompressed point — the encoding of tpm/publicKey.ts) so the certificate never depends on how the key
 * reached us. The key is validated by node:crypto (point on curve, sane modulus).
 */
import { createHash, createPublicKey, type KeyObject } from "node:crypto";
import { type TPMT_PUBLIC, derOid, ecSpki, KeyError, rsaSpki, spkiFromTpmPublic } from "@fleetd/verify/tpm";
import { parseSubjectPublicKeyInfo } from "@fleetd/verify/x509";
import { EC_CURVES, type EcCurve, type PublicKeyInfo } from "./algorithms.js";
import { PkiError } from "./errors.js";

export type PublicKeyInput = Uint8Array | TPMT_PUBLIC;

function isTpmPublic(k: PublicKeyInput): k is TPMT_PUBLIC {
  return !(k instanceof Uint8Array);
}

export function publicKeyInfo(input: PublicKeyInput): PublicKeyInfo {
  let spki: Uint8Array;
  if (isTpmPublic(input)) {
    try {
      spki = spkiFromTpmPublic(input);
    } catch (e) {
      if (e instanceof KeyError) throw new PkiError(e.code === "unsupported-key" ? "unsupported-key" : "invalid-key", e.message);
      throw e;
    }
  } else {
    spki = input;
  }
  return publicKeyInfoFromSpki(spki);
}

export function publicKeyInfoFromSpki(spki: Uint8Array): PublicKeyInfo {
  let key: KeyObject;
  try {
    key = createPublicKey({ key: Buffer.from(spki), format: "der", type: "spki" });
  } catch (e) {
    throw new PkiError("invalid-key", `public key is not a valid DER SubjectPublicKeyInfo: ${(e as Error).message}`);
  }
  return publicKeyInfoFromKeyObject(key);
}

export function publicKeyInfoFromKeyObject(key: KeyObject): PublicKeyInfo {
  const jwk = key.export({ format: "jwk" });
  if (key.asymmetricKeyType === "rsa" && jwk.n && jwk.e) {
    const n = new Uint8Array(Buffer.from(jwk.n, "base64url"));
    const e = Buffer.from(jwk.e, "base64url");
    if (e.length > 4) throw new PkiError("unsupported-key", `RSA public exponent of ${e.length} bytes is not supported`);
    const exponent = e.reduce((acc, b) => acc * 256 + b, 0);
    return { kind: "rsa", bits: key.asymmetricKeyDetails?.modulusLength ?? n.length * 8, spki: rsaSpki(n, exponent) };
  }
  if (key.asymmetricKeyType === "ec" && jwk.x && jwk.y) {
    const curve = jwk.crv === "P-256" || jwk.crv === "P-384" ? (jwk.crv as EcCurve) : undefined;
    if (!curve) throw new PkiError("unsupported-key", `ECC curve ${jwk.crv ?? key.asymmetricKeyDetails?.namedCurve ?? "?"} is not supported`);
    const x = Buffer.from(jwk.x, "base64url");
    const y = Buffer.from(jwk.y, "base64url");
    return { kind: "ec", curve, spki: ecSpki(EC_CURVES[curve].oid, x, y) };
  }
  throw new PkiError("unsupported-key", `${key.asymmetricKeyType ?? "unknown"} keys are not supported (RSA or ECC P-256/P-384 only)`);
}

/** An EC public key from a PKCS#11 token: CKA_EC_PARAMS (DER OID) and CKA_EC_POINT (DER OCTET STRING or raw). */
export function publicKeyInfoFromEcPoint(ecParams: Uint8Array, ecPoint: Uint8Array): PublicKeyInfo {
  const curve = (Object.keys(EC_CURVES) as EcCurve[]).find((c) => Buffer.from(derOid(EC_CURVES[c].oid)).equals(ecParams));
  if (!curve) {
    throw new PkiError("unsupported-key", `token key has EC parameters ${Buffer.from(ecParams).toString("hex")}; only named curves P-256 and P-384 are supported`);
  }
  const size = EC_CURVES[curve].size;
  let point = ecPoint;
  if (point.length === 2 * size + 3 && point[0] === 0x04 && point[1] === 2 * size + 1) point = point.subarray(2);
  if (point.length !== 2 * size + 1 || point[0] !== 0x04) {
    throw new PkiError("invalid-key", `token EC point is ${ecPoint.length} bytes, not an uncompressed ${curve} point`);
  }
  const spki = ecSpki(EC_CURVES[curve].oid, point.subarray(1, 1 + size), point.subarray(1 + size));
  return publicKeyInfoFromSpki(spki); // validates the point
}

export function publicKeyInfoFromRsa(modulus: Uint8Array, exponent: Uint8Array): PublicKeyInfo {
  if (exponent.length > 4) throw new PkiError("unsupported-key", `RSA public exponent of ${exponent.length} bytes is not supported`);
  return publicKeyInfoFromSpki(rsaSpki(modulus, exponent.reduce((acc, b) => acc * 256 + b, 0)));
}

/**
 * Key identifier (RFC 5280 §4.2.1.2 method 1): SHA-1 of the subjectPublicKey BIT STRING's value. SHA-1 is
 * only a name here, not a security function; it is what OpenSSL computes too.
 */
export function keyIdentifier(spki: Uint8Array): Uint8Array {
  const info = parseSubjectPublicKeyInfo(spki);
  return new Uint8Array(createHash("sha1").update(info.publicKey).digest());
}
