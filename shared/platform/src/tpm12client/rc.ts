/**
 * TPM 1.2 return codes (TPM Main Part 2 §16): TPM_BASE + n for errors, TPM_NON_FATAL (0x800) + n for "try
 * again" conditions. A TPM 1.2 refusal is a Tpm12Error with the spec's name and its meaning.
 */
const ERRORS: Record<number, [string, string]> = {
  1: ["TPM_AUTHFAIL", "authentication failed (wrong owner, SRK or key secret)"],
  2: ["TPM_BADINDEX", "the index to a PCR, DIR or other register is incorrect"],
  3: ["TPM_BAD_PARAMETER", "one or more parameters is bad"],
  5: ["TPM_CLEAR_DISABLED", "the clear disable flag is set"],
  6: ["TPM_DEACTIVATED", "the TPM is deactivated"],
  7: ["TPM_DISABLED", "the TPM is disabled"],
  8: ["TPM_DISABLED_CMD", "the command is disabled (e.g. TPM_ReadPubek after an owner was installed)"],
  9: ["TPM_FAIL", "the operation failed"],
  10: ["TPM_BAD_ORDINAL", "the ordinal was unknown or inconsistent"],
  12: ["TPM_INVALID_KEYHANDLE", "the key handle cannot be interpreted"],
  13: ["TPM_KEYNOTFOUND", "the key handle points to an invalid key"],
  14: ["TPM_INAPPROPRIATE_ENC", "unacceptable encryption scheme"],
  16: ["TPM_INVALID_PCR_INFO", "invalid PCR information"],
  17: ["TPM_NOSPACE", "no room to load a key"],
  18: ["TPM_NOSRK", "there is no SRK (no owner)"],
  20: ["TPM_OWNER_SET", "an owner is already installed"],
  21: ["TPM_RESOURCES", "the TPM has insufficient internal resources"],
  23: ["TPM_SIZE", "the TPM does not have the space to perform the operation"],
  24: ["TPM_WRONGPCRVAL", "the named PCR value does not match the current PCR value"],
  25: ["TPM_BAD_PARAM_SIZE", "the paramSize argument has the wrong value"],
  29: ["TPM_AUTH2FAIL", "the second authorization failed (owner secret)"],
  30: ["TPM_BADTAG", "the tag value sent for a command is invalid"],
  33: ["TPM_DECRYPT_ERROR", "the decryption failed (e.g. a blob encrypted to another EK)"],
  34: ["TPM_INVALID_AUTHHANDLE", "invalid authorization handle"],
  35: ["TPM_NO_ENDORSEMENT", "the TPM has no EK installed"],
  36: ["TPM_INVALID_KEYUSAGE", "the usage of a key is not allowed"],
  37: ["TPM_WRONG_ENTITYTYPE", "the submitted entity type is not allowed"],
  38: ["TPM_INVALID_POSTINIT", "the command was received in the wrong sequence relative to TPM_Init and TPM_Startup"],
  39: ["TPM_INAPPROPRIATE_SIG", "signed data cannot include additional DER information"],
  40: ["TPM_BAD_KEY_PROPERTY", "the key properties in TPM_KEY_PARMS are not supported"],
  42: ["TPM_BAD_SCHEME", "the signature or encryption scheme is incorrect or not permitted"],
  43: ["TPM_BAD_DATASIZE", "the size of the data (or blob) is not correct"],
  46: ["TPM_BAD_VERSION", "bad version"],
  59: ["TPM_AUTH_CONFLICT", "NV area requires authorization"],
  60: ["TPM_AREA_LOCKED", "NV area is locked"],
  62: ["TPM_NOOPERATOR", "no operator auth is set"],
  80: ["TPM_DEFEND_LOCK_RUNNING", "the TPM is defending against dictionary attacks"],
};
const NON_FATAL: Record<number, [string, string]> = {
  0: ["TPM_RETRY", "the TPM is too busy to respond; retry"],
  1: ["TPM_NEEDS_SELFTEST", "self-test needed"],
  2: ["TPM_DOING_SELFTEST", "the TPM is doing a self-test"],
  3: ["TPM_DEFEND_LOCK_RUNNING", "the TPM is defending against dictionary attacks and is in a time-out period"],
};

export function decodeRc12(code: number): { name: string; meaning: string } {
  if (code & 0x800) {
    const [name, meaning] = NON_FATAL[code & 0x7ff] ?? [`TPM_NON_FATAL+${code & 0x7ff}`, "unknown non-fatal condition"];
    return { name, meaning };
  }
  const [name, meaning] = ERRORS[code] ?? [`TPM 1.2 error 0x${code.toString(16)}`, code > 0x400 ? "vendor-specific error" : "unknown error"];
  return { name, meaning };
}

/** A TPM 1.2 answered a command with a non-zero return code. */
export class Tpm12Error extends Error {
  override readonly name = "Tpm12Error";
  readonly rcName: string;
  readonly detail: string;
  constructor(
    readonly code: number,
    readonly command: string,
  ) {
    const d = decodeRc12(code);
    super(`${command}: ${d.name} (0x${code.toString(16)}): ${d.meaning}`);
    this.rcName = d.name;
    this.detail = d.meaning;
  }
}

/** A response whose authorization HMAC does not verify: someone between the TPM and us changed it. */
export class Tpm12AuthError extends Error {
  override readonly name = "Tpm12AuthError";
  constructor(readonly command: string, readonly session: number) {
    super(`${command}: the TPM's response authorization ${session} does not verify (response altered in transit, or the wrong secret)`);
  }
}
