/**
 * TPM_RC response codes (TPM 2.0 Library Part 2 §6.6) decoded to their spec names.
 *
 *  - bit 7 set: **format one** — an error about a handle, session or parameter: bits 0-5 the error number
 *    (+ RC_FMT1 0x080); bit 6 set → bits 8-11 give the parameter number; else bit 11 clear → bits 8-10 a handle
 *    number, bit 11 set → bits 8-10 a session number (0 = unspecified).
 *  - bit 7 clear: **format zero** — bit 8 (RC_VER1) set for TPM 2.0 codes (clear: a TPM 1.2 code, of which
 *    TPM 2.0 only sends TPM_RC_BAD_TAG 0x01E), bit 10 vendor-defined, bit 11 a warning (RC_WARN 0x900).
 *  - bits 16-23: a TSS layer (resource managers and TCTIs put theirs there; a TPM never does).
 */

const RC_VER1 = 0x100;
const RC_FMT1 = 0x080;
const RC_WARN = 0x900;

/** Format-zero errors (RC_VER1 + n) with a sentence each. */
const FMT0: Record<number, [string, string]> = {
  0x000: ["TPM_RC_INITIALIZE", "TPM not initialized by TPM2_Startup or already initialized"],
  0x001: ["TPM_RC_FAILURE", "the TPM is in failure mode"],
  0x003: ["TPM_RC_SEQUENCE", "improper use of a sequence handle"],
  0x00b: ["TPM_RC_PRIVATE", "not currently used"],
  0x019: ["TPM_RC_HMAC", "not currently used"],
  0x020: ["TPM_RC_DISABLED", "the command is disabled"],
  0x021: ["TPM_RC_EXCLUSIVE", "the command failed because an audit sequence required exclusivity"],
  0x024: ["TPM_RC_AUTH_TYPE", "authorization handle is not correct for the command"],
  0x025: ["TPM_RC_AUTH_MISSING", "the command requires an authorization session for a handle and it is not present"],
  0x026: ["TPM_RC_POLICY", "policy failure in math operation or an invalid authPolicy value"],
  0x027: ["TPM_RC_PCR", "PCR check fail"],
  0x028: ["TPM_RC_PCR_CHANGED", "PCR have changed since checked"],
  0x02d: ["TPM_RC_UPGRADE", "the TPM is in field upgrade mode"],
  0x02e: ["TPM_RC_TOO_MANY_CONTEXTS", "context ID counter is at maximum"],
  0x02f: ["TPM_RC_AUTH_UNAVAILABLE", "authValue or authPolicy is not available for the selected entity"],
  0x030: ["TPM_RC_REBOOT", "a _TPM_Init and Startup(CLEAR) is required"],
  0x031: ["TPM_RC_UNBALANCED", "the protection algorithms (hash and symmetric) are not reasonably balanced"],
  0x042: ["TPM_RC_COMMAND_SIZE", "command commandSize value is inconsistent with its contents"],
  0x043: ["TPM_RC_COMMAND_CODE", "command code not supported"],
  0x044: ["TPM_RC_AUTHSIZE", "the authorizationSize is out of range or the number of sessions is wrong"],
  0x045: ["TPM_RC_AUTH_CONTEXT", "use of an authorization session with a context command or another command that cannot have one"],
  0x046: ["TPM_RC_NV_RANGE", "NV offset+size is out of range"],
  0x047: ["TPM_RC_NV_SIZE", "requested allocation size is larger than allowed"],
  0x048: ["TPM_RC_NV_LOCKED", "NV access locked"],
  0x049: ["TPM_RC_NV_AUTHORIZATION", "NV access authorization fails in command actions"],
  0x04a: ["TPM_RC_NV_UNINITIALIZED", "an NV Index is used before being initialized"],
  0x04b: ["TPM_RC_NV_SPACE", "insufficient space for NV allocation"],
  0x04c: ["TPM_RC_NV_DEFINED", "NV Index or persistent object already defined"],
  0x050: ["TPM_RC_BAD_CONTEXT", "context in TPM2_ContextLoad is not valid"],
  0x051: ["TPM_RC_CPHASH", "cpHash value already set or not correct for use"],
  0x052: ["TPM_RC_PARENT", "handle for parent is not a valid parent"],
  0x053: ["TPM_RC_NEEDS_TEST", "some function needs testing"],
  0x054: ["TPM_RC_NO_RESULT", "an internal function cannot process a request due to an unspecified problem"],
  0x055: ["TPM_RC_SENSITIVE", "the sensitive area did not unmarshal correctly after decryption"],
};

/** Format-one errors (RC_FMT1 + n). */
const FMT1: Record<number, [string, string]> = {
  0x001: ["TPM_RC_ASYMMETRIC", "asymmetric algorithm not supported or not correct"],
  0x002: ["TPM_RC_ATTRIBUTES", "inconsistent attributes"],
  0x003: ["TPM_RC_HASH", "hash algorithm not supported or not appropriate"],
  0x004: ["TPM_RC_VALUE", "value is out of range or is not correct for the context"],
  0x005: ["TPM_RC_HIERARCHY", "hierarchy is not enabled or is not correct for the use"],
  0x007: ["TPM_RC_KEY_SIZE", "key size is not supported"],
  0x008: ["TPM_RC_MGF", "mask generation function not supported"],
  0x009: ["TPM_RC_MODE", "mode of operation not supported"],
  0x00a: ["TPM_RC_TYPE", "the type of the value is not appropriate for the use"],
  0x00b: ["TPM_RC_HANDLE", "the handle is not correct for the use"],
  0x00c: ["TPM_RC_KDF", "unsupported key derivation function or function not appropriate for use"],
  0x00d: ["TPM_RC_RANGE", "value was out of allowed range"],
  0x00e: ["TPM_RC_AUTH_FAIL", "the authorization HMAC check failed and the DA counter incremented"],
  0x00f: ["TPM_RC_NONCE", "invalid nonce size or nonce value mismatch"],
  0x010: ["TPM_RC_PP", "authorization requires assertion of physical presence"],
  0x012: ["TPM_RC_SCHEME", "unsupported or incompatible scheme"],
  0x015: ["TPM_RC_SIZE", "structure is the wrong size"],
  0x016: ["TPM_RC_SYMMETRIC", "unsupported symmetric algorithm or key size, or not appropriate for instance"],
  0x017: ["TPM_RC_TAG", "incorrect structure tag"],
  0x018: ["TPM_RC_SELECTOR", "union selector is incorrect"],
  0x01a: ["TPM_RC_INSUFFICIENT", "the TPM was unable to unmarshal a value because there were not enough octets in the input buffer"],
  0x01b: ["TPM_RC_SIGNATURE", "the signature is not valid"],
  0x01c: ["TPM_RC_KEY", "key fields are not compatible with the selected use"],
  0x01d: ["TPM_RC_POLICY_FAIL", "a policy check failed"],
  0x01f: ["TPM_RC_INTEGRITY", "integrity check failed"],
  0x020: ["TPM_RC_TICKET", "invalid ticket"],
  0x021: ["TPM_RC_RESERVED_BITS", "reserved bits not set to zero as required"],
  0x022: ["TPM_RC_BAD_AUTH", "authorization failure without DA implications"],
  0x023: ["TPM_RC_EXPIRED", "the policy has expired"],
  0x024: ["TPM_RC_POLICY_CC", "the commandCode in the policy is not the commandCode of the command or the command code in a policy command references a command that is not implemented"],
  0x025: ["TPM_RC_BINDING", "public and sensitive portions of an object are not cryptographically bound"],
  0x026: ["TPM_RC_CURVE", "curve not supported"],
  0x027: ["TPM_RC_ECC_POINT", "point is not on the required curve"],
};

/** Warnings (RC_WARN + n): the command did not run; many can be retried. */
const WARN: Record<number, [string, string]> = {
  0x001: ["TPM_RC_CONTEXT_GAP", "gap for context ID is too large"],
  0x002: ["TPM_RC_OBJECT_MEMORY", "out of memory for object contexts"],
  0x003: ["TPM_RC_SESSION_MEMORY", "out of memory for session contexts"],
  0x004: ["TPM_RC_MEMORY", "out of shared object/session memory or need space for internal operations"],
  0x005: ["TPM_RC_SESSION_HANDLES", "out of session handles; a session must be flushed before a new session may be created"],
  0x006: ["TPM_RC_OBJECT_HANDLES", "out of object handles; the handle space for objects is depleted and a reboot is required"],
  0x007: ["TPM_RC_LOCALITY", "bad locality"],
  0x008: ["TPM_RC_YIELDED", "the TPM has suspended operation on the command; the command may be retried"],
  0x009: ["TPM_RC_CANCELED", "the command was canceled"],
  0x00a: ["TPM_RC_TESTING", "the TPM is performing self-tests"],
  0x010: ["TPM_RC_REFERENCE_H0", "the 1st handle in the handle area references a transient object or session that is not loaded"],
  0x011: ["TPM_RC_REFERENCE_H1", "the 2nd handle in the handle area references a transient object or session that is not loaded"],
  0x012: ["TPM_RC_REFERENCE_H2", "the 3rd handle in the handle area references a transient object or session that is not loaded"],
  0x013: ["TPM_RC_REFERENCE_H3", "the 4th handle in the handle area references a transient object or session that is not loaded"],
  0x014: ["TPM_RC_REFERENCE_H4", "the 5th handle in the handle area references a transient object or session that is not loaded"],
  0x015: ["TPM_RC_REFERENCE_H5", "the 6th handle in the handle area references a transient object or session that is not loaded"],
  0x016: ["TPM_RC_REFERENCE_H6", "the 7th handle in the handle area references a transient object or session that is not loaded"],
  0x018: ["TPM_RC_REFERENCE_S0", "the 1st authorization session handle references a session that is not loaded"],
  0x019: ["TPM_RC_REFERENCE_S1", "the 2nd authorization session handle references a session that is not loaded"],
  0x01a: ["TPM_RC_REFERENCE_S2", "the 3rd authorization session handle references a session that is not loaded"],
  0x01b: ["TPM_RC_REFERENCE_S3", "the 4th authorization session handle references a session that is not loaded"],
  0x01c: ["TPM_RC_REFERENCE_S4", "the 5th authorization session handle references a session that is not loaded"],
  0x01d: ["TPM_RC_REFERENCE_S5", "the 6th authorization session handle references a session that is not loaded"],
  0x01e: ["TPM_RC_REFERENCE_S6", "the 7th authorization session handle references a session that is not loaded"],
  0x020: ["TPM_RC_NV_RATE", "the TPM is rate-limiting accesses to prevent wearout of NV"],
  0x021: ["TPM_RC_LOCKOUT", "authorizations for objects subject to DA protection are not allowed at this time because the TPM is in DA lockout mode"],
  0x022: ["TPM_RC_RETRY", "the TPM was not able to start the command"],
  0x023: ["TPM_RC_NV_UNAVAILABLE", "the command may require writing of NV and NV is not current accessible"],
  0x07f: ["TPM_RC_NOT_USED", "this value is reserved and shall not be returned by the TPM"],
};

/** TSS2 layers (tss2_common.h) a resource manager or TCTI may put in bits 16-23. */
const LAYERS: Record<number, string> = {
  1: "TSS2_FEATURE_RC_LAYER",
  5: "TSS2_ESYS_RC_LAYER",
  6: "TSS2_FAPI_RC_LAYER",
  7: "TSS2_SYS_RC_LAYER",
  8: "TSS2_MU_RC_LAYER",
  10: "TSS2_TCTI_RC_LAYER",
  11: "TSS2_RESMGR_RC_LAYER",
  12: "TSS2_RESMGR_TPM_RC_LAYER",
};

/** Where a format-one error points. */
export type RcSubject = { kind: "parameter" | "handle" | "session"; index: number };

export interface DecodedRc {
  /** The whole response code. */
  code: number;
  /** Spec name of the base error, e.g. "TPM_RC_VALUE" (without the parameter number). */
  name: string;
  /** The code with the handle/parameter/session number and layer removed (e.g. 0x084 for TPM_RC_VALUE). */
  base: number;
  format: "format-zero" | "format-one" | "warning" | "tpm1.2" | "vendor" | "layer";
  /** For format-one codes that name one: which parameter, handle or session (1-based). */
  subject?: RcSubject;
  /** TSS layer name when bits 16-23 are set. */
  layer?: string;
  /** A sentence: the spec's meaning plus the subject. */
  detail: string;
}

export function decodeRc(rc: number): DecodedRc {
  const code = rc >>> 0;
  const layerNo = (code >>> 16) & 0xff;
  const low = code & 0xffff;
  if (code >>> 24 !== 0) {
    return { code, name: `TPM_RC 0x${hex8(code)}`, base: code, format: "layer", detail: `response code 0x${hex8(code)} is not a TPM 2.0 code` };
  }
  const inner = decodeTpmRc(low);
  if (layerNo === 0) return { code, ...inner };
  const layer = LAYERS[layerNo] ?? `TSS2 layer ${layerNo}`;
  // A resource manager layer wraps a TPM-style code (tpm2-abrmd: TSS2_RESMGR_RC_LAYER | TPM2_RC_x).
  return { code, ...inner, format: "layer", layer, detail: `${layer}: ${inner.detail}` };
}

function decodeTpmRc(low: number): Omit<DecodedRc, "code"> {
  if (low === 0) return { name: "TPM_RC_SUCCESS", base: 0, format: "format-zero", detail: "success" };
  if (low & RC_FMT1) {
    const n = low & 0x3f;
    const base = RC_FMT1 + n;
    const [name, meaning] = FMT1[n] ?? [`TPM_RC_FMT1+0x${n.toString(16).padStart(3, "0")}`, "unknown format-one error"];
    let subject: RcSubject | undefined;
    if (low & 0x40) subject = { kind: "parameter", index: (low >> 8) & 0xf };
    else if (low & 0x800) subject = { kind: "session", index: (low >> 8) & 0x7 };
    else if ((low >> 8) & 0x7) subject = { kind: "handle", index: (low >> 8) & 0x7 };
    if (subject && subject.index === 0) subject = undefined;
    const where = subject ? ` (${subject.kind} ${subject.index})` : "";
    return { name, base, format: "format-one", ...(subject ? { subject } : {}), detail: `${name}${where}: ${meaning}` };
  }
  if (!(low & RC_VER1)) {
    if (low === 0x01e) return { name: "TPM_RC_BAD_TAG", base: low, format: "tpm1.2", detail: "TPM_RC_BAD_TAG: the command's tag is not a TPM 2.0 tag" };
    return { name: `TPM 1.2 error 0x${low.toString(16)}`, base: low, format: "tpm1.2", detail: `TPM 1.2 style response code 0x${low.toString(16)}` };
  }
  if (low & 0x400) {
    return { name: `TPM_RC_VENDOR 0x${low.toString(16)}`, base: low, format: "vendor", detail: `vendor-defined response code 0x${low.toString(16)}` };
  }
  const n = low & 0x7f;
  if ((low & RC_WARN) === RC_WARN) {
    const [name, meaning] = WARN[n] ?? [`TPM_RC_WARN+0x${n.toString(16).padStart(3, "0")}`, "unknown warning"];
    return { name, base: RC_WARN + n, format: "warning", detail: `${name}: ${meaning}` };
  }
  const [name, meaning] = FMT0[n] ?? [`TPM_RC_VER1+0x${n.toString(16).padStart(3, "0")}`, "unknown format-zero error"];
  return { name, base: RC_VER1 + n, format: "format-zero", detail: `${name}: ${meaning}` };
}

function hex8(n: number): string {
  return n.toString(16).padStart(8, "0");
}

/** Base codes by name, for callers that test for one (`err.is("TPM_RC_RETRY")`). */
export const TPM_RC = {
  SUCCESS: 0x000,
  BAD_TAG: 0x01e,
  ...Object.fromEntries(Object.entries(FMT0).map(([n, [name]]) => [name.slice(7), RC_VER1 + Number(n)])),
  ...Object.fromEntries(Object.entries(FMT1).map(([n, [name]]) => [name.slice(7), RC_FMT1 + Number(n)])),
  ...Object.fromEntries(Object.entries(WARN).map(([n, [name]]) => [name.slice(7), RC_WARN + Number(n)])),
} as Readonly<Record<string, number>>;

/**
 * A TPM (or a resource manager in front of it) refused a command: `code` is the response code, `name` its spec
 * name (e.g. "TPM_RC_INTEGRITY", without the parameter number), `detail` what and where
 * ("TPM_RC_INTEGRITY (parameter 1): integrity check failed"), `command` the command that was refused.
 */
export class TpmError extends Error {
  override readonly name: string;
  readonly detail: string;
  readonly rc: DecodedRc;
  constructor(
    readonly code: number,
    readonly command: string,
  ) {
    const rc = decodeRc(code);
    super(`${command}: ${rc.detail} (0x${hex8(code >>> 0)})`);
    this.rc = rc;
    this.name = rc.name;
    this.detail = rc.detail;
  }
  get subject(): RcSubject | undefined {
    return this.rc.subject;
  }
  get isWarning(): boolean {
    return this.rc.format === "warning";
  }
  /** True when the base code is `rcName` (e.g. "TPM_RC_VALUE" matches TPM_RC_VALUE on any parameter). */
  is(rcName: string): boolean {
    return this.rc.name === rcName;
  }
}
