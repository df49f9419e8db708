/**
 * The action's HTTPS client for the attestation API. The server's CA is pinned: node:https with `ca` set to the
 * configured certificates only, so no system root (nor NODE_EXTRA_CA_CERTS) can vouch for another server.
 * Plain HTTP exists for loopback tests (config.ts refuses it without FLEETD_ALLOW_HTTP=lab).
 *
 * Every answer is checked here (zod): a 200 must have the step's shape, anything else must be a refusal
 * `{ error, reasons[] }`; a broken, oversized or unexpected answer is a ServerTransportError, not a refusal.
 */
import { OUTAGE_REASONS, type OutageReason } from "@fleetd/platform/outage";
import { request as httpRequest, type IncomingMessage } from "node:http";
import { Agent, request as httpsRequest } from "node:https";
import { z } from "zod";
import type { ServerTransport } from "@fleetd/platform/protocol/client";
import {
  type ChallengeResponse, type ConfirmResponse, type EvidenceResponse, type Refusal, type Tpm12ChallengeResponse,
  type Tpm12EvidenceResponse, MODES, RenewChallengeResponse, RenewConfirmResponse, RenewEvidenceResponse,
} from "@fleetd/platform/protocol";

export type ServerTransportErrorCode = "connect" | "tls" | "timeout" | "bad-response" | "too-large";

export class ServerTransportError extends Error {
  override readonly name = "ServerTransportError";
  constructor(
    readonly code: ServerTransportErrorCode,
    detail: string,
  ) {
    super(`attestation server ${code}: ${detail}`);
  }

  /** Worth the same request again (the shared client's retry): it could not connect, or timed out. */
  get retryable(): boolean {
    return this.code === "connect" || this.code === "timeout";
  }
}

const b64 = z.string().max(1 << 20).regex(/^[A-Za-z0-9+/]*={0,2}$/);

const Challenge: z.ZodType<ChallengeResponse> = z.object({
  sessionId: z.string().min(1).max(128),
  nonce: b64,
  expiresAt: z.string(),
  credentials: z.array(z.object({ ekBinding: z.string().regex(/^[0-9a-f]{64}$/), idObject: b64, encryptedSecret: b64 })).min(1).max(8),
});
const EvidenceAnswer: z.ZodType<EvidenceResponse> = z.discriminatedUnion("issued", [
  z.object({
    verdict: z.literal("pass"),
    issued: z.literal("new"),
    ldevidCertificate: b64,
    lakCertificate: b64,
    caBundle: z.string().min(1).max(1 << 20),
  }),
  z.object({ verdict: z.literal("pass"), issued: z.literal("none") }),
]);
const ConfirmAnswer: z.ZodType<ConfirmResponse> = z.object({
  mode: z.enum(MODES),
  installCode: z.object({ idObject: b64, encryptedSecret: b64 }).optional(),
});
const RefusalAnswer: z.ZodType<Refusal> = z.object({
  error: z.enum(["refused", "pending", "bad-request", "expired", "rate-limited", "unavailable"]),
  reason: z.enum(OUTAGE_REASONS as [OutageReason, ...OutageReason[]]).optional(),
  reasons: z
    .array(z.object({ check: z.string().max(200), detail: z.string().max(4000), pcr: z.number().int().optional(), event: z.number().int().optional() }))
    .max(200),
});

/** The TPM 1.2 variant's answers (a TPM 1.2 is issued nothing: its evidence answer is `issued: none` only). */
const Challenge12: z.ZodType<Tpm12ChallengeResponse> = z.object({
  sessionId: z.string().min(1).max(128),
  nonce: b64,
  expiresAt: z.string(),
  credential: z.object({ ekBinding: z.string().regex(/^[0-9a-f]{64}$/), blob: b64 }),
});
const Evidence12Answer: z.ZodType<Tpm12EvidenceResponse> = z.object({ verdict: z.literal("pass"), issued: z.literal("none") });

const ANSWERS: Record<string, z.ZodType<unknown>> = {
  "/v1/attest/challenge": Challenge,
  "/v1/attest/evidence": EvidenceAnswer,
  "/v1/attest/confirm": ConfirmAnswer,
  "/v1/attest/tpm12/challenge": Challenge12,
  "/v1/attest/tpm12/evidence": Evidence12Answer,
  // renewal with runtime attestation (`renew`): the server's own answer schemas (strings only, no transforms)
  "/v1/renew/challenge": RenewChallengeResponse,
  "/v1/renew/evidence": RenewEvidenceResponse,
  "/v1/renew/confirm": RenewConfirmResponse,
};

export interface TransportOptions {
  /** Pinned CA (PEM) for https. */
  ca?: string;
  timeoutMs?: number;
  maxResponseBytes?: number;
}

const TLS_CODES = /CERT|SELF_SIGNED|UNABLE_TO_(GET|VERIFY)|ERR_TLS|ERR_SSL|HOSTNAME|ALTNAME/;

function classify(e: NodeJS.ErrnoException, url: URL): ServerTransportError {
  const code = e.code ?? "";
  if (TLS_CODES.test(code)) return new ServerTransportError("tls", `${url.origin}: ${code}: ${e.message} (is FLEETD_SERVER_CA the server's CA?)`);
  if (code === "ETIMEDOUT") return new ServerTransportError("timeout", `${url.origin}: ${e.message}`);
  return new ServerTransportError("connect", `${url.origin}: ${code ? code + ": " : ""}${e.message}`);
}

export function serverTransport(base: URL, opts: TransportOptions = {}): ServerTransport {
  const https = base.protocol === "https:";
  if (https && !opts.ca) throw new Error("https needs a pinned CA");
  const agent = https ? new Agent({ ca: opts.ca, rejectUnauthorized: true, keepAlive: false }) : undefined;
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const max = opts.maxResponseBytes ?? 4 << 20;
  const prefix = base.pathname.endsWith("/") ? base.pathname.slice(0, -1) : base.pathname;

  return {
    post(path, body) {
      const url = new URL(base.origin + prefix + path);
      const payload = Buffer.from(JSON.stringify(body));
      return new Promise((resolve, reject) => {
        const req = (https ? httpsRequest : httpRequest)(
          url,
          {
            method: "POST",
            headers: { "content-type": "application/json", "content-length": String(payload.length), accept: "application/json" },
            ...(agent ? { agent, ca: opts.ca, rejectUnauthorized: true } : {}),
          },
          (res: IncomingMessage) => {
            const chunks: Buffer[] = [];
            let size = 0;
            let tooLarge = false;
            res.on("data", (c: Buffer) => {
              size += c.length;
              if (tooLarge) return;
              if (size > max) {
                tooLarge = true;
                chunks.length = 0;
                reject(new ServerTransportError("too-large", `${url.pathname}: answer larger than ${max} bytes`));
                res.destroy();
                return;
              }
              chunks.push(c);
            });
            res.on("error", (e) => reject(e instanceof ServerTransportError ? e : classify(e, url)));
            res.on("end", () => {
              if (tooLarge) return;
              const status = res.statusCode ?? 0;
              let json: unknown;
              try {
                json = JSON.parse(Buffer.concat(chunks).toString("utf8"));
              } catch {
                reject(new ServerTransportError("bad-response", `${url.pathname}: ${status} with a body that is not JSON`));
                return;
              }
              const schema = status === 200 ? ANSWERS[path] : RefusalAnswer;
              const checked = schema?.safeParse(json);
              if (!checked?.success) {
                const issue = checked?.error.issues[0];
                const what = status === 200 ? "an answer of the wrong shape" : "a body that is not a refusal";
                const server = (json as { error?: unknown } | null)?.error;
                reject(
                  new ServerTransportError(
                    "bad-response",
                    `${url.pathname}: ${status} with ${what}${issue ? ` (${issue.path.join(".")}: ${issue.message})` : ""}${typeof server === "string" ? ` error=${server.slice(0, 100)}` : ""}`,
                  ),
                );
                return;
              }
              resolve({ status, body: checked.data });
            });
          },
        );
        req.setTimeout(timeoutMs, () => req.destroy(Object.assign(new Error(`no answer within ${timeoutMs} ms`), { code: "ETIMEDOUT" })));
        req.on("error", (e) => reject(e instanceof ServerTransportError ? e : classify(e, url)));
        req.end(payload);
      });
    },
  };
}
