/**
 * Liveness, readiness and metrics for every fleetd service. `/healthz` answers while the process serves at all;
 * `/readyz` runs the service's dependency probes (NetBox reachable, state store open, leader known, …) and answers
 * 503 naming each failing one; `/metrics` is the service's prom-client registry, with Node's process metrics.
 * The handlers are plain node (req, res) functions, so express and node:http mount them alike.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { collectDefaultMetrics, Registry } from "prom-client";
import { z } from "zod";

/** One readiness check: ok, or not with a detail (a failed probe's error message, which may be empty). */
export const ProbeResult = z.union([z.strictObject({ ok: z.literal(true) }), z.strictObject({ ok: z.literal(false), detail: z.string() })]);
export type ProbeResult = z.infer<typeof ProbeResult>;
export type Probe = () => Promise<ProbeResult>;

/** What `/readyz` answers: ready when every check is ok; each check names its dependency. */
export const Readiness = z.strictObject({ ready: z.boolean(), checks: z.record(z.string(), ProbeResult) });
export type Readiness = z.infer<typeof Readiness>;

/** What `/healthz` answers while the process serves at all. */
export const Health = z.strictObject({ ok: z.literal(true) });

/** A probe run at most once per `ttlMs` (kubelets may probe every second, from several nodes). */
export function cachedProbe<T>(ttlMs: number, probe: () => Promise<T>): () => Promise<T> {
  let last: { at: number; value: Promise<T> } | undefined;
  return () => {
    const now = Date.now();
    if (!last || now - last.at >= ttlMs) last = { at: now, value: probe() };
    return last.value;
  };
}

/** Readiness from named probes; a probe that throws is a failed check naming the error, never a 500. */
export function readinessOf(probes: Record<string, Probe>): () => Promise<Readiness> {
  return async () => {
    const entries = await Promise.all(
      Object.entries(probes).map(async ([name, probe]): Promise<[string, ProbeResult]> => {
        try {
          return [name, await probe()];
        } catch (e) {
          return [name, { ok: false, detail: e instanceof Error ? e.message : String(e) }];
        }
      }),
    );
    const checks = Object.fromEntries(entries);
    return { ready: entries.every(([, r]) => r.ok), checks };
  };
}

/** A registry with Node's process metrics (`<prefix>process_cpu_seconds_total`, heap, event loop lag, …). */
export function serviceRegistry(prefix: string): Registry {
  if (!/^[a-z][a-z0-9_]*_$/.test(prefix)) throw new Error(`metrics prefix ${JSON.stringify(prefix)}: lowercase, digits and _, ending in _`);
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix });
  return registry;
}

export interface HealthHandlers {
  healthz(req: IncomingMessage, res: ServerResponse): void;
  readyz(req: IncomingMessage, res: ServerResponse): Promise<void>;
  metrics(req: IncomingMessage, res: ServerResponse): Promise<void>;
}

const json = (res: ServerResponse, status: number, body: unknown): void => {
  res.writeHead(status, { "content-type": "application/json; charset=utf-8", "cache-control": "no-store" });
  res.end(JSON.stringify(body));
};

export function healthHandlers(o: { registry: Registry; ready?: () => Promise<Readiness> }): HealthHandlers {
  return {
    healthz: (_req, res) => json(res, 200, { ok: true } satisfies z.infer<typeof Health>),
    readyz: async (_req, res) => {
      const r: Readiness = o.ready ? await o.ready() : { ready: true, checks: {} };
      json(res, r.ready ? 200 : 503, r);
    },
    metrics: async (_req, res) => {
      const text = await o.registry.metrics();
      res.writeHead(200, { "content-type": o.registry.contentType });
      res.end(text);
    },
  };
}
