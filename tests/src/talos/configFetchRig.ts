/**
 * talos-config-server's `GET /talos/config` on loopback, with install codes put straight into the real SQLite
 * state store the way the confirm step leaves them (attestation-protocol.md "Talos hand-off"): a real worker config
 * rendered for each node, sealed to its code (sealConfig), stored under SHA-256(code). The app is the server's own
 * (createApp) behind the production listener limits (32 connections per source address), so clients bind to
 * their own 127.x.y.z address as separate machines would. NetBox is not involved: the outbox is caught up and
 * every node is still `staged` (the fetch's NetBox read, `stillWanted`, answers at once).
 * Used by tests/src/talos/configFetch.test.ts and tests/src/bench/talosConfig.ts.
 */
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { createServer, request, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { pino, type Logger } from "pino";
import { applyListenerLimits, DEFAULT_LISTENER_LIMITS, listenerOptions } from "@fleetd/platform/http";
import type { AttestationService } from "@fleetd/platform/protocol/server";
import { SqliteAttestationStore } from "@fleetd/platform/state";
import { renderWorkerConfig } from "@fleetd/platform/talos/config";
import { nodeInputFixture, siteConfigFixture } from "@fleetd/testkit/talosConfig";
import { sealConfig } from "@fleetd/verify/crypto";
import { createApp } from "@fleetd/talos-config-server/app";
import { createMetrics } from "@fleetd/talos-config-server/metrics";
import { StoreLimiter } from "@fleetd/talos-config-server/rateLimit";

export interface StoredConfig {
  deviceId: number;
  uuid: string;
  /** The install code as Talos presents it (lowercase hex of the 32 bytes). */
  code: string;
  /** The plaintext config, to compare a response with. */
  config: string;
}

export interface ConfigRig {
  url: string;
  port: number;
  store: SqliteAttestationStore;
  configs: StoredConfig[];
  /** Resolves at the server's next log line whose message matches (e.g. "claim released"). */
  logged(msg: RegExp): Promise<Record<string, unknown>>;
  /** Resolves when the server has seen one of its client connections close (after its handlers of that close ran). */
  nextClose(): Promise<void>;
  close(): Promise<void>;
}

const SITE = siteConfigFixture("v1.13.9");
const BASE_NODE = nodeInputFixture();
const TOKEN = { id: "abc123", secret: "0123456789abcdef", token: "abc123.0123456789abcdef" };

/** A real worker config for node `i` (its own name, MAC and address), padded with YAML comment lines to `padTo` bytes. */
export function workerConfig(i: number, padTo = 0): string {
  const node = { ...BASE_NODE, name: `w${i}`, link: { mac: `52:54:00:00:${((i >> 8) & 0xff).toString(16).padStart(2, "0")}:${(i & 0xff).toString(16).padStart(2, "0")}` }, address: `10.${(i >> 8) & 0xff}.${i & 0xff}.1/8`, gateway: "10.255.255.254" };
  let yaml = renderWorkerConfig(SITE, node, { token: TOKEN }).yaml;
  const line = `# ${"x".repeat(1021)}\n`; // 1 KiB a line
  if (yaml.length < padTo) yaml += line.repeat(Math.ceil((padTo - yaml.length) / line.length));
  return yaml;
}

/** Puts one sealed install code for each config (device ids from 1001), expiring in an hour. */
export async function putConfigs(store: SqliteAttestationStore, configs: string[], firstDeviceId = 1001): Promise<StoredConfig[]> {
  const out: StoredConfig[] = [];
  for (const [i, config] of configs.entries()) {
    const code = randomBytes(32);
    const deviceId = firstDeviceId + i;
    const uuid = randomUUID();
    await store.putInstallCode({
      codeHash: createHash("sha256").update(code).digest("hex"),
      node: { deviceId, name: `w${i}` },
      uuid,
      sourceAddress: "10.0.0.1",
      config: sealConfig(code, config, { deviceId, uuid }),
      expiresAt: Date.now() + 3600_000,
    });
    out.push({ deviceId, uuid, code: code.toString("hex"), config });
  }
  return out;
}

/** The server's log as JSON lines, with waiters for a message. */
function capturingLogger(): { log: Logger; logged(msg: RegExp): Promise<Record<string, unknown>> } {
  const waiters: { msg: RegExp; resolve: (l: Record<string, unknown>) => void }[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const text of chunk.toString("utf8").split("\n").filter(Boolean)) {
        const line = JSON.parse(text) as Record<string, unknown>;
        for (const w of waiters.splice(0)) {
          if (w.msg.test(String(line["msg"]))) w.resolve(line);
          else waiters.push(w);
        }
      }
      done();
    },
  });
  return { log: pino({ level: "info" }, stream), logged: (msg) => new Promise((resolve) => waiters.push({ msg, resolve })) };
}

/**
 * `stillWanted`: the fetch's NetBox read (default: every node is still staged, at once); a test holds it to drop a
 * connection while the server waits for NetBox.
 */
export async function startConfigRig(o: { configs: string[]; staleClaimMs?: number; stillWanted?: () => Promise<{ ok: true } | { ok: false; reason: string }> }): Promise<ConfigRig> {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-config-fetch-"));
  const store = new SqliteAttestationStore(join(dir, "state.db"));
  const configs = await putConfigs(store, o.configs);
  const { log, logged } = capturingLogger();
  const app = createApp({
    // the attestation routes are not exercised: the config fetch never reaches the service
    service: {} as AttestationService,
    store,
    limiter: new StoreLimiter(store, { max: 5, windowMs: 60_000 }, { max: 10_000, windowMs: 60_000 }),
    log,
    metrics: createMetrics(),
    outbox: { kick: () => undefined, flush: async () => true },
    stillWanted: o.stillWanted ?? (async () => ({ ok: true })),
    now: () => Date.now(),
    staleClaimMs: o.staleClaimMs ?? 60_000,
    bodyLimit: "2mb",
  });
  const server = await listenLimited(app);
  const port = (server.address() as AddressInfo).port;
  const closeWaiters: (() => void)[] = [];
  server.on("connection", (socket) => socket.on("close", () => setImmediate(() => closeWaiters.splice(0).forEach((w) => w()))));
  return {
    url: `http://127.0.0.1:${port}`, port, store, configs, logged,
    nextClose: () => new Promise((resolve) => closeWaiters.push(resolve)),
    async close() {
      await closeServer(server);
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** `handler` on 127.0.0.1 behind the production listener limits (as talos-config-server's server.ts). */
export async function listenLimited(handler: Parameters<typeof createServer>[1]): Promise<Server> {
  const server = createServer(listenerOptions(DEFAULT_LISTENER_LIMITS), handler);
  applyListenerLimits(server, DEFAULT_LISTENER_LIMITS);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  return server;
}

export function closeServer(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

/** A client machine's own loopback address (127.1.x.y, one per `i`): the listener caps connections per source. */
export const clientAddress = (i: number): string => `127.1.${(i >> 8) & 0xff}.${(i & 0xff) + 1}`;

export interface Fetched {
  status: number;
  body: string;
  /** From the request's start to the body's end, ms. */
  ms: number;
}

/** GET `path` on a new connection from `localAddress`; the whole body. */
export function get(port: number, path: string, localAddress: string): Promise<Fetched> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path, localAddress, agent: false, headers: { connection: "close" } }, (res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8"), ms: performance.now() - t0 }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end();
  });
}

export const configPath = (c: Pick<StoredConfig, "uuid" | "code">): string => `/talos/config?uuid=${c.uuid}&code=${c.code}`;
