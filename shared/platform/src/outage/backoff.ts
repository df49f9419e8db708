/**
 * Exponential backoff (the action waiting while it is pending, the outbox retrying a delivery, netbox-script retrying
 * a failed job and waiting out an outage at startup), capped, with jitter so a rack of machines booted together does
 * not knock in step. The n-th wait (1-based) is drawn from
 * [d/2, d] with d = min(cap, base·2^(n-1)).
 */
export interface BackoffOptions {
  baseMs: number;
  capMs: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 1000, capMs: 30_000 };

/** `random` in [0, 1) (Math.random in the action; fixed in tests). */
export function backoffDelayMs(attempt: number, random: number, opts: BackoffOptions = DEFAULT_BACKOFF): number {
  const n = Number.isFinite(attempt) ? Math.max(1, Math.floor(attempt)) : 1;
  const r = Number.isFinite(random) ? Math.min(Math.max(random, 0), 1) : 1;
  const d = Math.min(opts.capMs, opts.baseMs * 2 ** Math.min(n - 1, 30));
  return Math.round(d / 2 + (r * d) / 2);
}
