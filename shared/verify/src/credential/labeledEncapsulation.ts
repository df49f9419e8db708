/**
 * Secret sharing with a TPM key (TPM 2.0 Library Part 1 §24 "Secret Sharing"; "labeled encapsulation" in
 * newer texts): RSA keys get the seed by RSAES-OAEP with the label as OAEP label; ECC keys by one-pass
 * ECDH with an ephemeral key and KDFe. Everything uses the protecting key's nameAlg.
 */
import { createECDH, randomBytes } from "node:crypto";
import { encode } from "../codec/codec.js";
import { kdfe } from "../crypto/kdf.js";
import { oaepEncrypt } from "../crypto/oaep.js";
import { hashInfo } from "../crypto/hash.js";
import { CURVES, isCurve, TPM_ALG } from "../tcg/constants.js";
import { keyObjectFromTpmPublic } from "../tpm/publicKey.js";
import { TPMS_ECC_POINT, type TPMT_PUBLIC } from "../tpm/structures.js";

export class EncapsulationError extends Error {
  override readonly name = "EncapsulationError";
  constructor(
    readonly code: "unsupported-key" | "invalid-key",
    message: string,
  ) {
    super(message);
  }
}

export interface Encapsulation {
  /** The shared seed (digest-size bytes of the key's nameAlg). Secret. */
  seed: Uint8Array;
  /** Contents of the TPM2B_ENCRYPTED_SECRET: OAEP ciphertext, or a marshalled TPMS_ECC_POINT. */
  encryptedSecret: Uint8Array;
}

/** Deterministic inputs for test vectors; production leaves them unset. */
export interface EncapsulationRandomness {
  /** RSA: the seed to share. ECC: ignored (derived). */
  seed?: Uint8Array;
  /** RSA: the OAEP seed ("salt"). */
  oaepSeed?: Uint8Array;
  /** ECC: the ephemeral private scalar. */
  ephemeralPrivate?: Uint8Array;
}

function labelWithNul(label: string): Uint8Array {
  const b = new TextEncoder().encode(label);
  const out = new Uint8Array(b.length + 1);
  out.set(b);
  return out;
}

export function labeledEncapsulate(pub: TPMT_PUBLIC, label: string, rnd: EncapsulationRandomness = {}): Encapsulation {
  if (pub.nameAlg === TPM_ALG.NULL) throw new EncapsulationError("invalid-key", "protecting key has a NULL nameAlg");
  if (pub.parameters.kind === "rsa") {
    // An OAEP scheme on the key names its own hash; otherwise (NULL scheme, as on EKs) the nameAlg is used.
    const scheme = pub.parameters.scheme.details;
    const oaepHash = scheme.kind === "oaep" ? scheme.hashAlg : pub.nameAlg;
    if (scheme.kind !== "oaep" && scheme.kind !== "null") {
      throw new EncapsulationError("invalid-key", `RSA key with scheme ${scheme.kind} cannot receive a secret`);
    }
    const { size } = hashInfo(oaepHash);
    const seed = rnd.seed ?? new Uint8Array(randomBytes(size));
    if (seed.length !== size) throw new EncapsulationError("invalid-key", `seed must be ${size} bytes`);
    const key = keyObjectFromTpmPublic(pub);
    const encryptedSecret = oaepEncrypt(key, oaepHash, labelWithNul(label), seed, rnd.oaepSeed);
    return { seed, encryptedSecret };
  }
  if (pub.parameters.kind === "ecc" && pub.unique.kind === "ecc") {
    const { size } = hashInfo(pub.nameAlg);
    const curveId = pub.parameters.curveID;
    if (!isCurve(curveId)) throw new EncapsulationError("unsupported-key", `ECC curve 0x${curveId.toString(16)} is not supported`);
    const curve = CURVES[curveId];
    const pad = (b: Uint8Array) => {
      if (b.length > curve.size) throw new EncapsulationError("invalid-key", "ECC coordinate longer than the curve size");
      const o = new Uint8Array(curve.size);
      o.set(b, curve.size - b.length);
      return o;
    };
    const qx = pad(pub.unique.x);
    const qy = pad(pub.unique.y);
    const ecdh = createECDH(curve.nodeName);
    if (rnd.ephemeralPrivate) ecdh.setPrivateKey(Buffer.from(rnd.ephemeralPrivate));
    else ecdh.generateKeys();
    const ephPub = new Uint8Array(ecdh.getPublicKey());
    const ex = ephPub.subarray(1, 1 + curve.size);
    const ey = ephPub.subarray(1 + curve.size);
    let z: Uint8Array;
    try {
      z = new Uint8Array(ecdh.computeSecret(Buffer.concat([Uint8Array.of(4), qx, qy])));
    } catch (e) {
      throw new EncapsulationError("invalid-key", `ECDH with the protecting key failed: ${(e as Error).message}`);
    }
    const seed = kdfe(pub.nameAlg, z, label, ex, qx, size * 8);
    const encryptedSecret = encode(TPMS_ECC_POINT, { x: ex, y: ey });
    return { seed, encryptedSecret };
  }
  throw new EncapsulationError("unsupported-key", `cannot encapsulate to a ${pub.parameters.kind} key`);
}
