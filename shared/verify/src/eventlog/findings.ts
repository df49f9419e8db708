/**
 * What interpreting a log found wrong or noteworthy. Interpretation never decides a verdict: a policy turns
 * `error` findings in the PCRs it enforces into refusal reasons and reports the rest.
 */
export interface Finding {
  /** Stable code, e.g. "event-digest", "separator-disguised", "uefi-debug-mode". */
  check: string;
  severity: "error" | "warning";
  pcr?: number;
  event?: number;
  detail: string;
}

export class Findings {
  readonly list: Finding[] = [];
  error(check: string, detail: string, at: { pcr?: number; event?: number } = {}): void {
    this.list.push({ check, severity: "error", ...at, detail });
  }
  warning(check: string, detail: string, at: { pcr?: number; event?: number } = {}): void {
    this.list.push({ check, severity: "warning", ...at, detail });
  }
}
