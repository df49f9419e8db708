/** Refusals of the Tinkerbell/Rufio effects: a stable code for programs, a sentence naming the object for people. */
export type TinkerbellErrorCode =
  | "mac_not_canonical"
  | "no_proven_mac"
  | "invalid_input"
  | "image_not_pinned"
  | "template_invalid"
  | "not_ours"
  | "workflow_in_progress"
  | "credentials_unsupported"
  | "credentials_not_own"
  | "bmc_unattributed"
  | "install_disk_unattributed"
  | "mac_in_use"
  | "no_bmc"
  | "bad_response";

export class TinkerbellError extends Error {
  override readonly name = "TinkerbellError";
  constructor(
    readonly code: TinkerbellErrorCode,
    message: string,
  ) {
    super(message);
  }
}
