/** Refusals of the client's own steps (not TPM response codes, not transport failures). */
export type TpmClientErrorCode = "nv-unreadable" | "pcr-unavailable" | "bad-input" | "unexpected";

export class TpmClientError extends Error {
  override readonly name = "TpmClientError";
  constructor(
    readonly code: TpmClientErrorCode,
    readonly detail: string,
  ) {
    super(detail);
  }
}
