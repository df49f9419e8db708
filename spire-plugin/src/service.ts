/**
 * spire-plugin assembled: the SPIRE admin client, the list and status stores, the sync loop (on the leader only
 * when `ha` is set), and /healthz, /readyz (SPIRE answering, the list valid, a known leader) and /metrics.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Logger } from "pino";
import { loadKube, LeaderElector, runWhileLeader } from "@fleetd/platform/kube";
import { cachedProbe, drainServers, healthHandlers, readinessOf, serviceLogger, type Readiness } from "@fleetd/platform/service";
import { documentStore, type DocumentStore, rootFingerprintsOfFile, SpireServerClient, type SpireServerClientOptions } from "@fleetd/platform/spire";
import type { SpirePluginConfig } from "./config.js";
import { createSyncMetrics, EntrySync, type PassResult, type SyncMetrics } from "./sync.js";

export interface SpirePlugin {
  url: string;
  sync: EntrySync;
  metrics: SyncMetrics;
  client: SpireServerClient;
  elector?: LeaderElector;
  ready(): Promise<Readiness>;
  stop(): Promise<void>;
}

export interface SpirePluginOptions {
  logger?: Logger;
  /** Stores (tests may pass their own); default from the configuration. */
  list?: DocumentStore;
  status?: DocumentStore;
  elector?: LeaderElector;
  /** Called once per SPIRE RPC (tests count write RPCs with it). */
  onRpc?: SpireServerClientOptions["onRpc"];
}

function makeSync(cfg: SpirePluginConfig, o: SpirePluginOptions, log: Logger, metrics: SyncMetrics): { sync: EntrySync; client: SpireServerClient } {
  const client = new SpireServerClient({ socketPath: cfg.socketPath, timeoutMs: cfg.rpcTimeoutMs, ...(o.onRpc ? { onRpc: o.onRpc } : {}) });
  const sync = new EntrySync({
    client,
    trustDomain: cfg.trustDomain,
    trustedRoots: () => rootFingerprintsOfFile(cfg.devidCaPath),
    list: o.list ?? documentStore(cfg.list),
    status: o.status ?? documentStore(cfg.status),
    log,
    metrics,
    intervalMs: cfg.intervalSeconds * 1000,
    maxListBytes: cfg.maxListBytes,
    pageSize: cfg.pageSize,
    batchSize: cfg.batchSize,
  });
  return { sync, client };
}

/** `--dry-run`: one pass computing the plan; nothing is written (no entry, no ban, no status). */
export async function dryRun(cfg: SpirePluginConfig, o: SpirePluginOptions = {}): Promise<PassResult> {
  const log = o.logger ?? serviceLogger("spire-plugin");
  const { sync, client } = makeSync(cfg, o, log, createSyncMetrics());
  try {
    return await sync.pass(true);
  } finally {
    client.close();
  }
}

export async function startSpirePlugin(cfg: SpirePluginConfig, o: SpirePluginOptions = {}): Promise<SpirePlugin> {
  const log = o.logger ?? serviceLogger("spire-plugin");
  const metrics = createSyncMetrics();
  const { sync, client } = makeSync(cfg, o, log, metrics);
  const ha = cfg.ha;
  const elector =
    o.elector ??
    (ha
      ? new LeaderElector({
          kube: loadKube(ha.kubeconfig), namespace: ha.namespace, name: ha.lease, identity: ha.identity,
          leaseDurationSeconds: ha.leaseDurationSeconds, renewDeadlineSeconds: ha.renewDeadlineSeconds, retryPeriodSeconds: ha.retryPeriodSeconds, log,
        })
      : undefined);
  const ready = readinessOf({
    spire: cachedProbe(2_000, async () => {
      try {
        const h = await client.health();
        return h === "SERVING" ? { ok: true as const } : { ok: false as const, detail: `spire-server health ${h}` };
      } catch (e) {
        return { ok: false as const, detail: e instanceof Error ? e.message : String(e) };
      }
    }),
    list: async () => (elector && !elector.isLeader() ? { ok: true as const } : sync.listState),
    ...(elector ? { leader: async () => elector.leaderStatus() } : {}),
  });
  const h = healthHandlers({ registry: metrics.registry, ready });
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    if (req.method !== "GET") {
      res.writeHead(405).end();
      return;
    }
    if (path === "/healthz") return h.healthz(req, res);
    if (path === "/readyz") return void h.readyz(req, res);
    if (path === "/metrics") return void h.metrics(req, res);
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(cfg.listen.port, cfg.listen.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  const url = `http://${addr.address.includes(":") ? `[${addr.address}]` : addr.address}:${addr.port}`;
  let detach: (() => Promise<void>) | undefined;
  if (elector) {
    detach = runWhileLeader(elector, { start: () => sync.start(), stop: () => sync.stop() });
    elector.start();
  } else {
    await sync.start();
  }
  log.info({ url, socket: cfg.socketPath, trustDomain: cfg.trustDomain, ha: elector !== undefined }, "spire-plugin started");
  return {
    url, sync, metrics, client, ready, ...(elector ? { elector } : {}),
    async stop() {
      await drainServers([server], 2_000);
      if (elector) {
        await detach?.();
        await elector.stop();
      }
      await sync.stop();
      client.close();
    },
  };
}
