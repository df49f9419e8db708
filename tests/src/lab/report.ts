/** The lab's readable report: numbered steps with their outcome and the evidence they concern. */
export class Report {
  private readonly rows: { step: string; ok: boolean; detail: string; ms: number }[] = [];
  private readonly t0 = performance.now();

  constructor(readonly title: string) {
    process.stdout.write(`\n${title}\n${"=".repeat(title.length)}\n`);
  }

  /** Run a step, print its outcome as it finishes (long work shows progress). */
  async step(step: string, fn: () => Promise<string> | string): Promise<void> {
    if (process.stdout.isTTY) process.stdout.write(`  … ${step}`);
    const t = performance.now();
    try {
      const detail = await fn();
      this.push(step, true, detail, performance.now() - t);
    } catch (e) {
      this.push(step, false, (e as Error).message, performance.now() - t);
    }
  }

  /** A step that must be refused: passes when `fn` reports a refusal naming `check`. */
  async refusal(step: string, check: RegExp, fn: () => Promise<string[]> | string[]): Promise<void> {
    await this.step(step, async () => {
      const reasons = await fn();
      if (reasons.length === 0) throw new Error("accepted, but it must be refused");
      const hit = reasons.find((r) => check.test(r));
      if (!hit) throw new Error(`refused for another reason: ${reasons.join("; ")}`);
      return `refused: ${hit}`;
    });
  }

  private push(step: string, ok: boolean, detail: string, ms: number): void {
    this.rows.push({ step, ok, detail, ms });
    const mark = ok ? "\u2713" : "\u2717";
    if (process.stdout.isTTY) process.stdout.write("\r\x1b[K");
    process.stdout.write(`  ${mark} ${step} (${ms.toFixed(0)} ms)\n      ${detail.split("\n").join("\n      ")}\n`);
  }

  /** The final table (a row per step: outcome, seconds, the step's first words) and the count. */
  finish(): boolean {
    const failed = this.rows.filter((r) => !r.ok).length;
    const secs = ((performance.now() - this.t0) / 1000).toFixed(1);
    const width = Math.min(100, Math.max(...this.rows.map((r) => r.step.length), 4));
    const cut = (t: string) => (t.length > width ? `${t.slice(0, width - 1)}…` : t.padEnd(width));
    const lines = [`\n  #   ok  ${"seconds".padStart(8)}  ${cut("step")}`, ...this.rows.map((r, i) => `  ${String(i + 1).padStart(2)}  ${r.ok ? "\u2713" : "\u2717"}   ${(r.ms / 1000).toFixed(1).padStart(8)}  ${cut(r.step)}`)];
    process.stdout.write(`${lines.map((l) => l.trimEnd()).join("\n")}\n\n${this.rows.length - failed} of ${this.rows.length} steps as expected in ${secs} s\n`);
    return failed === 0;
  }
}
