/**
 * The frame of a step that works on a session (evidence, confirm): the session is claimed — not spent — for the
 * one request; the step then either commits its outcome (the session moves on, and what the outcome released
 * and must tell NetBox is recorded with it, in one store transaction: AttestationStore.commit) or, when it
 * stops before that (a dependency outage, anything unexpected), the claim is released and the session is usable
 * again until it expires: the machine's retry of the same request succeeds once the dependency is back.
 *
 * A step's answer (or its refusal) is kept with the session. The same request sent again — the machine did not
 * see the answer: a lost connection, a restarted server — gets that answer again, and nothing is done twice.
 * What such an answer holds is the machine's own (certificates; a code only its TPM can unwrap).
 */
import { createHash, randomUUID } from "node:crypto";
import { StepEffects } from "../../outbox/effects.js";
import { Unavailable } from "../../outage/outage.js";
import type { SessionRecord, SessionState, StepRecord } from "../../state/store.js";
import type { Reason } from "@fleetd/verify/attest";
import { Refused, type ServerContext } from "./context.js";

export type StepName = "evidence" | "confirm" | "tpm12-evidence" | "renew-evidence" | "renew-confirm";

/** What a session keeps of each step's answer: the request it answered (SHA-256) and the answer or refusal. */
export interface Answer<T> {
  request: string;
  response?: T;
  refused?: { status: Refused["status"]; error: Refused["error"]; reasons: Reason[] };
}
type Answers = Partial<Record<StepName | "challenge", Answer<unknown>>>;

/** SHA-256 of a request body as the server received it (a retry sends the same bytes, so the same JSON). */
export function requestHash(body: unknown): string {
  return createHash("sha256").update(JSON.stringify(body) ?? "").digest("hex");
}

export function answersOf(session: Pick<SessionRecord, "data">): Answers {
  return (session.data["answers"] ?? {}) as Answers;
}

/** The answer kept for this request, replayed: its response, or its refusal (already journalled). */
export function replay<T>(answer: Answer<unknown> | undefined, request: string, node: SessionRecord["node"]): T | undefined {
  if (!answer || answer.request !== request) return undefined;
  if (answer.refused) throw new Refused(answer.refused.status, answer.refused.error, answer.refused.reasons, node, true, true);
  return answer.response as T;
}

/** One request's claim on a session, and what it will record when it commits. */
export class ClaimedStep {
  readonly effects: StepEffects;
  private committed = false;

  constructor(
    readonly ctx: ServerContext,
    readonly session: SessionRecord,
    readonly name: StepName,
    readonly request: string,
    readonly claimer: string,
  ) {
    this.effects = new StepEffects(`${session.id}:${name}`);
  }

  get isCommitted(): boolean {
    return this.committed;
  }

  /**
   * Commit: the session moves to `to` with `data`, the answer kept with it, and `parts` (what the outcome
   * released) and this step's effects recorded in the same transaction; the outbox is told to deliver.
   *
   * `deliver: "fields"` answers once NetBox holds the step's field and status writes, without waiting for its
   * journal entries: for a step whose next step follows at once (an evidence that issued certificates, which a
   * confirm proves). The entries are write-ahead in the store — a restart delivers them — and they may linger
   * (effects.ts) to go with the next step's in one request. Field writes are still awaited: not every next
   * reader flushes the outbox first (a new session's challenge reads the device and its change log), and one
   * that read NetBox mid-write would refuse on attribution.
   */
  async commit<T>(to: SessionState, data: Record<string, unknown>, answer: Omit<Answer<T>, "request">, parts: Omit<StepRecord, "session" | "outbox"> = {}, deliver: "all" | "fields" = "all"): Promise<void> {
    const answers: Answers = { ...answersOf({ data }), [this.name]: { request: this.request, ...answer } };
    const ok = await this.ctx.store.commit(
      { session: { id: this.session.id, claimer: this.claimer, to, data: { ...data, answers } }, ...parts, outbox: this.effects.items },
      this.ctx.now().getTime(),
    );
    if (!ok) {
      // the claim went stale and another request took the session over: it decides; this one releases nothing
      throw new Refused(409, "refused", [{ check: "session.claimLost", detail: "this request took too long and another one took the session over; nothing was released by this one" }], this.session.node);
    }
    this.committed = true;
    // NetBox hears of it before the machine does, when NetBox is up (as it always did); when it is down the
    // answer goes out anyway — the outbox delivers later, and the next step's gates wait for it
    await this.ctx.outbox?.flush(this.session.node.deviceId, { journal: deliver === "all" }).catch(() => false);
    this.ctx.outbox?.kick();
  }

  /**
   * A refusal that spends the session: its journal entry goes with the commit (unless the step wrote its own:
   * `e.journalled`), with `parts` (e.g. a runtime verdict); the refusal is thrown.
   */
  async refuse(e: Refused, to: SessionState, parts: Omit<StepRecord, "session" | "outbox"> = {}): Promise<never> {
    if (!e.journalled) await refusalJournal(this.ctx, this.name.replace(/-/g, " "), e, this.effects); // as the service names the step
    await this.commit(to, this.session.data, { refused: { status: e.status, error: e.error, reasons: e.reasons } }, parts);
    throw e.recorded();
  }
}

/**
 * Claim the session `sessionId` in state `from` for this request, run `step`, and release the claim if it did
 * not commit. A session another request holds is a 503 `session-busy` (the same request, retried, waits for
 * it); one that has moved on (or expired) replays the answer kept for this same request, else `moved` says why.
 */
export async function withClaim<T>(
  ctx: ServerContext,
  a: { sessionId: string; name: StepName; from: SessionState; request: string; moved: (session: SessionRecord, why: "state" | "expired") => Refused },
  step: (s: ClaimedStep) => Promise<T>,
): Promise<T> {
  const claimer = randomUUID();
  const c = await ctx.store.claimSession(a.sessionId, a.from, claimer, ctx.now().getTime(), ctx.settings.claimStaleMs ?? DEFAULT_CLAIM_STALE_MS);
  if (!c.ok) {
    if (c.why === "unknown" || !c.session) throw new Refused(404, "expired", [{ check: "session.unknown", detail: "no such session (expired, used, or never issued)" }]);
    const kept = replay<T>(answersOf(c.session)[a.name], a.request, c.session.node);
    if (kept !== undefined) return kept;
    if (c.why === "busy") throw new Unavailable("session-busy", "another request is working on this session now; nothing was spent", 1);
    throw a.moved(c.session, c.why);
  }
  const s = new ClaimedStep(ctx, c.session, a.name, a.request, claimer);
  try {
    return await step(s);
  } finally {
    if (!s.isCommitted) await ctx.store.releaseSession(a.sessionId, claimer).catch(() => undefined);
  }
}

/**
 * How long an evidence's journal entry waits for its confirm (commit `deliver: "fields"`): the confirm's commit
 * delivers it with its own entries, in one request; without a confirm it is delivered on its own after this.
 */
export const JOURNAL_LINGER_MS = 10_000;

/** A claim older than this belongs to a request whose process died (a step takes seconds). */
export const DEFAULT_CLAIM_STALE_MS = 60_000;

/**
 * A refusal's journal entries, added to `effects`. Before credential activation verified (unauthenticated: a
 * public EK certificate is all the caller showed) a device gets at most one entry per window, however many
 * refusals are made in its name — the rest are counted so an operator still sees that it goes on; unknown
 * machines have no device.
 */
export async function refusalJournal(ctx: ServerContext, step: string, e: Refused, effects: StepEffects): Promise<void> {
  const checks = e.reasons.map((r) => r.check).join(", ");
  if (e.node && !e.authenticated && e.error !== "pending") {
    const w = ctx.settings.unauthenticatedJournalWindowMs;
    const charge = await ctx.store.chargeLimit(`journal:${e.node.deviceId}`, ctx.now().getTime(), w, 1);
    ctx.onUnauthenticatedRefusal?.(step, e.reasons);
    if (!charge.allowed) return;
    effects.journal(e.node, {
      kind: "warning",
      summary: `${step} refused before the caller proved it holds this node's TPM (unauthenticated; at most one such entry per ${w >= 60_000 ? `${Math.round(w / 60_000)} min` : `${Math.max(1, Math.round(w / 1000))} s`}, the rest are counted in fleetd_attestation_unauthenticated_refusals_total): ${checks}`,
      reasons: e.reasons,
    });
    return;
  }
  effects.journal(e.node, { kind: e.error === "pending" ? "warning" : "danger", summary: `${step} refused: ${checks}`, reasons: e.reasons });
}
