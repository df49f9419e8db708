/**
 * The attestation service: the three protocol steps behind one object that journals every refusal with the
 * failed checks and the evidence they concern. HTTP servers (talos-config-server) wrap it; it has no I/O of its
 * own besides its dependencies.
 */
import {
  ChallengeRequest,
  Confirm,
  Evidence,
  RenewChallengeRequest,
  RenewConfirm,
  RenewEvidence,
  Tpm12ChallengeRequest,
  Tpm12Evidence,
  type RenewChallengeResponse,
  type RenewConfirmResponse,
  type RenewEvidenceResponse,
  type ChallengeResponse,
  type ConfirmResponse,
  type EvidenceResponse,
  type Refusal,
  type Tpm12ChallengeResponse,
  type Tpm12EvidenceResponse,
} from "../messages.js";
import { randomUUID } from "node:crypto";
import { StepEffects } from "../../outbox/effects.js";
import { challenge } from "./challenge.js";
import { refusalJournal, requestHash } from "./step.js";
import { confirm } from "./confirm.js";
import { Refused, type ServerContext } from "./context.js";
import { evidence } from "./evidence.js";
import { outageOf } from "../../outage/outage.js";
import { challenge12, evidence12 } from "./tpm12.js";
import { renewChallenge, renewConfirm, renewEvidence } from "./renew.js";

/** A step's answer: its body, a refusal, or (503) a dependency outage with the seconds to wait before a retry. */
export type Outcome<T> = { ok: true; body: T } | { ok: false; status: number; body: Refusal; retryAfterSeconds?: number };

export class AttestationService {
  constructor(private readonly ctx: ServerContext) {}

  challenge(body: unknown, sourceAddress: string): Promise<Outcome<ChallengeResponse>> {
    return this.run("challenge", () => {
      const req = parse(ChallengeRequest, body);
      return challenge(this.ctx, req, sourceAddress, requestHash(body));
    });
  }

  evidence(body: unknown): Promise<Outcome<EvidenceResponse>> {
    return this.run("evidence", () => evidence(this.ctx, parse(Evidence, body), requestHash(body)));
  }

  confirm(body: unknown): Promise<Outcome<ConfirmResponse>> {
    return this.run("confirm", () => confirm(this.ctx, parse(Confirm, body), requestHash(body)));
  }

  /** The TPM 1.2 challenge (tpm12.ts): intake and wipe only, nothing is ever issued. Refusals are journalled alike. */
  challenge12(body: unknown, sourceAddress: string): Promise<Outcome<Tpm12ChallengeResponse>> {
    return this.run("tpm12 challenge", () => challenge12(this.ctx, parse(Tpm12ChallengeRequest, body), sourceAddress, requestHash(body)));
  }

  evidence12(body: unknown): Promise<Outcome<Tpm12EvidenceResponse>> {
    return this.run("tpm12 evidence", () => evidence12(this.ctx, parse(Tpm12Evidence, body), requestHash(body)));
  }

  /** Renewal with runtime attestation (renew.ts): refusals are journalled alike (rate-limited before possession is proven). */
  renewChallenge(body: unknown): Promise<Outcome<RenewChallengeResponse>> {
    return this.run("renew challenge", () => renewChallenge(this.ctx, parse(RenewChallengeRequest, body), requestHash(body)));
  }

  renewEvidence(body: unknown): Promise<Outcome<RenewEvidenceResponse>> {
    return this.run("renew evidence", () => renewEvidence(this.ctx, parse(RenewEvidence, body), requestHash(body)));
  }

  renewConfirm(body: unknown): Promise<Outcome<RenewConfirmResponse>> {
    return this.run("renew confirm", () => renewConfirm(this.ctx, parse(RenewConfirm, body), requestHash(body)));
  }

  private async run<T>(step: string, fn: () => Promise<T>): Promise<Outcome<T>> {
    try {
      return { ok: true, body: await fn() };
    } catch (e) {
      const outage = outageOf(e);
      if (outage) {
        // The step undid what it had begun (the session is usable again): the same request may be retried.
        this.ctx.onOutage?.(step, outage);
        return { ok: false, status: 503, retryAfterSeconds: outage.retryAfterSeconds, body: { error: "unavailable", reason: outage.reason, reasons: [{ check: outage.reason, detail: `${outage.reason.replace(/-/g, " ")}; nothing was spent: retry this request` }] } };
      }
      if (!(e instanceof Refused)) throw e;
      if (e.error !== "bad-request" && !e.journalled) {
        // queued in the store (the outbox delivers it): a NetBox outage loses no refusal's entry
        const effects = new StepEffects(`refusal:${randomUUID()}`);
        await refusalJournal(this.ctx, step, e, effects);
        await this.ctx.store.enqueue(effects.items, this.ctx.now().getTime());
        if (e.node) await this.ctx.outbox?.flush(e.node.deviceId).catch(() => false);
        this.ctx.outbox?.kick();
      }
      // The machine gets the checks and their details, never `internal` (inventory values for the journal).
      const reasons = e.reasons.map(({ internal: _i, ...r }) => r);
      return { ok: false, status: e.status, body: { error: e.error, reasons } };
    }
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
