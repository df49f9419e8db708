/**
 * A verdict is data: which checks failed, on which evidence. The CLI, the API, NetBox journal entries and
 * logs all print this same shape.
 */
export interface Reason {
  /** Stable machine-readable name of the check, e.g. "quote.extraData". */
  check: string;
  /** Human sentence naming the evidence. */
  detail: string;
  pcr?: number;
  event?: number;
  /** What the inventory holds, for the NetBox journal only: never sent to the machine (it may name the node). */
  internal?: string;
}

export interface Verdict {
  verdict: "pass" | "fail";
  reasons: Reason[];
}

/** Collects failed checks; `verdict()` passes only when none failed and at least one check ran. */
export class Checks {
  readonly reasons: Reason[] = [];
  private ran = 0;

  /** Record a check; `ok === false` adds the reason. Returns `ok`. */
  check(ok: boolean, check: string, detail: string, extra: Omit<Reason, "check" | "detail"> = {}): boolean {
    this.ran++;
    if (!ok) this.reasons.push({ check, detail, ...extra });
    return ok;
  }

  fail(check: string, detail: string, extra: Omit<Reason, "check" | "detail"> = {}): false {
    this.check(false, check, detail, extra);
    return false;
  }

  get ok(): boolean {
    return this.reasons.length === 0;
  }

  verdict(): Verdict {
    return { verdict: this.ran > 0 && this.reasons.length === 0 ? "pass" : "fail", reasons: [...this.reasons] };
  }
}

export function formatReasons(reasons: Reason[]): string {
  return reasons
    .map((r) => {
      const where = [r.pcr !== undefined ? `PCR ${r.pcr}` : "", r.event !== undefined ? `event ${r.event}` : ""].filter(Boolean).join(", ");
      return `${r.check}${where ? ` (${where})` : ""}: ${r.detail}`;
    })
    .join("\n");
}
