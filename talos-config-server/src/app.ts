/**
 * The HTTP API of talos-config-server (documented in openapi.yaml, generated from openapi.ts): the attestation protocol and the one-time
 * Talos config. No state-changing GET exists besides the config fetch, whose one effect (consuming the code)
 * is the point of the design.
 */
import express, { type Express, type NextFunction, type Request, type Response } from "express";
import type { Logger } from "pino";
import type { AttestationService, Outcome } from "@fleetd/platform/protocol/server";
import { clientAddress } from "./clientAddress.js";
import { configFetchHandler, type ConfigFetchDeps, type InternalError } from "./configFetch.js";
import { outageOf } from "@fleetd/platform/outage";
import type { Metrics } from "./metrics.js";
import { publicOpenApiYaml } from "./openapi.js";
import type { z } from "zod";
import { healthHandlers, type Readiness } from "@fleetd/platform/service";
import { stepGate } from "@fleetd/platform/http";

/** Protocol requests worked on at once and the longest wait for a turn (AppDeps.steps). */
export const DEFAULT_STEPS = { concurrency: 8, maxWaitMs: 20_000 } as const;

export interface AppDeps extends ConfigFetchDeps {
  service: AttestationService;
  metrics: Metrics;
  log: Logger;
  /** Largest accepted JSON body; evidence carries an event log (≤ 1 MiB, base64). */
  bodyLimit: string;
  /**
   * Protocol requests worked on at once, and how long one past that waits (body unread) before a 503 the machine
   * retries (@fleetd/platform/http stepGate); default 8 and 20 s.
   */
  steps?: { concurrency: number; maxWaitMs: number };
  /** Readiness (`/readyz`): NetBox and the CA signer reachable; absent: always ready (tests without them). */
  ready?: () => Promise<Readiness>;
}

export function createApp(deps: AppDeps): Express {
  // The API's OpenAPI 3.1 document, generated from the zod schemas the routes parse with (openapi.ts): the same
  // text as the committed talos-config-server/openapi.yaml (openapi.test.ts), served at GET /openapi.yaml.
  const openapi = publicOpenApiYaml();
  const app = express();
  app.disable("x-powered-by");
  app.set("etag", false);
  // Not here: the replicas' internal API (/internal/*) has a listener of its own, mutual TLS only
  // (ha/internalListener.ts); a request for it on this listener is an unknown path (404).
  // A power-on storm: the protocol requests wait for their turn before their bodies are read (memory stays bounded).
  const gate = stepGate({ ...(deps.steps ?? DEFAULT_STEPS), onShed: () => deps.metrics.attestations.inc({ step: "any", outcome: "server-busy" }) });
  app.use(["/v1/attest", "/v1/renew"], gate);
  app.use(express.json({ limit: deps.bodyLimit, strict: true, type: "application/json" }));

  const step = (name: "challenge" | "evidence" | "confirm" | "tpm12-challenge" | "tpm12-evidence" | "renew-challenge" | "renew-evidence" | "renew-confirm", fn: (req: Request) => Promise<Outcome<unknown>>) =>
    async (req: Request, res: Response, next: NextFunction) => {
      const end = deps.metrics.stepSeconds.startTimer({ step: name });
      try {
        // Every attestation request is charged to its client address first (shared store: one budget per
        // address across replicas); past the budget nothing is looked up or written.
        if (!(await deps.limiter.chargeAttest(addr(req), deps.now()))) {
          deps.metrics.attestations.inc({ step: name, outcome: "rate-limited" });
          res.status(429).json({ error: "rate-limited", reasons: [{ check: "request.rate", detail: "too many attestation requests from this address; try later" }] });
          return;
        }
        const out = await fn(req);
        deps.metrics.attestations.inc({ step: name, outcome: out.ok ? "ok" : out.body.error });
        if (!out.ok) deps.log.warn({ step: name, status: out.status, reasons: out.body.reasons }, `${name} refused`);
        if (!out.ok && out.retryAfterSeconds !== undefined) res.set("retry-after", String(out.retryAfterSeconds));
        res.status(out.ok ? 200 : out.status).json(out.body);
      } catch (e) {
        next(e);
      } finally {
        end();
      }
    };
  const addr = (req: Request) => clientAddress(req, deps.trustedProxies);
  app.post("/v1/attest/challenge", step("challenge", (req) => deps.service.challenge(req.body, addr(req))));
  app.post("/v1/attest/evidence", step("evidence", (req) => deps.service.evidence(req.body)));
  // TPM 1.2 machines (nodes-file tpm "1.2"): intake and wipe only, nothing issued (shared/platform/src/protocol/server/tpm12.ts)
  app.post("/v1/attest/tpm12/challenge", step("tpm12-challenge", (req) => deps.service.challenge12(req.body, addr(req))));
  app.post("/v1/attest/tpm12/evidence", step("tpm12-evidence", (req) => deps.service.evidence12(req.body)));
  app.post("/v1/attest/confirm", step("confirm", (req) => deps.service.confirm(req.body)));
  // Renewal with runtime attestation (shared/platform/src/protocol/server/renew.ts): possession of the current
  // LDevID is proven by a TPM2_Sign over the challenge, not by TLS client authentication (README "Renewal").
  app.post("/v1/renew/challenge", step("renew-challenge", (req) => deps.service.renewChallenge(req.body)));
  app.post("/v1/renew/evidence", step("renew-evidence", (req) => deps.service.renewEvidence(req.body)));
  app.post("/v1/renew/confirm", step("renew-confirm", (req) => deps.service.renewConfirm(req.body)));
  app.get("/talos/config", configFetchHandler(deps));
  const health = healthHandlers({ registry: deps.metrics.registry, ...(deps.ready ? { ready: deps.ready } : {}) });
  app.get("/healthz", health.healthz);
  app.get("/readyz", health.readyz);
  app.get("/metrics", health.metrics);
  app.get("/openapi.yaml", (_req, res) => {
    res.type("application/yaml").send(openapi);
  });

  // Body parser and other errors: a clear JSON error, never a stack trace.
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    const e = err as { status?: number; type?: string; message?: string };
    if (e.type === "entity.too.large") {
      res.status(413).json({ error: "bad-request", reasons: [{ check: "request.size", detail: `body larger than ${deps.bodyLimit}` }] });
      return;
    }
    if (e.type === "entity.parse.failed") {
      res.status(400).json({ error: "bad-request", reasons: [{ check: "request.json", detail: "body is not valid JSON" }] });
      return;
    }
    if (e.type === "charset.unsupported" || e.type === "encoding.unsupported") {
      res.status(415).json({ error: "bad-request", reasons: [{ check: "request.encoding", detail: "send the body as UTF-8 JSON without content encoding" }] });
      return;
    }
    if (typeof e.status === "number" && e.status >= 400 && e.status < 500) {
      // the body parser's other refusals (aborted, bad length, …): the client's fault, never an internal error
      res.status(400).json({ error: "bad-request", reasons: [{ check: "request.body", detail: e.type ? `the body could not be read (${e.type})` : "the body could not be read" }] });
      return;
    }
    const outage = outageOf(err);
    if (outage) {
      // A dependency outage outside the protocol steps (the config fetch's NetBox read): retry later
      deps.log.warn({ reason: outage.reason, detail: outage.detail }, "dependency unavailable");
      res.set("retry-after", String(outage.retryAfterSeconds));
      res.status(503).json({ error: "unavailable", reason: outage.reason, reasons: [{ check: outage.reason, detail: `${outage.reason.replace("-", " ")}; retry later` }] });
      return;
    }
    deps.log.error({ err }, "internal error");
    res.status(500).json({ error: "internal" } satisfies z.infer<typeof InternalError>);
  });
  return app;
}
