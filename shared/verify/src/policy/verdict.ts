/**
 * Verdicts are data (design/style.md §2): the same object is printed by the CLI, returned by the API and
 * written to NetBox journal entries.
 */
import type { Reason } from "../attest/verdict.js";

/** The one reason shape (check codes here are e.g. "secure-boot", "authority", "pcr-replay", "event-digest"). */
export type { Reason };

export interface PolicyVerdict {
  verdict: "pass" | "fail";
  profile: string;
  reasons: Reason[];
  /** What was noticed without failing the verdict. */
  warnings: Reason[];
}
