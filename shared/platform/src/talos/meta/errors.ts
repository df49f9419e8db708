/**
 * Errors of the META writer. Each has a stable `code` for programs and a message naming the evidence,
 * e.g. `gpt-invalid: no valid GPT (sector size 512): primary header at LBA 1: header CRC32 ...`.
 */
export type MetaErrorCode =
  // the disk itself
  | "disk-io"
  | "disk-too-small"
  | "disk-is-partition"
  // GPT
  | "gpt-no-protective-mbr"
  | "gpt-not-found"
  | "gpt-invalid"
  // the META partition
  | "meta-not-found"
  | "meta-ambiguous"
  | "meta-out-of-range"
  | "meta-size"
  // the Talos ADV inside META
  | "adv-corrupt"
  | "adv-malformed"
  | "adv-overflow"
  | "adv-verify"
  // the value to write
  | "code-invalid";

export class MetaError extends Error {
  override readonly name = "MetaError";
  constructor(
    readonly code: MetaErrorCode,
    readonly detail: string,
    /** Sub-reasons, e.g. why the primary and the backup GPT header were each refused. */
    readonly causes: readonly { where: string; code: string; detail: string }[] = [],
  ) {
    super(`${code}: ${detail}${causes.length ? ": " + causes.map((c) => `${c.where}: ${c.detail}`).join("; ") : ""}`);
  }
}
