/**
 * TPM 1.2 structures fleetd reads and writes, declared once with the shared codec (TCG TPM Main Specification
 * 1.2 rev 116, Part 2: Structures; section numbers in comments). Everything is big-endian. A TPM 1.2 machine
 * never gets an LDevID, LAK, install code or Talos config from fleetd (the trust decision: talos-config-server/README.md,
 * "TPM 1.2 machines"): these structures serve its identity proof only — AIK creation, the privacy-CA credential, quotes.
 */
import { type Captured, type Codec, captured, fixed, sizedBytes, sizedBytes32, struct, u16, u32, u8 } from "../codec/codec.js";

/** TPM_STRUCT_VER (§5.1): 1.1.0.0 in every structure fleetd handles that carries one. */
export const TPM_STRUCT_VER_1_1 = Uint8Array.of(1, 1, 0, 0);
/** First four bytes of a TPM_KEY12 (§10.3): tag TPM_TAG_KEY12 (0x0028), fill 0. */
export const TPM_KEY12_HEAD = Uint8Array.of(0x00, 0x28, 0x00, 0x00);

/** Algorithm, scheme, usage and other constants (§4, §5.8, §5.9, §10.1). */
export const TPM12 = {
  ALG_RSA: 0x00000001,
  ALG_AES128: 0x00000006,
  ALG_AES256: 0x00000008,
  ES_NONE: 0x0001,
  ES_RSAESPKCSv15: 0x0002,
  ES_RSAESOAEP_SHA1_MGF1: 0x0003,
  ES_SYM_CBC_PKCS5PAD: 0x00ff,
  SS_NONE: 0x0001,
  SS_RSASSAPKCS1v15_SHA1: 0x0002,
  KEY_IDENTITY: 0x0012,
  AUTH_NEVER: 0x00,
  AUTH_ALWAYS: 0x01,
  /** Key handles (§5.14). */
  KH_SRK: 0x40000000,
  KH_OWNER: 0x40000001,
  KH_EK: 0x40000006,
  /** Entity types for TPM_OSAP (§4.2). */
  ET_KEYHANDLE: 0x0001,
  ET_OWNER: 0x0002,
  ET_SRK: 0x0004,
  /** Resource types for TPM_FlushSpecific (§4.1). */
  RT_KEY: 0x00000001,
  RT_AUTH: 0x00000002,
  /** TPM_STARTUP_TYPE (§4.5). */
  ST_CLEAR: 0x0001,
  ST_STATE: 0x0002,
  /** Capability areas (§21.1). */
  CAP_PROPERTY: 0x00000005,
  CAP_VERSION_VAL: 0x0000001a,
  CAP_PROP_OWNER: 0x00000111,
  /** TPM_NV_INDEX_EKCert (§19.1.2). */
  NV_INDEX_EKCert: 0x1000f000,
  /** PC Client TPM 1.2 Credential Profile: TCG_PCCLIENT_STORED_CERT and TCG_FULL_CERT tags. */
  TAG_PCCLIENT_STORED_CERT: 0x1001,
  TAG_PCCLIENT_FULL_CERT: 0x1002,
  /** TPM_TAG_CAP_VERSION_INFO (§21.6). */
  TAG_CAP_VERSION_INFO: 0x0030,
} as const;

/** Largest RSA modulus fleetd accepts in a TPM 1.2 key (TPM 1.2 keys are at most 2048 bits in practice). */
const MAX_MODULUS = 512;

/** TPM_KEY_PARMS (§10.1): algorithm, schemes, and the algorithm's parameters (TPM_RSA_KEY_PARMS for RSA). */
export const TPM_KEY_PARMS = struct("TPM_KEY_PARMS", {
  algorithmID: u32,
  encScheme: u16,
  sigScheme: u16,
  parms: sizedBytes32("TPM_KEY_PARMS.parms", 64),
});
export type TPM_KEY_PARMS = ReturnType<typeof TPM_KEY_PARMS.decode>;

/** TPM_RSA_KEY_PARMS (§10.1.1): an empty exponent means 65537. */
export const TPM_RSA_KEY_PARMS = struct("TPM_RSA_KEY_PARMS", {
  keyLength: u32,
  numPrimes: u32,
  exponent: sizedBytes32("TPM_RSA_KEY_PARMS.exponent", 8),
});
export type TPM_RSA_KEY_PARMS = ReturnType<typeof TPM_RSA_KEY_PARMS.decode>;

/** TPM_STORE_PUBKEY (§10.4): the RSA modulus. */
export const TPM_STORE_PUBKEY = sizedBytes32("TPM_STORE_PUBKEY", MAX_MODULUS);

/** TPM_PUBKEY (§10.5): what idDigest (SHA-1 of these bytes) and the EK binding are computed from. */
export const TPM_PUBKEY = struct("TPM_PUBKEY", {
  algorithmParms: TPM_KEY_PARMS,
  pubKey: TPM_STORE_PUBKEY,
});
export type TPM_PUBKEY = ReturnType<typeof TPM_PUBKEY.decode>;

/**
 * TPM_KEY (§10.2, `ver` = 1.1.0.0) and TPM_KEY12 (§10.3, tag 0x0028 + fill) share their layout after the first
 * four bytes, so one declaration reads both; `head` says which (checked by tpm12/keys.ts).
 */
export const TPM_KEY = struct("TPM_KEY", {
  head: fixed(4, "TPM_STRUCT_VER|TPM_KEY12 tag"),
  keyUsage: u16,
  keyFlags: u32,
  authDataUsage: u8,
  algorithmParms: TPM_KEY_PARMS,
  PCRInfo: sizedBytes32("TPM_KEY.PCRInfo", 256),
  pubKey: TPM_STORE_PUBKEY,
  encData: sizedBytes32("TPM_KEY.encData", 1024),
});
export type TPM_KEY = ReturnType<typeof TPM_KEY.decode>;

/** TPM_SYMMETRIC_KEY (§11.2): the session key a privacy CA sends; its `data` is fleetd's credential secret. */
export const TPM_SYMMETRIC_KEY = struct("TPM_SYMMETRIC_KEY", {
  algId: u32,
  encScheme: u16,
  data: sizedBytes("TPM_SYMMETRIC_KEY.data", 64),
});
export type TPM_SYMMETRIC_KEY = ReturnType<typeof TPM_SYMMETRIC_KEY.decode>;

/** TPM_ASYM_CA_CONTENTS (§15.4): encrypted to the EK; TPM_ActivateIdentity releases sessionKey if idDigest matches. */
export const TPM_ASYM_CA_CONTENTS = struct("TPM_ASYM_CA_CONTENTS", {
  sessionKey: TPM_SYMMETRIC_KEY,
  idDigest: fixed(20, "TPM_DIGEST"),
});
export type TPM_ASYM_CA_CONTENTS = ReturnType<typeof TPM_ASYM_CA_CONTENTS.decode>;

/** TPM_PCR_SELECTION (§8.1): a bitmap, PCR i is bit (i mod 8) of byte i/8. */
export const TPM_PCR_SELECTION = sizedBytes("TPM_PCR_SELECTION", 4);

/** TPM_PCR_COMPOSITE (§8.2): the selection and the selected PCRs' values, in index order, 20 bytes each. */
export const TPM_PCR_COMPOSITE = struct("TPM_PCR_COMPOSITE", {
  select: TPM_PCR_SELECTION,
  pcrValue: sizedBytes32("TPM_PCR_COMPOSITE.pcrValue", 32 * 20),
});
export type TPM_PCR_COMPOSITE = ReturnType<typeof TPM_PCR_COMPOSITE.decode>;

/** TPM_QUOTE_INFO (§11.3): what TPM_Quote signs (SHA-1, RSASSA-PKCS1-v1_5). */
export const TPM_QUOTE_INFO = struct("TPM_QUOTE_INFO", {
  version: fixed(4, "TPM_STRUCT_VER"),
  fixed: fixed(4, "BYTE[4]"),
  digestValue: fixed(20, "TPM_COMPOSITE_HASH"),
  externalData: fixed(20, "TPM_NONCE"),
});
export type TPM_QUOTE_INFO = ReturnType<typeof TPM_QUOTE_INFO.decode>;

/** TPM_IDENTITY_CONTENTS (§12.5): what TPM_MakeIdentity signs with the new AIK (the identityBinding). */
export const TPM_IDENTITY_CONTENTS = struct("TPM_IDENTITY_CONTENTS", {
  ver: fixed(4, "TPM_STRUCT_VER"),
  ordinal: u32,
  labelPrivCADigest: fixed(20, "TPM_CHOSENID_HASH"),
  identityPubKey: TPM_PUBKEY,
});
export type TPM_IDENTITY_CONTENTS = ReturnType<typeof TPM_IDENTITY_CONTENTS.decode>;

/** TPM_CAP_VERSION_INFO (§21.6): the answer to GetCapability(TPM_CAP_VERSION_VAL). */
export const TPM_CAP_VERSION_INFO = struct("TPM_CAP_VERSION_INFO", {
  tag: u16,
  version: fixed(4, "TPM_VERSION"),
  specLevel: u16,
  errataRev: u8,
  tpmVendorID: fixed(4, "BYTE[4]"),
  vendorSpecific: sizedBytes("TPM_CAP_VERSION_INFO.vendorSpecific", 256),
});
export type TPM_CAP_VERSION_INFO = ReturnType<typeof TPM_CAP_VERSION_INFO.decode>;

/**
 * TCG_PCCLIENT_STORED_CERT holding a TCG_FULL_CERT (PC Client TPM 1.2 Credential Profile §4.3.3): the EK
 * certificate in NV index TPM_NV_INDEX_EKCert. certSize counts the full-cert tag and the DER certificate.
 */
export const TCG_PCCLIENT_STORED_CERT = struct("TCG_PCCLIENT_STORED_CERT", {
  tag: u16,
  certType: u8,
  certSize: u16,
});

/** A TPM_PUBKEY with its exact bytes (idDigest and the AIK's identity are computed over what the TPM sent). */
export const TPM_PUBKEY_CAPTURED: Codec<Captured<TPM_PUBKEY>> = captured(TPM_PUBKEY);
/** A TPM_KEY with its exact bytes (the blob LoadKey2 takes back). */
export const TPM_KEY_CAPTURED: Codec<Captured<TPM_KEY>> = captured(TPM_KEY);
