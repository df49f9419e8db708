/**
 * The node agent's status: a JSON file (FLEETD_STATUS_FILE, replaced atomically after every attempt; no secrets)
 * and, when FLEETD_HEALTH_PORT is set, `/healthz` (the process serves) and `/readyz` (200 while the node's own
 * verdict is not `failed`, else 503 with the status) for the DaemonSet's probes.
 */
import { mkdirSync, renameSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { dirname } from "node:path";
import type { NodeVerdict } from "./renewSchedule.js";

export interface AgentStatus {
  version: 1;
  /** False once the node's verdict is `failed` (N consecutive failures, or a refusal by verdict). */
  ready: boolean;
  verdict: NodeVerdict;
  consecutiveFailures: number;
  failuresForVerdict: number;
  refused: boolean;
  node?: string;
  generation?: number;
  lastAttemptAt?: string;
  lastPassAt?: string;
  nextAttemptAt?: string;
  lastError?: string;
  reasons: { check: string; detail: string }[];
  updatedAt: string;
}

export function writeStatus(path: string, s: AgentStatus): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o755 });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(s, null, 2) + "\n", { mode: 0o644 });
  renameSync(tmp, path);
}

/** `/healthz` and `/readyz` over node:http (the action image carries no web framework). */
export function startHealthServer(port: number, status: () => AgentStatus | undefined, host = "0.0.0.0"): Promise<Server> {
  const server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    const send = (code: number, body: unknown) => {
      res.writeHead(code, { "content-type": "application/json", "cache-control": "no-store" });
      res.end(JSON.stringify(body) + "\n");
    };
    if (req.method !== "GET") return send(405, { error: "method not allowed" });
    if (path === "/healthz") return send(200, { ok: true });
    if (path === "/readyz") {
      const s = status();
      return send(s?.ready ? 200 : 503, s ?? { ready: false, detail: "starting" });
    }
    return send(404, { error: "not found" });
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve(server));
  });
}
