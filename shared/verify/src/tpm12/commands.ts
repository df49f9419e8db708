/**
 * TPM 1.2 commands fleetd's TPM 1.2 client sends, declared once (TCG TPM Main Specification 1.2 rev 116, Part 3:
 * Commands; section numbers in comments). The wire format (Part 3 §2, "Command and response formats"):
 *
 *   command  = tag ‖ paramSize ‖ ordinal ‖ handles ‖ parameters ‖ [authHandle ‖ nonceOdd ‖ continueAuthSession ‖ authValue]×auths
 *   response = tag ‖ paramSize ‖ returnCode ‖ handles ‖ parameters ‖ [nonceEven ‖ continueAuthSession ‖ resAuth]×auths
 *
 * `handles` are the key handles that precede the parameters and are NOT part of the HMAC'd parameter digest
 * (the "no S" fields of the spec's tables); `params` are the digested ones, encoded by their declaration.
 * A command that digests a handle (TPM_OwnerReadInternalPub's keyHandle, 2S) declares it as a parameter.
 */
import { type Codec, empty, fixed, sizedBytes32, struct, u16, u32, captured } from "../codec/codec.js";
import {
  TPM_KEY,
  TPM_KEY_CAPTURED,
  TPM_PCR_COMPOSITE,
  TPM_PCR_SELECTION,
  TPM_PUBKEY_CAPTURED,
  TPM_SYMMETRIC_KEY,
} from "./structures.js";

/** TPM_TAG (Part 2 §3.1). */
export const TPM12_TAG = {
  RQU_COMMAND: 0x00c1,
  RQU_AUTH1_COMMAND: 0x00c2,
  RQU_AUTH2_COMMAND: 0x00c3,
  RSP_COMMAND: 0x00c4,
  RSP_AUTH1_COMMAND: 0x00c5,
  RSP_AUTH2_COMMAND: 0x00c6,
} as const;

/** TPM_COMMAND_CODE ordinals (Part 2 §17). */
export const TPM_ORD = {
  Extend: 0x00000014,
  PcrRead: 0x00000015,
  Quote: 0x00000016,
  OIAP: 0x0000000a,
  OSAP: 0x0000000b,
  LoadKey2: 0x00000041,
  GetCapability: 0x00000065,
  MakeIdentity: 0x00000079,
  ActivateIdentity: 0x0000007a,
  ReadPubek: 0x0000007c,
  OwnerReadInternalPub: 0x00000081,
  Startup: 0x00000099,
  FlushSpecific: 0x000000ba,
  NV_ReadValue: 0x000000cf,
} as const;

export interface Command12<P, R> {
  /** The spec's name, e.g. "TPM_MakeIdentity" (error messages). */
  name: string;
  ordinal: number;
  /** Names of the handles in the handle area (not digested). */
  handles: readonly string[];
  params: Codec<P>;
  /** Authorization sessions the command takes (0, 1 or 2). */
  auths: 0 | 1 | 2;
  /** Names of the handles the response returns before its parameters (not digested). */
  responseHandles: readonly string[];
  response: Codec<R>;
}

function cmd<P, R>(c: Command12<P, R>): Command12<P, R> {
  return c;
}

const NONCE = fixed(20, "TPM_NONCE");

/** TPM_Startup (Part 3 §3.2). */
export const TPM_Startup = cmd({ name: "TPM_Startup", ordinal: TPM_ORD.Startup, handles: [], params: struct("TPM_Startup", { startupType: u16 }), auths: 0, responseHandles: [], response: empty });

/** TPM_OIAP (Part 3 §18.1): an object-independent authorization session. */
export const TPM_OIAP = cmd({
  name: "TPM_OIAP",
  ordinal: TPM_ORD.OIAP,
  handles: [],
  params: empty,
  auths: 0,
  responseHandles: [],
  response: struct("TPM_OIAP response", { authHandle: u32, nonceEven: NONCE }),
});

/** TPM_OSAP (Part 3 §18.2): an object-specific session; its shared secret keys ADIP and the HMACs. */
export const TPM_OSAP = cmd({
  name: "TPM_OSAP",
  ordinal: TPM_ORD.OSAP,
  handles: [],
  params: struct("TPM_OSAP", { entityType: u16, entityValue: u32, nonceOddOSAP: NONCE }),
  auths: 0,
  responseHandles: [],
  response: struct("TPM_OSAP response", { authHandle: u32, nonceEven: NONCE, nonceEvenOSAP: NONCE }),
});

/** TPM_GetCapability (Part 3 §7.1). */
export const TPM_GetCapability = cmd({
  name: "TPM_GetCapability",
  ordinal: TPM_ORD.GetCapability,
  handles: [],
  params: struct("TPM_GetCapability", { capArea: u32, subCap: sizedBytes32("subCap", 64) }),
  auths: 0,
  responseHandles: [],
  response: struct("TPM_GetCapability response", { resp: sizedBytes32("resp", 4096) }),
});

/** TPM_NV_ReadValue without authorization (Part 3 §20.4): the EK certificate index is world-readable. */
export const TPM_NV_ReadValue = cmd({
  name: "TPM_NV_ReadValue",
  ordinal: TPM_ORD.NV_ReadValue,
  handles: [],
  params: struct("TPM_NV_ReadValue", { nvIndex: u32, offset: u32, dataSize: u32 }),
  auths: 0,
  responseHandles: [],
  response: struct("TPM_NV_ReadValue response", { data: sizedBytes32("data", 4096) }),
});

/** TPM_ReadPubek (Part 3 §14.3): the EK's public key before an owner is installed (checksum binds antiReplay). */
export const TPM_ReadPubek = cmd({
  name: "TPM_ReadPubek",
  ordinal: TPM_ORD.ReadPubek,
  handles: [],
  params: struct("TPM_ReadPubek", { antiReplay: NONCE }),
  auths: 0,
  responseHandles: [],
  response: struct("TPM_ReadPubek response", { pubEndorsementKey: TPM_PUBKEY_CAPTURED, checksum: fixed(20, "TPM_DIGEST") }),
});

/** TPM_OwnerReadInternalPub (Part 3 §14.5): the EK (or SRK) public key, under owner authorization. */
export const TPM_OwnerReadInternalPub = cmd({
  name: "TPM_OwnerReadInternalPub",
  ordinal: TPM_ORD.OwnerReadInternalPub,
  handles: [],
  params: struct("TPM_OwnerReadInternalPub", { keyHandle: u32 }),
  auths: 1,
  responseHandles: [],
  response: struct("TPM_OwnerReadInternalPub response", { publicPortion: TPM_PUBKEY_CAPTURED }),
});

/** TPM_MakeIdentity (Part 3 §15.1): a new AIK; auth 1 = SRK, auth 2 = owner (OSAP, ADIP-encrypted identityAuth). */
export const TPM_MakeIdentity = cmd({
  name: "TPM_MakeIdentity",
  ordinal: TPM_ORD.MakeIdentity,
  handles: [],
  params: struct("TPM_MakeIdentity", { identityAuth: fixed(20, "TPM_ENCAUTH"), labelPrivCADigest: fixed(20, "TPM_CHOSENID_HASH"), idKeyParams: TPM_KEY }),
  auths: 2,
  responseHandles: [],
  response: struct("TPM_MakeIdentity response", { idKey: TPM_KEY_CAPTURED, identityBinding: sizedBytes32("identityBinding", 512) }),
});

/** TPM_LoadKey2 (Part 3 §10.5): load a key blob under its parent (auth 1 = parent). */
export const TPM_LoadKey2 = cmd({
  name: "TPM_LoadKey2",
  ordinal: TPM_ORD.LoadKey2,
  handles: ["parentHandle"],
  params: struct("TPM_LoadKey2", { inKey: TPM_KEY_CAPTURED }),
  auths: 1,
  responseHandles: ["inkeyHandle"],
  response: empty,
});

/** TPM_ActivateIdentity (Part 3 §15.2): the EK decrypts the privacy CA's blob for this AIK (auth 1 = AIK, 2 = owner). */
export const TPM_ActivateIdentity = cmd({
  name: "TPM_ActivateIdentity",
  ordinal: TPM_ORD.ActivateIdentity,
  handles: ["idKeyHandle"],
  params: struct("TPM_ActivateIdentity", { blob: sizedBytes32("blob", 512) }),
  auths: 2,
  responseHandles: [],
  response: struct("TPM_ActivateIdentity response", { symmetricKey: TPM_SYMMETRIC_KEY }),
});

/** TPM_Quote (Part 3 §16.1): the AIK signs TPM_QUOTE_INFO over the selected PCRs and externalData. */
export const TPM_Quote = cmd({
  name: "TPM_Quote",
  ordinal: TPM_ORD.Quote,
  handles: ["keyHandle"],
  params: struct("TPM_Quote", { externalData: NONCE, targetPCR: TPM_PCR_SELECTION }),
  auths: 1,
  responseHandles: [],
  response: struct("TPM_Quote response", { pcrData: captured(TPM_PCR_COMPOSITE), sig: sizedBytes32("sig", 512) }),
});

/** TPM_PCRRead (Part 3 §16.2). */
export const TPM_PcrRead = cmd({
  name: "TPM_PCRRead",
  ordinal: TPM_ORD.PcrRead,
  handles: [],
  params: struct("TPM_PCRRead", { pcrIndex: u32 }),
  auths: 0,
  responseHandles: [],
  response: struct("TPM_PCRRead response", { outDigest: fixed(20, "TPM_PCRVALUE") }),
});

/** TPM_Extend (Part 3 §16.1). */
export const TPM_Extend = cmd({
  name: "TPM_Extend",
  ordinal: TPM_ORD.Extend,
  handles: [],
  params: struct("TPM_Extend", { pcrNum: u32, inDigest: fixed(20, "TPM_DIGEST") }),
  auths: 0,
  responseHandles: [],
  response: struct("TPM_Extend response", { outDigest: fixed(20, "TPM_PCRVALUE") }),
});

/** TPM_FlushSpecific (Part 3 §22.3). */
export const TPM_FlushSpecific = cmd({
  name: "TPM_FlushSpecific",
  ordinal: TPM_ORD.FlushSpecific,
  handles: ["handle"],
  params: struct("TPM_FlushSpecific", { resourceType: u32 }),
  auths: 0,
  responseHandles: [],
  response: empty,
});

/** Every declared command (the fuzz targets iterate over them). */
export const COMMANDS12: readonly Command12<never, unknown>[] = [
  TPM_Startup,
  TPM_OIAP,
  TPM_OSAP,
  TPM_GetCapability,
  TPM_NV_ReadValue,
  TPM_ReadPubek,
  TPM_OwnerReadInternalPub,
  TPM_MakeIdentity,
  TPM_LoadKey2,
  TPM_ActivateIdentity,
  TPM_Quote,
  TPM_PcrRead,
  TPM_Extend,
  TPM_FlushSpecific,
] as unknown as readonly Command12<never, unknown>[];
