/**
 * Verify a TPMT_SIGNATURE made by a TPM key over a message, with the scheme the key's public area allows.
 * The signature's scheme must fit the key type, and must equal the key's own scheme when it names one.
 */
import { constants, verify as cryptoVerify } from "node:crypto";
import { hashInfo, UnsupportedHashError } from "../crypto/hash.js";
import { algName, CURVES, isCurve, isHashAlg, TPM_ALG } from "../tcg/constants.js";
import { KeyError, keyObjectFromTpmPublic } from "../tpm/publicKey.js";
import type { TPMT_PUBLIC, TPMT_SIGNATURE } from "../tpm/structures.js";
import type { Checks } from "./verdict.js";

export interface SignatureOptions {
  /** Smallest digest size (bytes) accepted for the signature hash. Default 32 (SHA-256). */
  minHashSize?: number;
}

/** The signing scheme a key's public area fixes, if any. */
export function keySigningScheme(pub: TPMT_PUBLIC): { sigAlg: number; hashAlg: number } | undefined {
  if (pub.parameters.kind === "rsa") {
    const d = pub.parameters.scheme.details;
    if (d.kind === "rsassa") return { sigAlg: TPM_ALG.RSASSA, hashAlg: d.hashAlg };
    if (d.kind === "rsapss") return { sigAlg: TPM_ALG.RSAPSS, hashAlg: d.hashAlg };
  }
  if (pub.parameters.kind === "ecc") {
    const d = pub.parameters.scheme.details;
    if (d.kind === "ecdsa") return { sigAlg: TPM_ALG.ECDSA, hashAlg: d.hashAlg };
  }
  return undefined;
}

/**
 * Adds failed checks to `c` under `prefix` (e.g. "quote.signature"). Returns true when the signature verifies.
 */
export function verifyTpmSignature(
  c: Checks,
  prefix: string,
  key: TPMT_PUBLIC,
  message: Uint8Array,
  sig: TPMT_SIGNATURE,
  opts: SignatureOptions = {},
): boolean {
  const minHash = opts.minHashSize ?? 32;
  const s = sig.signature;
  const keyKind = key.parameters.kind;
  const fits = (keyKind === "rsa" && (s.kind === "rsassa" || s.kind === "rsapss")) || (keyKind === "ecc" && s.kind === "ecdsa");
  if (!c.check(fits, `${prefix}.scheme`, `a ${s.kind} signature cannot come from a ${keyKind} key`)) return false;
  const fixed = keySigningScheme(key);
  if (fixed && (fixed.sigAlg !== sig.sigAlg || fixed.hashAlg !== s.hash)) {
    return c.fail(
      `${prefix}.scheme`,
      `signature is ${algName(sig.sigAlg)}/${algName(s.hash)} but the key's scheme is ${algName(fixed.sigAlg)}/${algName(fixed.hashAlg)}`,
    );
  }
  if (!isHashAlg(s.hash)) return c.fail(`${prefix}.hash`, `signature hash ${algName(s.hash)} is not supported`);
  const h = hashInfo(s.hash);
  if (!c.check(h.size >= minHash, `${prefix}.hash`, `signature hash ${h.name} is weaker than allowed (min ${minHash * 8} bits)`)) return false;

  let keyObj;
  try {
    keyObj = keyObjectFromTpmPublic(key);
  } catch (e) {
    if (e instanceof KeyError || e instanceof UnsupportedHashError) return c.fail(`${prefix}.key`, e.message);
    throw e;
  }
  let ok = false;
  try {
    if (s.kind === "rsassa") {
      ok = cryptoVerify(h.name, message, { key: keyObj, padding: constants.RSA_PKCS1_PADDING }, s.sig);
    } else if (s.kind === "rsapss") {
      ok = cryptoVerify(h.name, message, { key: keyObj, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: constants.RSA_PSS_SALTLEN_AUTO }, s.sig);
    } else if (s.kind === "ecdsa" && key.parameters.kind === "ecc" && isCurve(key.parameters.curveID)) {
      const size = CURVES[key.parameters.curveID].size;
      if (s.signatureR.length > size || s.signatureS.length > size) return c.fail(`${prefix}.signature`, "ECDSA r or s is longer than the curve size");
      const rs = new Uint8Array(2 * size);
      rs.set(s.signatureR, size - s.signatureR.length);
      rs.set(s.signatureS, 2 * size - s.signatureS.length);
      ok = cryptoVerify(h.name, message, { key: keyObj, dsaEncoding: "ieee-p1363" }, rs);
    }
  } catch {
    ok = false;
  }
  return c.check(ok, `${prefix}.signature`, "signature does not verify with the given key");
}
