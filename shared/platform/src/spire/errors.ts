/**
 * Errors of the SPIRE adapter. One class, a stable code, and the one question callers ask: is this an outage
 * (SPIRE did not answer, or could not do the work now: retry the same request later) or an answer (a refusal,
 * bad input, a mismatch of versions: retrying changes nothing)?
 */
import * as grpc from "@grpc/grpc-js";
import { type MaybeOutage, Unavailable } from "../outage/outage.js";

export const SPIRE_ERROR_CODES = [
  /** SPIRE did not answer or failed inside (gRPC UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, UNKNOWN, ABORTED). */
  "spire-unavailable",
  /** SPIRE answered with a refusal (PERMISSION_DENIED, INVALID_ARGUMENT, NOT_FOUND, UNIMPLEMENTED, …). */
  "spire-refused",
  /** SPIRE answered something this adapter cannot read (schema mismatch, wrong number of batch results). */
  "spire-bad-response",
  /** The caller asked for something the adapter refuses to send (checked before any RPC). */
  "spire-bad-request",
] as const;
export type SpireErrorCode = (typeof SPIRE_ERROR_CODES)[number];

/**
 * gRPC codes that mean "not now" rather than "no". INTERNAL and UNKNOWN are what SPIRE returns when its datastore
 * fails (`api.MakeErr(..., codes.Internal, ...)`), the gRPC form of an HTTP 5xx; ABORTED is a transaction
 * conflict. Everything else is an answer.
 */
const OUTAGE_CODES: ReadonlySet<number> = new Set([grpc.status.UNAVAILABLE, grpc.status.DEADLINE_EXCEEDED, grpc.status.INTERNAL, grpc.status.UNKNOWN, grpc.status.ABORTED]);

export function grpcCodeName(code: number): string {
  return (grpc.status as unknown as Record<number, string>)[code] ?? `code ${code}`;
}

export class SpireApiError extends Error implements MaybeOutage {
  override readonly name = "SpireApiError";
  constructor(
    readonly code: SpireErrorCode,
    /** The RPC, e.g. `Entry/BatchCreateEntry`. */
    readonly rpc: string,
    /** The gRPC status code, when the error came from one. */
    readonly grpcCode: number | undefined,
    readonly detail: string,
  ) {
    super(`SPIRE ${rpc}: ${grpcCode !== undefined ? `${grpcCodeName(grpcCode)}: ` : ""}${detail}`);
  }

  /** SPIRE (or its datastore) could not answer: an outage, not an answer. */
  outage(): Unavailable | undefined {
    if (this.code !== "spire-unavailable") return undefined;
    return new Unavailable("spire-unavailable", `${this.rpc}: SPIRE did not answer (${this.grpcCode !== undefined ? grpcCodeName(this.grpcCode) : "no status"}: ${this.detail})`);
  }
}

/** The adapter's error for a failed gRPC call. */
export function fromServiceError(rpc: string, e: unknown): SpireApiError {
  const code = typeof (e as { code?: unknown })?.code === "number" ? ((e as { code: number }).code) : undefined;
  const detail = typeof (e as { details?: unknown })?.details === "string" && (e as { details: string }).details !== "" ? (e as { details: string }).details : e instanceof Error ? e.message : String(e);
  // No gRPC status: the call failed inside this process before reaching SPIRE (a defect, not an outage).
  if (code === undefined) return new SpireApiError("spire-bad-request", rpc, undefined, detail);
  return new SpireApiError(OUTAGE_CODES.has(code) ? "spire-unavailable" : "spire-refused", rpc, code, detail);
}
