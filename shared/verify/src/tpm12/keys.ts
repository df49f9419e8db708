/**
 * TPM 1.2 keys as typed values: a TPM_PUBKEY's RSA key (modulus, exponent, SPKI, node:crypto key), the AIK
 * template fleetd asks TPM_MakeIdentity for, and the TPM_PUBKEY of a TPM_KEY. Pure functions, no I/O.
 */
import type { KeyObject } from "node:crypto";
import { decodeExact, encode, ParseError } from "../codec/codec.js";
import { digest } from "../crypto/hash.js";
import { keyObjectFromCanonical } from "../x509/spki.js";
import { TPM_ALG } from "../tcg/constants.js";
import { rsaSpki } from "../tpm/publicKey.js";
import {
  TPM_KEY12_HEAD,
  TPM_PUBKEY,
  TPM_RSA_KEY_PARMS,
  TPM_STRUCT_VER_1_1,
  TPM12,
  type TPM_KEY,
  type TPM_KEY_PARMS,
} from "./structures.js";

export class Tpm12KeyError extends Error {
  override readonly name = "Tpm12KeyError";
  constructor(
    readonly code: "not-rsa" | "bad-parms" | "bad-modulus" | "bad-scheme" | "not-identity" | "bad-version",
    readonly detail: string,
  ) {
    super(detail);
  }
}

export interface Rsa12Key {
  bits: number;
  modulus: Uint8Array;
  exponent: number;
  /** Canonical DER SubjectPublicKeyInfo (rsaEncryption, NULL parameters): the EK binding is its SHA-256. */
  spki: Uint8Array;
  key: KeyObject;
  encScheme: number;
  sigScheme: number;
}

/** RSA parameters of a TPM_KEY_PARMS (RSA, 2 primes, keyLength = modulus bits, exponent ≤ 4 bytes). */
export function rsaParms(p: TPM_KEY_PARMS): { keyLength: number; exponent: number } {
  if (p.algorithmID !== TPM12.ALG_RSA) throw new Tpm12KeyError("not-rsa", `algorithmID 0x${p.algorithmID.toString(16)} is not TPM_ALG_RSA`);
  let parms;
  try {
    parms = decodeExact(TPM_RSA_KEY_PARMS, p.parms);
  } catch (e) {
    if (e instanceof ParseError) throw new Tpm12KeyError("bad-parms", `TPM_RSA_KEY_PARMS: ${e.message}`);
    throw e;
  }
  if (parms.numPrimes !== 2) throw new Tpm12KeyError("bad-parms", `numPrimes ${parms.numPrimes} (must be 2)`);
  if (parms.exponent.length > 4) throw new Tpm12KeyError("bad-parms", `exponent of ${parms.exponent.length} bytes`);
  let e = 0;
  for (const b of parms.exponent) e = e * 256 + b;
  return { keyLength: parms.keyLength, exponent: parms.exponent.length === 0 ? 65537 : e };
}

/** The RSA key of a TPM_PUBKEY; the modulus length must equal keyLength and node:crypto must accept it. */
export function rsaKeyOfPubkey(pub: TPM_PUBKEY): Rsa12Key {
  const { keyLength, exponent } = rsaParms(pub.algorithmParms);
  if (keyLength % 8 !== 0 || pub.pubKey.length !== keyLength / 8) {
    throw new Tpm12KeyError("bad-modulus", `modulus is ${pub.pubKey.length} bytes, keyLength says ${keyLength} bits`);
  }
  if ((pub.pubKey[0] ?? 0) < 0x80) throw new Tpm12KeyError("bad-modulus", `modulus does not have its top bit set (not a ${keyLength}-bit key)`);
  if (exponent < 3 || exponent % 2 === 0) throw new Tpm12KeyError("bad-parms", `public exponent ${exponent}`);
  const spki = rsaSpki(pub.pubKey, exponent);
  let key: KeyObject;
  try {
    key = keyObjectFromCanonical(spki);
  } catch (e) {
    throw new Tpm12KeyError("bad-modulus", (e as Error).message);
  }
  return { bits: keyLength, modulus: pub.pubKey, exponent, spki, key, encScheme: pub.algorithmParms.encScheme, sigScheme: pub.algorithmParms.sigScheme };
}

/** The TPM_PUBKEY part of a TPM_KEY, marshalled (what TPM_ActivateIdentity's idDigest is the SHA-1 of). */
export function pubkeyOfKey(k: TPM_KEY): Uint8Array {
  return encode(TPM_PUBKEY, { algorithmParms: k.algorithmParms, pubKey: k.pubKey });
}

/** idDigest (Part 3 §15.2 step 5): SHA-1 of the identity key's marshalled TPM_PUBKEY. */
export function idDigest(pubkeyBytes: Uint8Array): Uint8Array {
  return digest(TPM_ALG.SHA1, pubkeyBytes);
}

/** The AIK fleetd asks for: TPM_KEY (1.1), identity, always authorized, RSA-2048, RSASSA-PKCS1-v1_5-SHA1, non-migratable. */
export function aikTemplate(): TPM_KEY {
  return {
    head: TPM_STRUCT_VER_1_1,
    keyUsage: TPM12.KEY_IDENTITY,
    keyFlags: 0,
    authDataUsage: TPM12.AUTH_ALWAYS,
    algorithmParms: {
      algorithmID: TPM12.ALG_RSA,
      encScheme: TPM12.ES_NONE,
      sigScheme: TPM12.SS_RSASSAPKCS1v15_SHA1,
      parms: encode(TPM_RSA_KEY_PARMS, { keyLength: 2048, numPrimes: 2, exponent: new Uint8Array(0) }),
    },
    PCRInfo: new Uint8Array(0),
    pubKey: new Uint8Array(0),
    encData: new Uint8Array(0),
  };
}

/** Checks a TPM_KEY the TPM returned as an identity key: version header, usage, scheme, RSA-2048. */
export function checkIdentityKey(k: TPM_KEY): Rsa12Key {
  const head = Buffer.from(k.head);
  if (!head.equals(Buffer.from(TPM_STRUCT_VER_1_1)) && !head.equals(Buffer.from(TPM_KEY12_HEAD))) {
    throw new Tpm12KeyError("bad-version", `key header ${head.toString("hex")} is neither TPM_STRUCT_VER 1.1.0.0 nor a TPM_KEY12 tag`);
  }
  if (k.keyUsage !== TPM12.KEY_IDENTITY) throw new Tpm12KeyError("not-identity", `keyUsage 0x${k.keyUsage.toString(16)} is not TPM_KEY_IDENTITY`);
  return checkAikPubkey({ algorithmParms: k.algorithmParms, pubKey: k.pubKey });
}

/** An AIK public key: RSA-2048 (or larger), signature scheme RSASSA-PKCS1-v1_5-SHA1, no encryption scheme. */
export function checkAikPubkey(pub: TPM_PUBKEY): Rsa12Key {
  const k = rsaKeyOfPubkey(pub);
  if (k.bits < 2048) throw new Tpm12KeyError("bad-modulus", `AIK of ${k.bits} bits (need at least 2048)`);
  if (k.sigScheme !== TPM12.SS_RSASSAPKCS1v15_SHA1) throw new Tpm12KeyError("bad-scheme", `AIK signature scheme 0x${k.sigScheme.toString(16)} is not TPM_SS_RSASSAPKCS1v15_SHA1`);
  if (k.encScheme !== TPM12.ES_NONE) throw new Tpm12KeyError("bad-scheme", `AIK encryption scheme 0x${k.encScheme.toString(16)} is not TPM_ES_NONE`);
  return k;
}

/** An EK public key: RSA-2048 (or larger) with TPM_ES_RSAESOAEP_SHA1_MGF1 (Part 2 §10.1, the EK's only scheme). */
export function checkEkPubkey(pub: TPM_PUBKEY): Rsa12Key {
  const k = rsaKeyOfPubkey(pub);
  if (k.bits < 2048) throw new Tpm12KeyError("bad-modulus", `EK of ${k.bits} bits (need at least 2048)`);
  if (k.encScheme !== TPM12.ES_RSAESOAEP_SHA1_MGF1) throw new Tpm12KeyError("bad-scheme", `EK encryption scheme 0x${k.encScheme.toString(16)} is not TPM_ES_RSAESOAEP_SHA1_MGF1`);
  return k;
}

/** Decodes a marshalled TPM_PUBKEY exactly (no trailing bytes). Throws ParseError. */
export function decodePubkey(bytes: Uint8Array): TPM_PUBKEY {
  return decodeExact(TPM_PUBKEY, bytes);
}
