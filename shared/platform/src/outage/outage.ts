/**
 * A dependency outage, as opposed to a refusal or a defect: NetBox, the CA signer, a Kubernetes API server or SPIRE
 * did not answer (or answered 5xx). The step that met it changed nothing it cannot undo, so the caller may
 * retry the same request once the dependency is back: HTTP servers answer `503` with `Retry-After` and the
 * reason; loops retry with backoff.
 *
 * The adapters' own error types say when they mean an outage (`outage()`), so this module knows none of them
 * and every layer can ask `outageOf(e)`.
 */
export type OutageReason = "netbox-unavailable" | "signer-unavailable" | "kubernetes-unavailable" | "netbox-writes-pending" | "session-busy" | "server-busy" | "spire-unavailable";

/**
 * Why a step answered 503: a dependency is down (NetBox, the signer, a Kubernetes API server), NetBox does not
 * yet hold what fleetd recorded for this node (its queued writes — the outbox — are still being delivered; the
 * gates read NetBox and wait for it), another request is working on the same session right now, or the server is working on as many requests as it takes at once and this
 * one waited its longest for a turn (`server-busy`, http/stepGate.ts: its body was never read). SPIRE
 * (`spire-unavailable`) is never behind the attestation server's 503: the SPIRE sync is what calls it.
 */
export const OUTAGE_REASONS: readonly OutageReason[] = ["netbox-unavailable", "signer-unavailable", "kubernetes-unavailable", "netbox-writes-pending", "session-busy", "server-busy"];

export class Unavailable extends Error {
  override readonly name = "Unavailable";
  constructor(
    readonly reason: OutageReason,
    /** For logs and the answer: which call failed and how; never a secret, never a response body. */
    readonly detail: string,
    /** What the `Retry-After` header says. */
    readonly retryAfterSeconds = 5,
  ) {
    super(`${reason}: ${detail}`);
  }
}

/** An error type that can say it means an outage. */
export interface MaybeOutage {
  outage(): Unavailable | undefined;
}

function canSay(e: unknown): e is MaybeOutage {
  return typeof e === "object" && e !== null && typeof (e as { outage?: unknown }).outage === "function";
}

/** The outage `e` means, or undefined when it is anything else (a refusal, a bug, bad input). */
export function outageOf(e: unknown): Unavailable | undefined {
  if (e instanceof Unavailable) return e;
  if (canSay(e)) return e.outage();
  return undefined;
}
