/**
 * Request budgets, kept in the shared attestation store so every replica counts against the same budget:
 *  - install-code guesses per client address (a UUID is public, so never per UUID): a failure is charged
 *    atomically *before* the lookup and refunded when the code was right, so concurrent guesses cannot all pass a
 *    check made before any of them failed;
 *  - attestation requests (/v1/attest/*) per client address: each request is charged; past the budget, 429.
 * Client addresses come from `clientAddress` (trusted proxies honoured).
 */
import type { AttestationStore } from "@fleetd/platform/state";

export interface Budget {
  max: number;
  windowMs: number;
}

export class StoreLimiter {
  constructor(
    private readonly store: Pick<AttestationStore, "chargeLimit" | "refundLimit">,
    private readonly codes: Budget,
    private readonly attest: Budget,
  ) {}

  /** Charge one install-code attempt from `address`; false when its failure budget is spent. */
  async chargeCode(address: string, now: number): Promise<boolean> {
    return (await this.store.chargeLimit(`code:${address}`, now, this.codes.windowMs, this.codes.max)).allowed;
  }

  /** The attempt was right: it does not count as a failure. */
  refundCode(address: string, now: number): Promise<void> {
    return this.store.refundLimit(`code:${address}`, now, this.codes.windowMs);
  }

  /** Charge one attestation request from `address`; false when its budget is spent. */
  async chargeAttest(address: string, now: number): Promise<boolean> {
    return (await this.store.chargeLimit(`attest:${address}`, now, this.attest.windowMs, this.attest.max)).allowed;
  }
}
