/**
 * TPM 2.0 commands fleetd's client sends, declared once (TPM 2.0 Library Part 3: Commands, section numbers in
 * comments), with the command-specific structures they need (Part 2). Each command is a declaration: its code,
 * the handles in its handle area (the first `authHandles` of them need an authorization session), its parameter
 * structure, its response handles and its response parameter structure. The client (../tpmclient/command.ts)
 * marshals and parses every command from these declarations; nothing is hand-parsed.
 */
import {
  type Captured,
  type Codec,
  type Infer,
  captured,
  empty,
  list,
  oneOf,
  sized,
  sizedBytes,
  struct,
  u16,
  u32,
  u8,
  union,
} from "../codec/codec.js";
import { TPM_ALG } from "../tcg/constants.js";
import {
  TPM2B_AUTH,
  TPM2B_DATA,
  TPM2B_DIGEST,
  TPM2B_ENCRYPTED_SECRET,
  TPM2B_ID_OBJECT,
  TPM2B_MAX_NV_BUFFER,
  TPM2B_NAME,
  TPM2B_NONCE,
  TPM2B_PRIVATE,
  TPM2B_SENSITIVE_DATA,
  TPMI_ALG_HASH,
  TPMI_YES_NO,
  TPML_DIGEST,
  TPML_PCR_SELECTION,
  TPMS_ATTEST,
  TPMS_CREATION_DATA,
  TPMS_SCHEME_HASH,
  TPMT_HA,
  TPMT_PUBLIC,
  TPMT_SIGNATURE,
} from "./structures.js";

const A = TPM_ALG;

/** TPM_CC (Part 2 §6.5.2): the command codes fleetd uses. */
export const TPM_CC = {
  NV_Read: 0x0000014e,
  PolicySecret: 0x00000151,
  Create: 0x00000153,
  Load: 0x00000157,
  Quote: 0x00000158,
  Sign: 0x0000015d,
  FlushContext: 0x00000165,
  LoadExternal: 0x00000167,
  NV_ReadPublic: 0x00000169,
  ActivateCredential: 0x00000147,
  Certify: 0x00000148,
  ContextLoad: 0x00000161,
  ReadPublic: 0x00000173,
  StartAuthSession: 0x00000176,
  GetCapability: 0x0000017a,
  PCR_Read: 0x0000017e,
  PCR_Extend: 0x00000182,
  CreateLoaded: 0x00000191,
  CreatePrimary: 0x00000131,
  Startup: 0x00000144,
  Clear: 0x00000126,
} as const;

/** TPM_SE (Part 2 §6.11): session types. */
export const TPM_SE = { HMAC: 0x00, POLICY: 0x01, TRIAL: 0x03 } as const;

/** TPMA_SESSION (Part 2 §8.4) bits. */
export const TPMA_SESSION = {
  continueSession: 0x01,
  auditExclusive: 0x02,
  auditReset: 0x04,
  decrypt: 0x20,
  encrypt: 0x40,
  audit: 0x80,
} as const;

/** TPM_CAP (Part 2 §6.12). */
export const TPM_CAP = {
  ALGS: 0x00000000,
  HANDLES: 0x00000001,
  COMMANDS: 0x00000002,
  PCRS: 0x00000005,
  TPM_PROPERTIES: 0x00000006,
  ECC_CURVES: 0x00000008,
} as const;

/** TPM_PT (Part 2 §6.13): the properties fleetd reads. */
export const TPM_PT = {
  FIXED: 0x100,
  FAMILY_INDICATOR: 0x100,
  MANUFACTURER: 0x105,
  VENDOR_STRING_1: 0x106,
  FIRMWARE_VERSION_1: 0x10b,
  INPUT_BUFFER: 0x10d,
  HR_TRANSIENT_MIN: 0x10e,
  MAX_COMMAND_SIZE: 0x11e,
  MAX_RESPONSE_SIZE: 0x11f,
  MAX_DIGEST: 0x120,
  NV_BUFFER_MAX: 0x12c,
  /** TPMA_PERMANENT (Part 2 §8.6), the first of the variable properties. */
  PERMANENT: 0x200,
} as const;

/** TPMA_PERMANENT (Part 2 §8.6) bits fleetd reads before TPM2_Clear. */
export const TPMA_PERMANENT = {
  ownerAuthSet: 1 << 0,
  endorsementAuthSet: 1 << 1,
  lockoutAuthSet: 1 << 2,
  disableClear: 1 << 8,
  inLockout: 1 << 9,
  tpmGeneratedEPS: 1 << 10,
} as const;

/** TPM_HT (Part 2 §7.2): the first octet of a handle. */
export const TPM_HT = {
  PCR: 0x00,
  NV_INDEX: 0x01,
  HMAC_SESSION: 0x02,
  POLICY_SESSION: 0x03,
  PERMANENT: 0x40,
  TRANSIENT: 0x80,
  PERSISTENT: 0x81,
} as const;

/** TPMA_NV (Part 2 §13.4) bits fleetd reads. */
export const TPMA_NV = {
  PPWRITE: 1 << 0,
  OWNERWRITE: 1 << 1,
  AUTHWRITE: 1 << 2,
  POLICYWRITE: 1 << 3,
  POLICY_DELETE: 1 << 10,
  WRITELOCKED: 1 << 11,
  WRITEALL: 1 << 12,
  WRITEDEFINE: 1 << 13,
  WRITE_STCLEAR: 1 << 14,
  GLOBALLOCK: 1 << 15,
  PPREAD: 1 << 16,
  OWNERREAD: 1 << 17,
  AUTHREAD: 1 << 18,
  POLICYREAD: 1 << 19,
  NO_DA: 1 << 25,
  ORDERLY: 1 << 26,
  CLEAR_STCLEAR: 1 << 27,
  READLOCKED: 1 << 28,
  WRITTEN: 1 << 29,
  PLATFORMCREATE: 1 << 30,
  READ_STCLEAR: 2 ** 31,
} as const;

// ---- Command and response framing (Part 1 §18, Part 2 §6.9 / §10.13) ----

const TPMI_ST_COMMAND_TAG = oneOf(u16, "TPMI_ST_COMMAND_TAG", [0x8001, 0x8002]);
/** The command header: tag, commandSize, commandCode (Part 1 §18.2). */
export const TPM_COMMAND_HEADER = struct("TPM_COMMAND_HEADER", { tag: TPMI_ST_COMMAND_TAG, commandSize: u32, commandCode: u32 });
/**
 * The response header: tag, responseSize, responseCode. The tag is not restricted here: a TPM answers a bad
 * command tag with the TPM 1.2 tag 0x00C4 and TPM_RC_BAD_TAG, which the client must still read.
 */
export const TPM_RESPONSE_HEADER = struct("TPM_RESPONSE_HEADER", { tag: u16, responseSize: u32, responseCode: u32 });
export const TPM_HEADER_SIZE = 10;

/** TPMS_AUTH_COMMAND (§10.13.2). */
export const TPMS_AUTH_COMMAND = struct("TPMS_AUTH_COMMAND", {
  sessionHandle: u32,
  nonce: TPM2B_NONCE,
  sessionAttributes: u8,
  hmac: TPM2B_AUTH,
});
export type TPMS_AUTH_COMMAND = Infer<typeof TPMS_AUTH_COMMAND>;
/** TPMS_AUTH_RESPONSE (§10.13.3). */
export const TPMS_AUTH_RESPONSE = struct("TPMS_AUTH_RESPONSE", { nonce: TPM2B_NONCE, sessionAttributes: u8, hmac: TPM2B_AUTH });
export type TPMS_AUTH_RESPONSE = Infer<typeof TPMS_AUTH_RESPONSE>;

// ---- Command-specific structures (Part 2) ----

/** TPMS_SENSITIVE_CREATE / TPM2B_SENSITIVE_CREATE (§11.1.15-16). */
export const TPMS_SENSITIVE_CREATE = struct("TPMS_SENSITIVE_CREATE", { userAuth: TPM2B_AUTH, data: TPM2B_SENSITIVE_DATA });
export const TPM2B_SENSITIVE_CREATE = sized("TPM2B_SENSITIVE_CREATE", TPMS_SENSITIVE_CREATE);

/** A TPMT_PUBLIC kept with its exact bytes (for Names and for sending a stored public area back unchanged). */
export const TPMT_PUBLIC_CAPTURED: Codec<Captured<Infer<typeof TPMT_PUBLIC>>> = captured(TPMT_PUBLIC);
/** TPM2B_PUBLIC carrying the exact TPMT_PUBLIC bytes. */
export const TPM2B_PUBLIC_CAPTURED = sized("TPM2B_PUBLIC", TPMT_PUBLIC_CAPTURED);
/** TPM2B_PUBLIC as a template to create from. */
export const TPM2B_TEMPLATE = sized("TPM2B_PUBLIC", TPMT_PUBLIC);
/** TPM2B_ATTEST carrying the exact TPMS_ATTEST bytes the signature covers. */
export const TPM2B_ATTEST_CAPTURED = sized("TPM2B_ATTEST", captured(TPMS_ATTEST), 1024);
/** TPMT_SIGNATURE with its exact bytes. */
export const TPMT_SIGNATURE_CAPTURED = captured(TPMT_SIGNATURE);

/** TPM2B_CREATION_DATA (§15.2). */
export const TPM2B_CREATION_DATA = sized("TPM2B_CREATION_DATA", TPMS_CREATION_DATA);

/** TPMT_TK_CREATION, TPMT_TK_HASHCHECK, TPMT_TK_AUTH (§10.7): tag, hierarchy, digest. */
const ticket = (typeName: string) => struct(typeName, { tag: u16, hierarchy: u32, digest: TPM2B_DIGEST });
export const TPMT_TK_CREATION = ticket("TPMT_TK_CREATION");
export const TPMT_TK_HASHCHECK = ticket("TPMT_TK_HASHCHECK");
export const TPMT_TK_AUTH = ticket("TPMT_TK_AUTH");
/** TPM2B_TIMEOUT (§10.4.10, at most 8 bytes). */
export const TPM2B_TIMEOUT = sizedBytes("TPM2B_TIMEOUT", 8);

const hashScheme = TPMS_SCHEME_HASH;
/** TPMT_SIG_SCHEME (§11.2.1.5): NULL means "the key's own scheme". */
export const TPMT_SIG_SCHEME = struct("TPMT_SIG_SCHEME", {
  scheme: oneOf(u16, "TPMI_ALG_SIG_SCHEME", [A.RSASSA, A.RSAPSS, A.ECDSA, A.NULL]),
  details: union("TPMU_SIG_SCHEME", "scheme", {
    [A.RSASSA]: ["rsassa", hashScheme],
    [A.RSAPSS]: ["rsapss", hashScheme],
    [A.ECDSA]: ["ecdsa", hashScheme],
    [A.NULL]: ["null", empty],
  } as const),
});
export type TPMT_SIG_SCHEME = Infer<typeof TPMT_SIG_SCHEME>;

/** TPMT_SYM_DEF (§11.1.6), as StartAuthSession takes it (parameter encryption; fleetd uses NULL). */
export const TPMT_SYM_DEF = struct("TPMT_SYM_DEF", {
  algorithm: oneOf(u16, "TPMI_ALG_SYM", [A.AES, A.XOR, A.NULL]),
  details: union("TPMU_SYM_DEF", "algorithm", {
    [A.AES]: ["aes", struct("AES", { keyBits: u16, mode: u16 })],
    [A.XOR]: ["xor", struct("XOR", { hashAlg: TPMI_ALG_HASH })],
    [A.NULL]: ["null", empty],
  } as const),
});

/** TPMS_NV_PUBLIC / TPM2B_NV_PUBLIC (§13.5-6). */
export const TPMS_NV_PUBLIC = struct("TPMS_NV_PUBLIC", {
  nvIndex: u32,
  nameAlg: TPMI_ALG_HASH,
  attributes: u32,
  authPolicy: TPM2B_DIGEST,
  dataSize: u16,
});
export type TPMS_NV_PUBLIC = Infer<typeof TPMS_NV_PUBLIC>;
export const TPM2B_NV_PUBLIC = sized("TPM2B_NV_PUBLIC", TPMS_NV_PUBLIC);

/** TPML_DIGEST_VALUES (§10.9.8): one TPMT_HA per bank, at most HASH_COUNT. */
export const TPML_DIGEST_VALUES = list("TPML_DIGEST_VALUES", u32, TPMT_HA, 16);

// TPMS_CAPABILITY_DATA (§10.10.2) with the capabilities fleetd asks for.
const TPMS_ALG_PROPERTY = struct("TPMS_ALG_PROPERTY", { alg: u16, algProperties: u32 });
const TPMS_TAGGED_PROPERTY = struct("TPMS_TAGGED_PROPERTY", { property: u32, value: u32 });
/** MAX_CAP_* are computed from MAX_CAP_BUFFER (1024) by the TPM; these bounds only stop absurd counts. */
export const TPMS_CAPABILITY_DATA = struct("TPMS_CAPABILITY_DATA", {
  capability: oneOf(u32, "TPM_CAP", [0, 1, 2, 5, 6, 8]),
  data: union("TPMU_CAPABILITIES", "capability", {
    [0]: ["algorithms", struct("TPML_ALG_PROPERTY", { list: list("TPML_ALG_PROPERTY", u32, TPMS_ALG_PROPERTY, 256) })],
    [1]: ["handles", struct("TPML_HANDLE", { list: list("TPML_HANDLE", u32, u32, 512) })],
    [2]: ["command", struct("TPML_CCA", { list: list("TPML_CCA", u32, u32, 512) })],
    [5]: ["assignedPCR", struct("TPML_PCR_SELECTION", { list: TPML_PCR_SELECTION })],
    [6]: ["tpmProperties", struct("TPML_TAGGED_TPM_PROPERTY", { list: list("TPML_TAGGED_TPM_PROPERTY", u32, TPMS_TAGGED_PROPERTY, 256) })],
    [8]: ["eccCurves", struct("TPML_ECC_CURVE", { list: list("TPML_ECC_CURVE", u32, u16, 256) })],
  } as const),
});
export type TPMS_CAPABILITY_DATA = Infer<typeof TPMS_CAPABILITY_DATA>;

// ---- Commands (Part 3) ----

/** One command's declaration. Handle names follow Part 3; auth handles come first in every command fleetd sends. */
export interface CommandSpec<P, R> {
  readonly name: string;
  readonly code: number;
  readonly handles: readonly string[];
  /** How many of the leading handles need an authorization (Part 3's "@" handles). */
  readonly authHandles: number;
  readonly params: Codec<P>;
  readonly responseHandles: readonly string[];
  readonly response: Codec<R>;
}

function command<P, R>(spec: CommandSpec<P, R>): CommandSpec<P, R> {
  return spec;
}
const none = struct("(none)", {});

/** TPM2_GetCapability (§30.2). */
export const TPM2_GetCapability = command({
  name: "TPM2_GetCapability",
  code: TPM_CC.GetCapability,
  handles: [],
  authHandles: 0,
  params: struct("TPM2_GetCapability", { capability: u32, property: u32, propertyCount: u32 }),
  responseHandles: [],
  response: struct("TPM2_GetCapability.response", { moreData: TPMI_YES_NO, capabilityData: TPMS_CAPABILITY_DATA }),
});

const creationParams = { outsideInfo: TPM2B_DATA, creationPCR: TPML_PCR_SELECTION };
const creationResult = {
  creationData: TPM2B_CREATION_DATA,
  creationHash: TPM2B_DIGEST,
  creationTicket: TPMT_TK_CREATION,
};

/** TPM2_CreatePrimary (§24.1). */
export const TPM2_CreatePrimary = command({
  name: "TPM2_CreatePrimary",
  code: TPM_CC.CreatePrimary,
  handles: ["primaryHandle"],
  authHandles: 1,
  params: struct("TPM2_CreatePrimary", { inSensitive: TPM2B_SENSITIVE_CREATE, inPublic: TPM2B_TEMPLATE, ...creationParams }),
  responseHandles: ["objectHandle"],
  response: struct("TPM2_CreatePrimary.response", { outPublic: TPM2B_PUBLIC_CAPTURED, ...creationResult, name: TPM2B_NAME }),
});

/** TPM2_Create (§12.1). */
export const TPM2_Create = command({
  name: "TPM2_Create",
  code: TPM_CC.Create,
  handles: ["parentHandle"],
  authHandles: 1,
  params: struct("TPM2_Create", { inSensitive: TPM2B_SENSITIVE_CREATE, inPublic: TPM2B_TEMPLATE, ...creationParams }),
  responseHandles: [],
  response: struct("TPM2_Create.response", { outPrivate: TPM2B_PRIVATE, outPublic: TPM2B_PUBLIC_CAPTURED, ...creationResult }),
});

/** TPM2_Load (§12.2). */
export const TPM2_Load = command({
  name: "TPM2_Load",
  code: TPM_CC.Load,
  handles: ["parentHandle"],
  authHandles: 1,
  params: struct("TPM2_Load", { inPrivate: TPM2B_PRIVATE, inPublic: TPM2B_PUBLIC_CAPTURED }),
  responseHandles: ["objectHandle"],
  response: struct("TPM2_Load.response", { name: TPM2B_NAME }),
});

/** TPM2_ReadPublic (§12.4). */
export const TPM2_ReadPublic = command({
  name: "TPM2_ReadPublic",
  code: TPM_CC.ReadPublic,
  handles: ["objectHandle"],
  authHandles: 0,
  params: none,
  responseHandles: [],
  response: struct("TPM2_ReadPublic.response", { outPublic: TPM2B_PUBLIC_CAPTURED, name: TPM2B_NAME, qualifiedName: TPM2B_NAME }),
});

/** TPM2_ActivateCredential (§12.5): activateHandle (ADMIN role), keyHandle (USER role). */
export const TPM2_ActivateCredential = command({
  name: "TPM2_ActivateCredential",
  code: TPM_CC.ActivateCredential,
  handles: ["activateHandle", "keyHandle"],
  authHandles: 2,
  params: struct("TPM2_ActivateCredential", { credentialBlob: TPM2B_ID_OBJECT, secret: TPM2B_ENCRYPTED_SECRET }),
  responseHandles: [],
  response: struct("TPM2_ActivateCredential.response", { certInfo: TPM2B_DIGEST }),
});

/** TPM2_Certify (§18.2): objectHandle (ADMIN role), signHandle (USER role). */
export const TPM2_Certify = command({
  name: "TPM2_Certify",
  code: TPM_CC.Certify,
  handles: ["objectHandle", "signHandle"],
  authHandles: 2,
  params: struct("TPM2_Certify", { qualifyingData: TPM2B_DATA, inScheme: TPMT_SIG_SCHEME }),
  responseHandles: [],
  response: struct("TPM2_Certify.response", { certifyInfo: TPM2B_ATTEST_CAPTURED, signature: TPMT_SIGNATURE_CAPTURED }),
});

/** TPM2_Quote (§18.4). */
export const TPM2_Quote = command({
  name: "TPM2_Quote",
  code: TPM_CC.Quote,
  handles: ["signHandle"],
  authHandles: 1,
  params: struct("TPM2_Quote", { qualifyingData: TPM2B_DATA, inScheme: TPMT_SIG_SCHEME, PCRselect: TPML_PCR_SELECTION }),
  responseHandles: [],
  response: struct("TPM2_Quote.response", { quoted: TPM2B_ATTEST_CAPTURED, signature: TPMT_SIGNATURE_CAPTURED }),
});

/** TPM2_Sign (§20.2). */
export const TPM2_Sign = command({
  name: "TPM2_Sign",
  code: TPM_CC.Sign,
  handles: ["keyHandle"],
  authHandles: 1,
  params: struct("TPM2_Sign", { digest: TPM2B_DIGEST, inScheme: TPMT_SIG_SCHEME, validation: TPMT_TK_HASHCHECK }),
  responseHandles: [],
  response: struct("TPM2_Sign.response", { signature: TPMT_SIGNATURE_CAPTURED }),
});

/** TPM2_PCR_Extend (§22.2). */
export const TPM2_PCR_Extend = command({
  name: "TPM2_PCR_Extend",
  code: TPM_CC.PCR_Extend,
  handles: ["pcrHandle"],
  authHandles: 1,
  params: struct("TPM2_PCR_Extend", { digests: TPML_DIGEST_VALUES }),
  responseHandles: [],
  response: none,
});

/** TPM2_PCR_Read (§22.4). */
export const TPM2_PCR_Read = command({
  name: "TPM2_PCR_Read",
  code: TPM_CC.PCR_Read,
  handles: [],
  authHandles: 0,
  params: struct("TPM2_PCR_Read", { pcrSelectionIn: TPML_PCR_SELECTION }),
  responseHandles: [],
  response: struct("TPM2_PCR_Read.response", { pcrUpdateCounter: u32, pcrSelectionOut: TPML_PCR_SELECTION, pcrValues: TPML_DIGEST }),
});

/** TPM2_StartAuthSession (§11.1): tpmKey and bind TPM_RH_NULL for an unsalted, unbound session. */
export const TPM2_StartAuthSession = command({
  name: "TPM2_StartAuthSession",
  code: TPM_CC.StartAuthSession,
  handles: ["tpmKey", "bind"],
  authHandles: 0,
  params: struct("TPM2_StartAuthSession", {
    nonceCaller: TPM2B_NONCE,
    encryptedSalt: TPM2B_ENCRYPTED_SECRET,
    sessionType: oneOf(u8, "TPM_SE", [TPM_SE.HMAC, TPM_SE.POLICY, TPM_SE.TRIAL]),
    symmetric: TPMT_SYM_DEF,
    authHash: TPMI_ALG_HASH,
  }),
  responseHandles: ["sessionHandle"],
  response: struct("TPM2_StartAuthSession.response", { nonceTPM: TPM2B_NONCE }),
});

/** TPM2_PolicySecret (§23.4). */
export const TPM2_PolicySecret = command({
  name: "TPM2_PolicySecret",
  code: TPM_CC.PolicySecret,
  handles: ["authHandle", "policySession"],
  authHandles: 1,
  params: struct("TPM2_PolicySecret", { nonceTPM: TPM2B_NONCE, cpHashA: TPM2B_DIGEST, policyRef: TPM2B_NONCE, expiration: u32 }),
  responseHandles: [],
  response: struct("TPM2_PolicySecret.response", { timeout: TPM2B_TIMEOUT, policyTicket: TPMT_TK_AUTH }),
});

/** TPM2_NV_ReadPublic (§31.6). */
export const TPM2_NV_ReadPublic = command({
  name: "TPM2_NV_ReadPublic",
  code: TPM_CC.NV_ReadPublic,
  handles: ["nvIndex"],
  authHandles: 0,
  params: none,
  responseHandles: [],
  response: struct("TPM2_NV_ReadPublic.response", { nvPublic: TPM2B_NV_PUBLIC, nvName: TPM2B_NAME }),
});

/** TPM2_NV_Read (§31.13): authHandle is the index itself (AUTHREAD) or the owner (OWNERREAD). */
export const TPM2_NV_Read = command({
  name: "TPM2_NV_Read",
  code: TPM_CC.NV_Read,
  handles: ["authHandle", "nvIndex"],
  authHandles: 1,
  params: struct("TPM2_NV_Read", { size: u16, offset: u16 }),
  responseHandles: [],
  response: struct("TPM2_NV_Read.response", { data: TPM2B_MAX_NV_BUFFER }),
});

/** TPM2_FlushContext (§28.4): the handle is a parameter, not in the handle area. */
export const TPM2_FlushContext = command({
  name: "TPM2_FlushContext",
  code: TPM_CC.FlushContext,
  handles: [],
  authHandles: 0,
  params: struct("TPM2_FlushContext", { flushHandle: u32 }),
  responseHandles: [],
  response: none,
});

/** TPM2_Clear (Part 3 §24.6): new storage primary seed, owner/endorsement objects and auth values gone; EPS kept. */
export const TPM2_Clear = command({
  name: "TPM2_Clear",
  code: TPM_CC.Clear,
  handles: ["authHandle"],
  authHandles: 1,
  params: none,
  responseHandles: [],
  response: none,
});

/** Every command declared here, by code (the flush-on-close transport reads handle areas with it). */
export const COMMANDS: ReadonlyMap<number, CommandSpec<unknown, unknown>> = new Map(
  [
    TPM2_GetCapability,
    TPM2_CreatePrimary,
    TPM2_Create,
    TPM2_Load,
    TPM2_ReadPublic,
    TPM2_ActivateCredential,
    TPM2_Certify,
    TPM2_Quote,
    TPM2_Sign,
    TPM2_PCR_Extend,
    TPM2_PCR_Read,
    TPM2_StartAuthSession,
    TPM2_PolicySecret,
    TPM2_NV_ReadPublic,
    TPM2_NV_Read,
    TPM2_FlushContext,
    TPM2_Clear,
  ].map((c) => [c.code, c as CommandSpec<unknown, unknown>]),
);

/** Command names by code, for error messages. */
export function commandName(code: number): string {
  return COMMANDS.get(code)?.name ?? `TPM_CC 0x${code.toString(16).padStart(8, "0")}`;
}
