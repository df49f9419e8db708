/**
 * TPM 2.0 structures, declared once (TPM 2.0 Library Part 2: Structures, section numbers in comments).
 * Decoders and encoders both come from these declarations; see ../codec/codec.ts.
 */
import {
  type Codec,
  type Infer,
  empty,
  fixed,
  list,
  oneOf,
  sized,
  sizedBytes,
  struct,
  u16,
  u32,
  u64,
  u8,
  union,
} from "../codec/codec.js";
import { TPM_ALG, TPM_ST } from "../tcg/constants.js";

const A = TPM_ALG;

// ---- Interface types (Part 2 §9) ----

/** TPMI_ALG_HASH (+NULL where the spec allows "+TPM_ALG_NULL"). SM3/SHA-3 parse; we cannot compute them. */
const HASH_IDS = [A.SHA1, A.SHA256, A.SHA384, A.SHA512, A.SM3_256, A.SHA3_256, A.SHA3_384, A.SHA3_512] as const;
export const TPMI_ALG_HASH = oneOf(u16, "TPMI_ALG_HASH", HASH_IDS);
export const TPMI_ALG_HASH_OR_NULL = oneOf(u16, "TPMI_ALG_HASH", [...HASH_IDS, A.NULL]);
/** TPMI_ALG_PUBLIC (§12.2.2). */
export const TPMI_ALG_PUBLIC = oneOf(u16, "TPMI_ALG_PUBLIC", [A.RSA, A.ECC, A.KEYEDHASH, A.SYMCIPHER]);
/** TPMI_YES_NO (§9.2). */
export const TPMI_YES_NO = oneOf(u8, "TPMI_YES_NO", [0, 1]);
/** TPMI_ST_ATTEST (§9.26). */
export const TPMI_ST_ATTEST = oneOf(u16, "TPMI_ST_ATTEST", [
  TPM_ST.ATTEST_CERTIFY,
  TPM_ST.ATTEST_QUOTE,
  TPM_ST.ATTEST_CREATION,
]);
/** TPMI_ECC_CURVE (§11.2.5.5). */
export const TPMI_ECC_CURVE = oneOf(u16, "TPMI_ECC_CURVE", [0x0001, 0x0002, 0x0003, 0x0004, 0x0005, 0x0010, 0x0011, 0x0020]);

// ---- Sized buffers (§10) ----

/** Largest digest any supported bank produces (SHA-512). */
export const MAX_DIGEST = 64;
export const TPM2B_DIGEST = sizedBytes("TPM2B_DIGEST", MAX_DIGEST);
/** TPM2B_DATA: sizeof(TPMT_HA) = 2 + 64. */
export const TPM2B_DATA = sizedBytes("TPM2B_DATA", 2 + MAX_DIGEST);
/** TPM2B_NAME: a TPMU_NAME (a handle or a TPMT_HA). */
export const TPM2B_NAME = sizedBytes("TPM2B_NAME", 2 + MAX_DIGEST);
export const TPM2B_NONCE = TPM2B_DIGEST;
export const TPM2B_AUTH = TPM2B_DIGEST;
/** TPM2B_PUBLIC_KEY_RSA: up to RSA-4096. */
export const TPM2B_PUBLIC_KEY_RSA = sizedBytes("TPM2B_PUBLIC_KEY_RSA", 512);
/** TPM2B_ECC_PARAMETER: up to P-638 (80 bytes). */
export const TPM2B_ECC_PARAMETER = sizedBytes("TPM2B_ECC_PARAMETER", 80);
export const TPM2B_MAX_NV_BUFFER = sizedBytes("TPM2B_MAX_NV_BUFFER", 2048);
export const TPM2B_PRIVATE = sizedBytes("TPM2B_PRIVATE", 4096);
export const TPM2B_SENSITIVE_DATA = sizedBytes("TPM2B_SENSITIVE_DATA", 256);
/** TPM2B_ENCRYPTED_SECRET (§11.4.33): RSA-OAEP ciphertext or a marshalled TPMS_ECC_POINT. */
export const TPM2B_ENCRYPTED_SECRET = sizedBytes("TPM2B_ENCRYPTED_SECRET", 512);

/** TPMS_ECC_POINT (§11.2.5.2). */
export const TPMS_ECC_POINT = struct("TPMS_ECC_POINT", { x: TPM2B_ECC_PARAMETER, y: TPM2B_ECC_PARAMETER });
export type TPMS_ECC_POINT = Infer<typeof TPMS_ECC_POINT>;

/**
 * TPM2B_ID_OBJECT (§12.4.3): size ‖ TPMS_ID_OBJECT{ integrityHMAC TPM2B_DIGEST, encIdentity } where encIdentity
 * has no size field of its own: it fills the rest of the TPM2B.
 */
export const TPMS_ID_OBJECT = struct("TPMS_ID_OBJECT", {
  integrityHMAC: TPM2B_DIGEST,
  encIdentity: {
    typeName: "TPM2B_DIGEST(encrypted)",
    decode: (r) => {
      if (r.remaining < 2) r.fail("truncated", `encIdentity needs at least 2 bytes, have ${r.remaining}`);
      return r.rest();
    },
    encode: (w, v) => {
      w.bytes(v);
    },
  } satisfies Codec<Uint8Array>,
});
export const TPM2B_ID_OBJECT = sized("TPM2B_ID_OBJECT", TPMS_ID_OBJECT, 2 + MAX_DIGEST + 2 + MAX_DIGEST);
export type TPMS_ID_OBJECT = Infer<typeof TPMS_ID_OBJECT>;

// ---- Algorithm parameters and schemes (§11) ----

/** TPMS_SCHEME_HASH (§11.1.17): the detail of every hash-parameterised scheme. */
export const TPMS_SCHEME_HASH = struct("TPMS_SCHEME_HASH", { hashAlg: TPMI_ALG_HASH });
const hashDetail = TPMS_SCHEME_HASH;

/** TPMT_SYM_DEF_OBJECT (§11.1.7). */
export const TPMT_SYM_DEF_OBJECT = struct("TPMT_SYM_DEF_OBJECT", {
  algorithm: oneOf(u16, "TPMI_ALG_SYM_OBJECT", [A.AES, A.SM4, A.CAMELLIA, A.TDES, A.NULL]),
  details: union("TPMU_SYM_DEF_OBJECT", "algorithm", {
    [A.AES]: ["aes", struct("AES", { keyBits: oneOf(u16, "TPMI_AES_KEY_BITS", [128, 192, 256]), mode: oneOf(u16, "TPMI_ALG_SYM_MODE", [A.CTR, A.OFB, A.CBC, A.CFB, A.ECB, A.NULL]) })],
    [A.SM4]: ["sm4", struct("SM4", { keyBits: oneOf(u16, "TPMI_SM4_KEY_BITS", [128]), mode: oneOf(u16, "TPMI_ALG_SYM_MODE", [A.CTR, A.OFB, A.CBC, A.CFB, A.ECB, A.NULL]) })],
    [A.CAMELLIA]: ["camellia", struct("CAMELLIA", { keyBits: oneOf(u16, "TPMI_CAMELLIA_KEY_BITS", [128, 192, 256]), mode: oneOf(u16, "TPMI_ALG_SYM_MODE", [A.CTR, A.OFB, A.CBC, A.CFB, A.ECB, A.NULL]) })],
    [A.TDES]: ["tdes", struct("TDES", { keyBits: oneOf(u16, "TPMI_TDES_KEY_BITS", [128, 192]), mode: oneOf(u16, "TPMI_ALG_SYM_MODE", [A.CTR, A.OFB, A.CBC, A.CFB, A.ECB, A.NULL]) })],
    [A.NULL]: ["null", empty],
  } as const),
});
export type TPMT_SYM_DEF_OBJECT = Infer<typeof TPMT_SYM_DEF_OBJECT>;

/** TPMT_RSA_SCHEME (§11.2.4.2): signing, encryption or NULL. RSAES has no hash. */
export const TPMT_RSA_SCHEME = struct("TPMT_RSA_SCHEME", {
  scheme: oneOf(u16, "TPMI_ALG_RSA_SCHEME", [A.RSASSA, A.RSAPSS, A.RSAES, A.OAEP, A.NULL]),
  details: union("TPMU_ASYM_SCHEME", "scheme", {
    [A.RSASSA]: ["rsassa", hashDetail],
    [A.RSAPSS]: ["rsapss", hashDetail],
    [A.OAEP]: ["oaep", hashDetail],
    [A.RSAES]: ["rsaes", empty],
    [A.NULL]: ["null", empty],
  } as const),
});

/** TPMT_KDF_SCHEME (§11.2.3.3). */
export const TPMT_KDF_SCHEME = struct("TPMT_KDF_SCHEME", {
  scheme: oneOf(u16, "TPMI_ALG_KDF", [A.MGF1, A.KDF1_SP800_56A, A.KDF2, A.KDF1_SP800_108, A.NULL]),
  details: union("TPMU_KDF_SCHEME", "scheme", {
    [A.MGF1]: ["mgf1", hashDetail],
    [A.KDF1_SP800_56A]: ["kdf1_sp800_56a", hashDetail],
    [A.KDF2]: ["kdf2", hashDetail],
    [A.KDF1_SP800_108]: ["kdf1_sp800_108", hashDetail],
    [A.NULL]: ["null", empty],
  } as const),
});

/** TPMT_ECC_SCHEME (§11.2.5.6). */
export const TPMT_ECC_SCHEME = struct("TPMT_ECC_SCHEME", {
  scheme: oneOf(u16, "TPMI_ALG_ECC_SCHEME", [A.ECDSA, A.ECDH, A.ECDAA, A.SM2, A.ECSCHNORR, A.ECMQV, A.NULL]),
  details: union("TPMU_ASYM_SCHEME", "scheme", {
    [A.ECDSA]: ["ecdsa", hashDetail],
    [A.ECDH]: ["ecdh", hashDetail],
    [A.ECDAA]: ["ecdaa", struct("TPMS_SCHEME_ECDAA", { hashAlg: TPMI_ALG_HASH, count: u16 })],
    [A.SM2]: ["sm2", hashDetail],
    [A.ECSCHNORR]: ["ecschnorr", hashDetail],
    [A.ECMQV]: ["ecmqv", hashDetail],
    [A.NULL]: ["null", empty],
  } as const),
});

/** TPMT_KEYEDHASH_SCHEME (§11.1.23). */
export const TPMT_KEYEDHASH_SCHEME = struct("TPMT_KEYEDHASH_SCHEME", {
  scheme: oneOf(u16, "TPMI_ALG_KEYEDHASH_SCHEME", [A.HMAC, A.XOR, A.NULL]),
  details: union("TPMU_SCHEME_KEYEDHASH", "scheme", {
    [A.HMAC]: ["hmac", hashDetail],
    [A.XOR]: ["xor", struct("TPMS_SCHEME_XOR", { hashAlg: TPMI_ALG_HASH, kdf: oneOf(u16, "TPMI_ALG_KDF", [A.MGF1, A.KDF1_SP800_56A, A.KDF2, A.KDF1_SP800_108]) })],
    [A.NULL]: ["null", empty],
  } as const),
});

/** TPMS_RSA_PARMS (§12.2.3.5). exponent 0 means 65537. */
export const TPMS_RSA_PARMS = struct("TPMS_RSA_PARMS", {
  symmetric: TPMT_SYM_DEF_OBJECT,
  scheme: TPMT_RSA_SCHEME,
  keyBits: oneOf(u16, "TPMI_RSA_KEY_BITS", [1024, 2048, 3072, 4096]),
  exponent: u32,
});
/** TPMS_ECC_PARMS (§12.2.3.6). */
export const TPMS_ECC_PARMS = struct("TPMS_ECC_PARMS", {
  symmetric: TPMT_SYM_DEF_OBJECT,
  scheme: TPMT_ECC_SCHEME,
  curveID: TPMI_ECC_CURVE,
  kdf: TPMT_KDF_SCHEME,
});

/** TPMT_PUBLIC (§12.2.4). */
export const TPMT_PUBLIC = struct("TPMT_PUBLIC", {
  type: TPMI_ALG_PUBLIC,
  nameAlg: TPMI_ALG_HASH_OR_NULL,
  objectAttributes: u32,
  authPolicy: TPM2B_DIGEST,
  parameters: union("TPMU_PUBLIC_PARMS", "type", {
    [A.RSA]: ["rsa", TPMS_RSA_PARMS],
    [A.ECC]: ["ecc", TPMS_ECC_PARMS],
    [A.KEYEDHASH]: ["keyedhash", struct("TPMS_KEYEDHASH_PARMS", { scheme: TPMT_KEYEDHASH_SCHEME })],
    [A.SYMCIPHER]: ["symcipher", struct("TPMS_SYMCIPHER_PARMS", { sym: TPMT_SYM_DEF_OBJECT })],
  } as const),
  unique: union("TPMU_PUBLIC_ID", "type", {
    [A.RSA]: ["rsa", struct("TPM2B_PUBLIC_KEY_RSA", { n: TPM2B_PUBLIC_KEY_RSA })],
    [A.ECC]: ["ecc", TPMS_ECC_POINT],
    [A.KEYEDHASH]: ["keyedhash", struct("TPM2B_DIGEST", { digest: TPM2B_DIGEST })],
    [A.SYMCIPHER]: ["symcipher", struct("TPM2B_DIGEST", { digest: TPM2B_DIGEST })],
  } as const),
});
export type TPMT_PUBLIC = Infer<typeof TPMT_PUBLIC>;
/** TPM2B_PUBLIC (§12.2.5). */
export const TPM2B_PUBLIC = sized("TPM2B_PUBLIC", TPMT_PUBLIC);

// ---- PCR selection (§10.6, §10.9.7) ----

/** PCR_SELECT_MAX: we accept bitmaps up to 8 bytes (64 PCRs); real TPMs use 3. */
export const TPMS_PCR_SELECTION = struct("TPMS_PCR_SELECTION", {
  hash: TPMI_ALG_HASH,
  pcrSelect: sizedU8Bytes("TPMS_PCR_SELECT", 8),
});
export type TPMS_PCR_SELECTION = Infer<typeof TPMS_PCR_SELECTION>;
/** TPML_PCR_SELECTION: at most HASH_COUNT entries. */
export const TPML_PCR_SELECTION = list("TPML_PCR_SELECTION", u32, TPMS_PCR_SELECTION, 16);
export type TPML_PCR_SELECTION = Infer<typeof TPML_PCR_SELECTION>;
/** TPML_DIGEST (§10.9.3): at most 8 digests (the PCR_Read response). */
export const TPML_DIGEST = list("TPML_DIGEST", u32, TPM2B_DIGEST, 8);

function sizedU8Bytes(typeName: string, max: number): Codec<Uint8Array> {
  return {
    typeName,
    decode: (r) => {
      const at = r.offset;
      const n = r.field("sizeofSelect", () => r.u8());
      if (n > max) r.fail("oversized", `${typeName} sizeofSelect ${n} exceeds maximum ${max}`, at);
      return r.field("pcrSelect", () => r.bytes(n));
    },
    encode: (w, v) => {
      if (v.length > max) w.fail(`${typeName} sizeofSelect ${v.length} exceeds maximum ${max}`);
      w.u8(v.length).bytes(v);
    },
  };
}

// ---- Attestation (§10.12) ----

/** TPMS_CLOCK_INFO (§10.11.1). */
export const TPMS_CLOCK_INFO = struct("TPMS_CLOCK_INFO", {
  clock: u64,
  resetCount: u32,
  restartCount: u32,
  safe: TPMI_YES_NO,
});

/** TPMS_ATTEST (§10.12.12) with the members fleetd verifies: quote, certify, creation. */
export const TPMS_ATTEST = struct("TPMS_ATTEST", {
  magic: u32,
  type: TPMI_ST_ATTEST,
  qualifiedSigner: TPM2B_NAME,
  extraData: TPM2B_DATA,
  clockInfo: TPMS_CLOCK_INFO,
  firmwareVersion: u64,
  attested: union("TPMU_ATTEST", "type", {
    [TPM_ST.ATTEST_QUOTE]: ["quote", struct("TPMS_QUOTE_INFO", { pcrSelect: TPML_PCR_SELECTION, pcrDigest: TPM2B_DIGEST })],
    [TPM_ST.ATTEST_CERTIFY]: ["certify", struct("TPMS_CERTIFY_INFO", { name: TPM2B_NAME, qualifiedName: TPM2B_NAME })],
    [TPM_ST.ATTEST_CREATION]: ["creation", struct("TPMS_CREATION_INFO", { objectName: TPM2B_NAME, creationHash: TPM2B_DIGEST })],
  } as const),
});
export type TPMS_ATTEST = Infer<typeof TPMS_ATTEST>;
/** TPM2B_ATTEST (§10.12.13). */
export const TPM2B_ATTEST = sized("TPM2B_ATTEST", TPMS_ATTEST, 1024);

// ---- Signatures (§11.3) ----

const rsaSig = struct("TPMS_SIGNATURE_RSA", { hash: TPMI_ALG_HASH, sig: TPM2B_PUBLIC_KEY_RSA });
const eccSig = struct("TPMS_SIGNATURE_ECC", { hash: TPMI_ALG_HASH, signatureR: TPM2B_ECC_PARAMETER, signatureS: TPM2B_ECC_PARAMETER });

/** TPMT_SIGNATURE (§11.3.4) for RSASSA, RSAPSS and ECDSA. */
export const TPMT_SIGNATURE = struct("TPMT_SIGNATURE", {
  sigAlg: oneOf(u16, "TPMI_ALG_SIG_SCHEME", [A.RSASSA, A.RSAPSS, A.ECDSA]),
  signature: union("TPMU_SIGNATURE", "sigAlg", {
    [A.RSASSA]: ["rsassa", rsaSig],
    [A.RSAPSS]: ["rsapss", rsaSig],
    [A.ECDSA]: ["ecdsa", eccSig],
  } as const),
});
export type TPMT_SIGNATURE = Infer<typeof TPMT_SIGNATURE>;

/** TPMT_HA (§10.3.2). */
export const TPMT_HA = struct("TPMT_HA", {
  hashAlg: TPMI_ALG_HASH,
  digest: {
    typeName: "TPMU_HA",
    decode: (r, ctx) => {
      const alg = ctx?.["hashAlg"] as number;
      const size = { 0x4: 20, 0xb: 32, 0xc: 48, 0xd: 64, 0x12: 32, 0x27: 32, 0x28: 48, 0x29: 64 }[alg] ?? 0;
      return fixed(size).decode(r);
    },
    encode: (w, v) => {
      w.bytes(v);
    },
  } satisfies Codec<Uint8Array>,
});

/** TPMS_CREATION_DATA (§15.1), for AK creation attestations. */
export const TPMS_CREATION_DATA = struct("TPMS_CREATION_DATA", {
  pcrSelect: TPML_PCR_SELECTION,
  pcrDigest: TPM2B_DIGEST,
  locality: u8,
  parentNameAlg: u16,
  parentName: TPM2B_NAME,
  parentQualifiedName: TPM2B_NAME,
  outsideInfo: TPM2B_DATA,
});
