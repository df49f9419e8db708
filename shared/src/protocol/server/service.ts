/**
 * The attestation service: the three protocol steps behind one object that journals every refusal with the
 * failed checks and the evidence they concern. HTTP servers (talos-config-server) wrap it; it has no I/O of its
 * own besides its dependencies.
 */
import { ChallengeRequest, Confirm, Evidence, type ChallengeResponse, type ConfirmResponse, type EvidenceResponse, type Refusal } from "../messages.js";
import { challenge } from "./challenge.js";
import { confirm } from "./confirm.js";
import { Refused, type ServerContext } from "./context.js";
import { evidence } from "./evidence.js";

export type Outcome<T> = { ok: true; body: T } | { ok: false; status: number; body: Refusal };

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

  private async run<T>(step: string, fn: () => Promise<T>): Promise<Outcome<T>> {
    try {
      return { ok: true, body: await fn() };
    } catch (e) {
      if (!(e instanceof Refused)) throw e;
      if (e.error !== "bad-request") {
        await this.ctx.journal.record(e.node, {
          kind: e.error === "pending" ? "warning" : "danger",
          summary: `${step} refused: ${e.reasons.map((r) => r.check).join(", ")}`,
          reasons: e.reasons,
        });
      }
      return { ok: false, status: e.status, body: { error: e.error, reasons: e.reasons } };
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
