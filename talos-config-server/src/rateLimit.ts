/**
 * Per-source-address failure budget for install-code guesses (a UUID is public, so the limit is per address,
 * never per UUID). A fixed window with a small table; the oldest entries go first when it is full.
 */
export class FailureLimiter {
  private readonly hits = new Map<string, { count: number; windowStart: number }>();

  constructor(
    private readonly maxFailures: number,
    private readonly windowMs: number,
    private readonly maxAddresses = 10_000,
  ) {}

  /** True when this address may still try. */
  allowed(address: string, now: number): boolean {
    const h = this.hits.get(address);
    if (!h || now - h.windowStart >= this.windowMs) return true;
    return h.count < this.maxFailures;
  }

  fail(address: string, now: number): void {
    const h = this.hits.get(address);
    if (!h || now - h.windowStart >= this.windowMs) {
      this.hits.delete(address);
      if (this.hits.size >= this.maxAddresses) {
        const oldest = this.hits.keys().next().value;
        if (oldest !== undefined) this.hits.delete(oldest);
      }
      this.hits.set(address, { count: 1, windowStart: now });
    } else {
      h.count++;
    }
  }
}
