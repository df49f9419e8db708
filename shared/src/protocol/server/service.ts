/**
 * The attestation service: the three protocol steps behind one object that journals every refusal with the
 * failed checks and the evidence they concern. HTTP servers (talos-config-server) wrap it; it has no I/O of its
 * own besides its dependencies.
 */
import {
  ChallengeRequest,
  Confirm,
  Evidence,
  Tpm12ChallengeRequest,
  Tpm12Evidence,
  type ChallengeResponse,
  type ConfirmResponse,
  type EvidenceResponse,
  type Refusal,
  type Tpm12ChallengeResponse,
  type Tpm12EvidenceResponse,
} from "../messages.js";
import { challenge } from "./challenge.js";
import { confirm } from "./confirm.js";
import { Refused, type ServerContext } from "./context.js";
import { evidence } from "./evidence.js";
import { outageOf } from "../../outage/outage.js";
import { challenge12, evidence12 } from "./tpm12.js";

/** A step's answer: its body, a refusal, or (503) a dependency outage with the seconds to wait before a retry. */
export type Outcome<T> = { ok: true; body: T } | { ok: false; status: number; body: Refusal; retryAfterSeconds?: number };

export class AttestationService {
  constructor(private readonly ctx: ServerContext) {}

  challenge(body: unknown, sourceAddress: string): Promise<Outcome<ChallengeResponse>> {
    return this.run("challenge", () => {
      const req = parse(ChallengeRequest, body);
      return challenge(this.ctx, req, sourceAddress);
    });
  }

  evidence(body: unknown): Promise<Outcome<EvidenceResponse>> {
    return this.run("evidence", () => evidence(this.ctx, parse(Evidence, body)));
  }

  confirm(body: unknown): Promise<Outcome<ConfirmResponse>> {
    return this.run("confirm", () => confirm(this.ctx, parse(Confirm, body)));
  }

  /** The TPM 1.2 challenge (tpm12.ts): intake and wipe only, nothing is ever issued. Refusals are journalled alike. */
  challenge12(body: unknown, sourceAddress: string): Promise<Outcome<Tpm12ChallengeResponse>> {
    return this.run("tpm12 challenge", () => challenge12(this.ctx, parse(Tpm12ChallengeRequest, body), sourceAddress));
  }

  evidence12(body: unknown): Promise<Outcome<Tpm12EvidenceResponse>> {
    return this.run("tpm12 evidence", () => evidence12(this.ctx, parse(Tpm12Evidence, body)));
  }

  private async run<T>(step: string, fn: () => Promise<T>): Promise<Outcome<T>> {
    try {
      return { ok: true, body: await fn() };
    } catch (e) {
      const outage = outageOf(e);
      if (outage) {
        // The step undid what it had begun (the session is usable again): the same request may be retried.
        this.ctx.onOutage?.(step, outage);
        return { ok: false, status: 503, retryAfterSeconds: outage.retryAfterSeconds, body: { error: "unavailable", reason: outage.reason, reasons: [{ check: outage.reason, detail: `${outage.reason.replace("-", " ")}; nothing was spent: retry this request` }] } };
      }
      if (!(e instanceof Refused)) throw e;
      if (e.error !== "bad-request") {
        try {
          await this.record(step, e);
        } catch (j) {
          // NetBox down: the refusal still goes to the machine (a 500 would hide it); the lost entry is counted
          const lost = outageOf(j);
          if (!lost) throw j;
          this.ctx.onJournalLost?.(step, e.reasons, lost);
        }
      }
      // The machine gets the checks and their details, never `internal` (inventory values for the journal).
      const reasons = e.reasons.map(({ internal: _i, ...r }) => r);
      return { ok: false, status: e.status, body: { error: e.error, reasons } };
    }
  }

  /**
   * Journal a refusal. Before credential activation verified (unauthenticated: a public EK certificate is all the
   * caller showed) a device gets at most one entry per window, however many refusals are made in its name — the
   * rest are counted (`suppressed`) so an operator still sees that it goes on; unknown machines have no device.
   */
  private async record(step: string, e: Refused): Promise<void> {
    const checks = e.reasons.map((r) => r.check).join(", ");
    if (e.node && !e.authenticated && e.error !== "pending") {
      const w = this.ctx.settings.unauthenticatedJournalWindowMs;
      const charge = await this.ctx.store.chargeLimit(`journal:${e.node.deviceId}`, this.ctx.now().getTime(), w, 1);
      this.ctx.onUnauthenticatedRefusal?.(step, e.reasons);
      if (!charge.allowed) return;
      await this.ctx.journal.record(e.node, {
        kind: "warning",
        summary: `${step} refused before the caller proved it holds this node's TPM (unauthenticated; at most one such entry per ${w >= 60_000 ? `${Math.round(w / 60_000)} min` : `${Math.max(1, Math.round(w / 1000))} s`}, the rest are counted in fleetd_attest_unauthenticated_refusals_total): ${checks}`,
        reasons: e.reasons,
      });
      return;
    }
    await this.ctx.journal.record(e.node, { kind: e.error === "pending" ? "warning" : "danger", summary: `${step} refused: ${checks}`, reasons: e.reasons });
  }
}

function parse<T>(schema: { safeParse(v: unknown): { success: true; data: T } | { success: false; error: { issues: { path: PropertyKey[]; message: string }[] } } }, body: unknown): T {
  const r = schema.safeParse(body);
  if (r.success) return r.data;
  throw new Refused(
    400,
    "bad-request",
    r.error.issues.slice(0, 10).map((i) => ({ check: "request.shape", detail: `${i.path.map(String).join(".") || "<body>"}: ${i.message}` })),
  );
}
