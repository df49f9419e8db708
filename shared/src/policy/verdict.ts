/**
 * Verdicts are data (design/style.md §2): the same object is printed by the CLI, returned by the API and
 * written to NetBox journal entries.
 */
export interface Reason {
  /** Stable code of the check that failed, e.g. "secure-boot", "authority", "pcr-replay", "event-digest". */
  check: string;
  pcr?: number;
  event?: number;
  detail: string;
}

export interface Verdict {
  verdict: "pass" | "fail";
  profile: string;
  reasons: Reason[];
  /** What was noticed without failing the verdict. */
  warnings: Reason[];
}
