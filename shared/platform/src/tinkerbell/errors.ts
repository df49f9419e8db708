/** Refusals of the Tinkerbell/Rufio effects: a stable code for programs, a sentence naming the object for people. */
import { CodedError } from "../fleet/codedError.js";
export const TINKERBELL_ERROR_CODES = [
  "mac-not-canonical",
  "no-proven-mac",
  "invalid-input",
  "image-not-pinned",
  "template-invalid",
  "not-ours",
  "workflow-in-progress",
  "credentials-unsupported",
  "credentials-not-own",
  "bmc-unattributed",
  "install-disk-unattributed",
  "mac-in-use",
  "no-bmc",
  "bad-response",
] as const;
export type TinkerbellErrorCode = (typeof TINKERBELL_ERROR_CODES)[number];

export class TinkerbellError extends CodedError<TinkerbellErrorCode> {
  override readonly name = "TinkerbellError";
}
