/**
 * TPM 2.0 constants (TPM 2.0 Library Part 2: Structures). Names follow the spec so they can be searched.
 */

/** TPM_ALG_ID (Part 2 §6.3). */
export const TPM_ALG = {
  ERROR: 0x0000,
  RSA: 0x0001,
  TDES: 0x0003,
  SHA1: 0x0004,
  HMAC: 0x0005,
  AES: 0x0006,
  MGF1: 0x0007,
  KEYEDHASH: 0x0008,
  XOR: 0x000a,
  SHA256: 0x000b,
  SHA384: 0x000c,
  SHA512: 0x000d,
  NULL: 0x0010,
  SM3_256: 0x0012,
  SM4: 0x0013,
  RSASSA: 0x0014,
  RSAES: 0x0015,
  RSAPSS: 0x0016,
  OAEP: 0x0017,
  ECDSA: 0x0018,
  ECDH: 0x0019,
  ECDAA: 0x001a,
  SM2: 0x001b,
  ECSCHNORR: 0x001c,
  ECMQV: 0x001d,
  KDF1_SP800_56A: 0x0020,
  KDF2: 0x0021,
  KDF1_SP800_108: 0x0022,
  ECC: 0x0023,
  SYMCIPHER: 0x0025,
  CAMELLIA: 0x0026,
  SHA3_256: 0x0027,
  SHA3_384: 0x0028,
  SHA3_512: 0x0029,
  CTR: 0x0040,
  OFB: 0x0041,
  CBC: 0x0042,
  CFB: 0x0043,
  ECB: 0x0044,
} as const;
export type TpmAlgName = keyof typeof TPM_ALG;

const ALG_NAMES = new Map<number, string>(Object.entries(TPM_ALG).map(([k, v]) => [v, k]));
export function algName(id: number): string {
  return ALG_NAMES.get(id) ?? `0x${id.toString(16).padStart(4, "0")}`;
}

/** Hash algorithms we can compute, with node:crypto names and digest sizes. */
export const HASHES = {
  [TPM_ALG.SHA1]: { name: "sha1", size: 20, bank: "sha1" },
  [TPM_ALG.SHA256]: { name: "sha256", size: 32, bank: "sha256" },
  [TPM_ALG.SHA384]: { name: "sha384", size: 48, bank: "sha384" },
  [TPM_ALG.SHA512]: { name: "sha512", size: 64, bank: "sha512" },
} as const satisfies Record<number, { name: string; size: number; bank: string }>;
export type HashAlgId = keyof typeof HASHES;
export function isHashAlg(id: number): id is HashAlgId {
  return Object.prototype.hasOwnProperty.call(HASHES, id);
}
/** Digest sizes for every hash a TPM may report, including ones we cannot compute (SM3, SHA-3). */
export const DIGEST_SIZES: Record<number, number> = {
  [TPM_ALG.SHA1]: 20,
  [TPM_ALG.SHA256]: 32,
  [TPM_ALG.SHA384]: 48,
  [TPM_ALG.SHA512]: 64,
  [TPM_ALG.SM3_256]: 32,
  [TPM_ALG.SHA3_256]: 32,
  [TPM_ALG.SHA3_384]: 48,
  [TPM_ALG.SHA3_512]: 64,
};

/** TPM_ECC_CURVE (Part 2 §6.4). */
export const TPM_ECC = {
  NONE: 0x0000,
  NIST_P192: 0x0001,
  NIST_P224: 0x0002,
  NIST_P256: 0x0003,
  NIST_P384: 0x0004,
  NIST_P521: 0x0005,
  BN_P256: 0x0010,
  BN_P638: 0x0011,
  SM2_P256: 0x0020,
} as const;

/** Curves we can compute with node:crypto: names, OIDs and coordinate sizes. */
export const CURVES = {
  [TPM_ECC.NIST_P256]: { name: "P-256", nodeName: "prime256v1", oid: "1.2.840.10045.3.1.7", size: 32 },
  [TPM_ECC.NIST_P384]: { name: "P-384", nodeName: "secp384r1", oid: "1.3.132.0.34", size: 48 },
  [TPM_ECC.NIST_P521]: { name: "P-521", nodeName: "secp521r1", oid: "1.3.132.0.35", size: 66 },
} as const satisfies Record<number, { name: string; nodeName: string; oid: string; size: number }>;
export type CurveId = keyof typeof CURVES;
export function isCurve(id: number): id is CurveId {
  return Object.prototype.hasOwnProperty.call(CURVES, id);
}

/** TPM_ST (Part 2 §6.9): structure tags used in TPMS_ATTEST and command headers. */
export const TPM_ST = {
  RSP_COMMAND: 0x00c4,
  NULL: 0x8000,
  NO_SESSIONS: 0x8001,
  SESSIONS: 0x8002,
  ATTEST_NV: 0x8014,
  ATTEST_COMMAND_AUDIT: 0x8015,
  ATTEST_SESSION_AUDIT: 0x8016,
  ATTEST_CERTIFY: 0x8017,
  ATTEST_QUOTE: 0x8018,
  ATTEST_TIME: 0x8019,
  ATTEST_CREATION: 0x801a,
  ATTEST_NV_DIGEST: 0x801c,
  CREATION: 0x8021,
  VERIFIED: 0x8022,
  AUTH_SECRET: 0x8023,
  HASHCHECK: 0x8024,
  AUTH_SIGNED: 0x8025,
} as const;

/** TPM_GENERATED_VALUE: "\xffTCG", the magic that only a TPM writes into structures it signs. */
export const TPM_GENERATED_VALUE = 0xff544347;

/** TPMA_OBJECT bits (Part 2 §8.3). */
export const TPMA_OBJECT = {
  fixedTPM: 1 << 1,
  stClear: 1 << 2,
  fixedParent: 1 << 4,
  sensitiveDataOrigin: 1 << 5,
  userWithAuth: 1 << 6,
  adminWithPolicy: 1 << 7,
  noDA: 1 << 10,
  encryptedDuplication: 1 << 11,
  restricted: 1 << 16,
  decrypt: 1 << 17,
  sign: 1 << 18,
  x509sign: 1 << 19,
} as const;
export type ObjectAttributeName = keyof typeof TPMA_OBJECT;
/** Bits the spec reserves; a public area with one of them set is malformed. */
export const TPMA_OBJECT_RESERVED = ~Object.values(TPMA_OBJECT).reduce((a, b) => a | b, 0) >>> 0;

export function objectAttributeNames(attrs: number): ObjectAttributeName[] {
  return (Object.entries(TPMA_OBJECT) as [ObjectAttributeName, number][])
    .filter(([, bit]) => (attrs & bit) !== 0)
    .map(([name]) => name);
}

export function objectAttributes(...names: ObjectAttributeName[]): number {
  return names.reduce((a, n) => (a | TPMA_OBJECT[n]) >>> 0, 0);
}

/** Permanent handles (Part 2 §7.4) and conventional NV indices for EK certificates. */
export const TPM_RH = {
  OWNER: 0x40000001,
  NULL: 0x40000007,
  PW: 0x40000009,
  LOCKOUT: 0x4000000a,
  ENDORSEMENT: 0x4000000b,
  PLATFORM: 0x4000000c,
} as const;

export const EK_NV = {
  RSA2048_CERT: 0x01c00002,
  RSA2048_NONCE: 0x01c00003,
  RSA2048_TEMPLATE: 0x01c00004,
  ECC_P256_CERT: 0x01c0000a,
  ECC_P256_NONCE: 0x01c0000b,
  ECC_P256_TEMPLATE: 0x01c0000c,
  // High range (TCG EK Credential Profile 2.3+): H-1..H-7
  RSA2048_H_CERT: 0x01c00012,
  ECC_P256_H_CERT: 0x01c00014,
  ECC_P384_H_CERT: 0x01c00016,
  ECC_P521_H_CERT: 0x01c00018,
  ECC_SM2_H_CERT: 0x01c0001a,
  RSA3072_H_CERT: 0x01c0001c,
  RSA4096_H_CERT: 0x01c0001e,
} as const;
