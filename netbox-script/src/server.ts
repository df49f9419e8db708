/**
 * POST /netbox/events — NetBox's event-rule webhook. Order: size limit, signature over the raw bytes
 * (constant time), then JSON + shape, freshness, fleetd's own writes, redelivery; then a durable enqueue and
 * 202. Only GET routes are /healthz, /readyz and /metrics: nothing in fleetd changes state on a GET.
 */
import express, { type NextFunction, type Request, type Response } from "express";
import type { Logger } from "pino";
import { checkFreshness, deliveryId, parseWebhookBody, verifyHookSignature, WebhookError, type WebhookRefusal } from "@fleetd/platform/netbox";
import type { HandlerConfig } from "./config.js";
import type { Metrics } from "./metrics.js";
import type { JobQueue } from "./queue.js";
import { healthHandlers, type Readiness } from "@fleetd/platform/service";

export interface ServerDeps {
  cfg: HandlerConfig;
  queue: JobQueue;
  log: Logger;
  metrics: Metrics;
  /** What /readyz answers (NetBox, the queue, the leader under HA). */
  ready: () => Promise<Readiness>;
  /**
   * Called for every signed, fresh device event (before the own-write check: the attestation account may be the
   * handler's, and its verdicts and LDevIDs change the SPIRE node list), e.g. to republish spire-nodes.json.
   */
  onDeviceEvent?: (deviceId: number) => void;
  /** Called after a job is durably enqueued (wakes the worker). */
  onEnqueued: (jobId: string, receivedAt: number) => void;
  now?: () => Date;
}

/** Each webhook refusal's HTTP status (a Record over the union: a new refusal without a status does not compile). */
const STATUS: Record<WebhookRefusal, number> = {
  "webhook-signature-missing": 401,
  "webhook-signature-malformed": 401,
  "webhook-signature-mismatch": 401,
  "webhook-body-not-json": 400,
  "webhook-body-shape": 400,
  "webhook-body-stale": 409,
  "webhook-body-future": 409,
};

/** Every `outcome` this route answers (and counts in fleetd_netbox_script_webhooks_total). */
export const WEBHOOK_OUTCOMES = [
  "accepted",
  "duplicate",
  "ignored-object-type",
  "ignored-own-write",
  "internal-error",
  "not-found",
  "webhook-body-too-large",
  "webhook-body-unreadable",
] as const;
export type WebhookOutcome = WebhookRefusal | (typeof WEBHOOK_OUTCOMES)[number];

export function createApp(d: ServerDeps): express.Express {
  const app = express();
  app.disable("x-powered-by");
  app.set("etag", false);
  const secret = d.cfg.site.webhook.secret;
  const maxAge = d.cfg.site.webhook.maxAgeSeconds;
  const answer = (res: Response, status: number, outcome: WebhookOutcome, detail?: string): void => {
    d.metrics.webhooks.inc({ outcome });
    res.status(status).json(detail ? { outcome, detail } : { outcome });
  };

  app.post(
    "/netbox/events",
    express.raw({ type: () => true, limit: d.cfg.handler.maxBodyBytes }),
    async (req: Request, res: Response) => {
      const receivedAt = Date.now();
      const body: unknown = req.body;
      const raw = Buffer.isBuffer(body) ? new Uint8Array(body) : new Uint8Array(0);
      try {
        verifyHookSignature(raw, req.headers["x-hook-signature"], secret);
        const hint = parseWebhookBody(raw);
        checkFreshness(hint, d.now?.() ?? new Date(), maxAge);
        if (hint.objectType !== "dcim.device") return answer(res, 202, "ignored-object-type", hint.objectType);
        d.onDeviceEvent?.(hint.objectId);
        if (hint.actor !== null && hint.actor === d.cfg.site.accounts.handler) return answer(res, 200, "ignored-own-write");
        const id = deliveryId(raw);
        // Remember the id past the freshness window (+ clock slack): older replays are refused as stale.
        if (!(await d.queue.rememberDelivery(id, receivedAt + (maxAge + 120) * 1000))) return answer(res, 200, "duplicate");
        const job = await d.queue.enqueue({ id: `wh:${id}`, deviceId: hint.objectId, source: "webhook", receivedAt: new Date(receivedAt).toISOString(), hintEvent: hint.event });
        d.log.info({ device: hint.objectId, event: hint.event, actor: hint.actor, request: hint.requestId, job: job.id }, "webhook accepted");
        d.onEnqueued(job.id, receivedAt);
        return answer(res, 202, "accepted");
      } catch (e) {
        if (e instanceof WebhookError) {
          d.log.warn({ code: e.code, detail: e.message, from: req.socket.remoteAddress }, "webhook refused");
          return answer(res, STATUS[e.code], e.code, e.message);
        }
        d.log.error({ err: e }, "webhook handling failed");
        return answer(res, 503, "internal-error");
      }
    },
  );

  const health = healthHandlers({ registry: d.metrics.registry, ready: d.ready });
  app.get("/healthz", health.healthz);
  app.get("/readyz", health.readyz);
  app.get("/metrics", health.metrics);
  app.use((_req: Request, res: Response) => {
    res.status(404).json({ outcome: "not-found" });
  });
  // body-parser errors (413 too large, 400 aborted) — answered before any parsing of the body
  app.use((err: { status?: number; type?: string; message?: string }, _req: Request, res: Response, _next: NextFunction) => {
    const status = typeof err.status === "number" && err.status >= 400 && err.status < 600 ? err.status : 400;
    const outcome: WebhookOutcome = err.type === "entity.too.large" ? "webhook-body-too-large" : "webhook-body-unreadable";
    d.metrics.webhooks.inc({ outcome });
    res.status(status).json({ outcome, detail: err.message ?? "" });
  });
  return app;
}
