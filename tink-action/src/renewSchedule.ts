/**
 * When the node agent attests next, and what its own verdict is — pure functions of the certificate, the clock and
 * the run of outcomes, so the tests can walk through weeks in microseconds.
 *
 *  - Renewal is due at two thirds of the LDevID's lifetime (pki/renewal.ts `renewalTime`, the server's own rule).
 *    After a pass the next attempt is at that time; one already past (the server found it not due, clocks apart) is
 *    asked again no sooner than the backoff base.
 *  - A failed attempt (server outage past its budget, network, TPM, a refusal other than the verdict) is retried
 *    with capped, jittered exponential backoff (outage/backoff.ts `backoffDelayMs`).
 *  - N consecutive failures (FLEETD_RENEW_FAILURES) make the node's own verdict `failed`; from then on it retries
 *    at the cap (jittered) and keeps doing so until a pass.
 *  - A refusal by verdict (403: the runtime quote missed the class profile, the device is quarantined, retired…)
 *    makes the verdict `failed` at once and is retried only at the cap: it does not change by asking again, an
 *    operator releases it in NetBox.
 */
import { renewalDue, renewalTime } from "@fleetd/platform/pki";
import { backoffDelayMs } from "@fleetd/platform/outage";
import type { RenewPurpose } from "@fleetd/platform/protocol";

export interface ScheduleSettings {
  failuresForVerdict: number;
  backoff: { baseMs: number; capMs: number };
}

export type NodeVerdict = "unknown" | "pass" | "failed";

export interface AgentState {
  consecutiveFailures: number;
  /** The last attempt ended in a refusal by verdict (403). */
  refused: boolean;
  verdict: NodeVerdict;
}

export const INITIAL_STATE: AgentState = { consecutiveFailures: 0, refused: false, verdict: "unknown" };

export type Outcome = { kind: "pass" } | { kind: "refused" } | { kind: "failed" };

/** What to ask for now: `renew` when the certificate is due, else a runtime attestation only. */
export function purposeFor(ldevidCertificate: Uint8Array, now: Date): RenewPurpose {
  return renewalDue(ldevidCertificate, now) ? "renew" : "attest";
}

/** The state after an attempt's outcome. */
export function nextState(s: AgentState, o: Outcome, st: ScheduleSettings): AgentState {
  if (o.kind === "pass") return { consecutiveFailures: 0, refused: false, verdict: "pass" };
  const consecutiveFailures = s.consecutiveFailures + 1;
  const refused = o.kind === "refused";
  return { consecutiveFailures, refused, verdict: refused || consecutiveFailures >= st.failuresForVerdict ? "failed" : s.verdict };
}

/** Milliseconds until the next attempt, given the state after the last one (`random` in [0, 1)). */
export function delayAfter(s: AgentState, ldevidCertificate: Uint8Array, now: Date, st: ScheduleSettings, random: number): number {
  if (s.consecutiveFailures === 0) {
    const until = renewalTime(ldevidCertificate).getTime() - now.getTime();
    return Math.max(until, st.backoff.baseMs);
  }
  // at the cap: refused, or the verdict failed already (the attempt number past the cap's exponent)
  const atCap = s.refused || s.consecutiveFailures >= st.failuresForVerdict;
  return backoffDelayMs(atCap ? 64 : s.consecutiveFailures, random, st.backoff);
}
