/** Assembles netbox-script: configuration → NetBox client, nodes file, queue, worker, HTTP server, reconcile. */
import { mkdirSync, readFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import { hostname } from "node:os";
import type { Logger } from "pino";
import { parseNodesFile, type NodesFile, attestationAccount } from "@fleetd/platform/fleet";
import { applyListenerLimits, listenerOptions } from "@fleetd/platform/http";
import { createNetBox, type NetBox, netboxReachable, missingCustomFields, CUSTOM_FIELDS, provenBootMac, provenBootMacOf, netboxJournal, type DeviceRecord } from "@fleetd/platform/netbox";
import { backoffDelayMs, outageOf } from "@fleetd/platform/outage";
import { type TinkerbellEffects, tinkerbellEffectsFromConfig, followWorkflows, type FollowReport } from "@fleetd/platform/tinkerbell";
import { loadKube, LeaderElector, runWhileLeader, type LeaderLoop } from "@fleetd/platform/kube";
import { keepFailedControlPlanesOf, type HandlerConfig } from "./config.js";
import { documentStore, NODE_LIST_MAX_BYTES, NodeListPublisher, parseNodeList, parseSyncStatus, spireRemovalConfirmed } from "@fleetd/platform/spire";
import type { RetirementSpire } from "@fleetd/platform/retire";
import type { RetireFn } from "./effects.js";
import { retirementFor } from "./retirement.js";
import { Intents } from "./intents.js";
import { importLegacyState } from "./legacyImport.js";
import { createMetrics, type Metrics } from "./metrics.js";
import { JobQueue } from "./queue.js";
import { reconcileOnce } from "./reconcile.js";
import { createApp } from "./server.js";
import { Worker, type DecisionEvent } from "./worker.js";
import { ensurePrivateDir, KubeHandlerStore, SqliteHandlerStore, type HandlerStore } from "@fleetd/platform/state";
import { cachedProbe, drainServers, readinessOf, serviceLogger } from "@fleetd/platform/service";

export interface Handler {
  url: string;
  nb: NetBox;
  queue: JobQueue;
  intents: Intents;
  metrics: Metrics;
  worker: Worker;
  reconcile(): Promise<number[]>;
  /** One pass journalling how fleetd's Workflows ended (and restarting boot-Job failures); undefined without Tinkerbell. */
  followWorkflows(): Promise<FollowReport | undefined>;
  /** HA: the election the worker and reconcile loop run under (undefined: they run here). */
  elector?: LeaderElector;
  /** SPIRE's node list publisher (handler.spireNodes), if configured. */
  spireNodes?: NodeListPublisher;
  /** Retirement's view of SPIRE (the spire step's confirmation), if configured. */
  spireRetirement?: RetirementSpire;
  stop(): Promise<void>;
}

export interface HandlerOptions {
  logger?: Logger;
  onDecision?: (e: DecisionEvent) => void;
  /** Start without the worker (tests: a crash after 2xx). */
  startWorker?: boolean;
  now?: () => Date;
  /** Tinkerbell effects (default: from the site configuration's kubernetes.management section, if any). */
  tinkerbell?: TinkerbellEffects;
  /** Retirement of a decommissioning node (shared/platform/src/retire); default: the intent is only recorded. */
  retire?: RetireFn;
  /** HA: run the worker and reconcile only while this elector leads (default: from `handler.ha`, if set). */
  elector?: LeaderElector;
}

export class HandlerStartError extends Error {
  override readonly name = "HandlerStartError";
}

export async function startHandler(cfg: HandlerConfig, opts: HandlerOptions = {}): Promise<Handler> {
  const log = opts.logger ?? serviceLogger("netbox-script");
  let nodes: NodesFile;
  try {
    nodes = parseNodesFile(readFileSync(cfg.handler.nodesFile, "utf8"), cfg.handler.nodesFile);
  } catch (e) {
    throw new HandlerStartError(`nodes file: ${(e as Error).message}`);
  }
  const nb = createNetBox(cfg.site.netbox);
  // The boot MAC a Workflow targets: only the one TPM evidence proved (boot_mac written by the attestation account).
  const bootMac = async (id: number): Promise<string | undefined> => {
    const p = await provenBootMac(nb, id, attestationAccount(cfg.site));
    return p.ok ? p.mac : undefined;
  };
  // The same for a record already read (the worker's: the device its take matched), without reading it again.
  const bootMacOf = async (d: DeviceRecord): Promise<string | undefined> => {
    const p = await provenBootMacOf(nb, d, attestationAccount(cfg.site));
    return p.ok ? p.mac : undefined;
  };
  // NetBox down at start is an outage, not a refusal: wait for it (nothing can be decided without it, and the
  // queue on disk keeps every job); fields it says are missing stop the start.
  let missing: string[];
  for (let attempt = 1; ; attempt++) {
    try {
      missing = await missingCustomFields(nb, CUSTOM_FIELDS.map((f) => f.name));
      break;
    } catch (e) {
      const outage = outageOf(e);
      if (!outage) throw e;
      const wait = backoffDelayMs(attempt, Math.random(), { baseMs: 500, capMs: 30_000 });
      log.warn({ reason: outage.reason, detail: outage.detail, retryInMs: wait }, "NetBox unavailable at start; waiting for it");
      await new Promise((r) => setTimeout(r, wait));
    }
  }
  if (missing.length > 0) throw new HandlerStartError(`NetBox lacks fleetd's custom fields ${missing.join(", ")}: run \`fleetd netbox setup\``);
  let tinkerbell = opts.tinkerbell;
  if (!tinkerbell) {
    const fx = tinkerbellEffectsFromConfig(cfg.site);
    if (fx.effects) tinkerbell = fx.effects;
    else log.warn({ reason: fx.reason }, "no Tinkerbell effects: provision/attest/wipe are only recorded as intents");
  }
  if (tinkerbell) {
    try {
      const c = await tinkerbell.syncTemplates();
      for (const r of [...c.templates.refused, ...c.ruleSets.refused]) log.warn({ name: r.name }, r.reason);
      log.info({ namespace: tinkerbell.namespace, created: c.templates.created, updated: c.templates.updated, deleted: c.templates.deleted }, "Tinkerbell templates in sync");
    } catch (e) {
      // Not fatal: the first workflow syncs them again (and its job is retried if the cluster is down).
      log.warn({ err: (e as Error).message }, "Tinkerbell templates not synced at start");
    }
  }
  // SPIRE's node list: published on every device event and every pass; retirement's spire step confirms by it.
  const sn = cfg.handler.spireNodes;
  const spireList = sn ? documentStore(sn.list) : undefined;
  const spireStatus = sn ? documentStore(sn.status) : undefined;
  const spireNodes =
    sn && spireList
      ? new NodeListPublisher({
          nb,
          inventory: { applyAccount: cfg.site.accounts.apply, attestationAccount: attestationAccount(cfg.site), roleSlugs: sn.roleSlugs },
          trustDomain: sn.trustDomain,
          caBundlePath: sn.caBundle,
          store: spireList,
          keepFailedControlPlanes: keepFailedControlPlanesOf(cfg.site),
          log,
        })
      : undefined;
  const spire: RetirementSpire | undefined =
    spireNodes && spireList && spireStatus && sn
      ? {
          pollMs: sn.confirmPollMs,
          async confirmRemoved(node) {
            // Publish only when this process has not yet published a list without the node; then judge by the list
            // as stored (another replica may have published since) and spire-plugin's status.
            if (!spireNodes.last || spireNodes.last.list.nodes.some((n) => n.name === node)) await spireNodes.publish();
            const doc = await spireList.read(NODE_LIST_MAX_BYTES);
            if (!doc) return { confirmed: false, waitingFor: `spire-nodes.json is not in ${spireList.describe} yet` };
            const list = parseNodeList(doc.bytes, sn.trustDomain);
            const st = await spireStatus.read(4 * 1024 * 1024);
            return spireRemovalConfirmed(st ? parseSyncStatus(st.bytes) : undefined, list, node);
          },
        }
      : undefined;
  // Retirement (status decommissioning) needs both clusters; without them a decommission is only recorded.
  let retire = opts.retire;
  const k = cfg.site.kubernetes;
  if (!retire && tinkerbell && k) {
    retire = retirementFor({
      tinkerbell, management: loadKube(k.management.kubeconfig), workload: loadKube(k.workload.kubeconfig), nb, nodes,
      bootMac, owner: process.env["HOSTNAME"] ?? hostname(), log, ...(spire ? { spire } : {}),
    }).retire;
  } else if (!retire) {
    log.warn("retirement is not wired (it needs kubernetes.management with its tinkerbell section and kubernetes.workload): a decommission is only recorded");
  }
  const metrics = createMetrics();
  const store = openHandlerStore(cfg);
  try {
    await importLegacyState(cfg.handler.stateDir, store, log);
  } catch (e) {
    await store.close();
    throw e;
  }
  const queue = new JobQueue(store, cfg.handler.claimStaleSeconds * 1000);
  const intents = new Intents(store);
  const received = new Map<string, number>();
  const worker = new Worker({
    cfg, nb, nodes, queue, intents, log, metrics,
    effects: { ...(tinkerbell ? { tinkerbell } : {}), ...(retire ? { retire } : {}), bootMac: bootMacOf },
    onDecision: (e) => {
      const t0 = received.get(e.job.id);
      if (t0 !== undefined) {
        metrics.receiptToDecision.observe((e.at - t0) / 1000);
        received.delete(e.job.id);
      }
      opts.onDecision?.(e);
    },
  });
  const ha = cfg.handler.ha;
  const elector =
    opts.elector ??
    (ha
      ? new LeaderElector({
          kube: loadKube(ha.kubeconfig),
          namespace: ha.namespace,
          name: ha.lease,
          identity: ha.identity,
          leaseDurationSeconds: ha.leaseDurationSeconds,
          renewDeadlineSeconds: ha.renewDeadlineSeconds,
          retryPeriodSeconds: ha.retryPeriodSeconds,
          log,
        })
      : undefined);
  // Readiness: NetBox reachable, the queue's store answering, and under HA a known leader (the worker runs there).
  const ready = readinessOf({
    netbox: cachedProbe(5_000, () => netboxReachable(nb, 3_000)),
    queue: cachedProbe(5_000, async () => {
      await queue.pending();
      return { ok: true };
    }),
    ...(elector ? { leader: async () => elector.leaderStatus() } : {}),
  });
  const app = createApp({
    cfg, queue, log, metrics, ready, ...(opts.now ? { now: opts.now } : {}),
    ...(spireNodes ? { onDeviceEvent: () => spireNodes.trigger() } : {}),
    onEnqueued: (jobId, at) => {
      received.set(jobId, at);
      worker.pump();
    },
  });
  // Connection caps and short timeouts, per source too (one policy for every fleetd listener).
  const server: Server = createServer(listenerOptions(cfg.handler.listen.limits), app);
  applyListenerLimits(server, cfg.handler.listen.limits);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(cfg.handler.listen.port, cfg.handler.listen.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  const url = `http://${addr.address}:${addr.port}`;
  const reconcile = async (): Promise<number[]> => {
    const q = await reconcileOnce(nb, queue, log, metrics, (id, lu) => worker.settled(id, lu));
    worker.pump();
    return q;
  };
  const journal = netboxJournal(nb);
  const follow = async (): Promise<FollowReport | undefined> => {
    if (!tinkerbell) return undefined;
    const r = await followWorkflows({ objects: tinkerbell.objects, journal, bootRetries: tinkerbell.bootRetries, log });
    metrics.workflowOutcomes.inc({ outcome: "journalled" }, r.journalled.length);
    metrics.workflowOutcomes.inc({ outcome: "restarted" }, r.restarted.length);
    metrics.workflowOutcomes.inc({ outcome: "error" }, r.errors.length);
    return r;
  };
  let passing = false;
  const pass = async (): Promise<void> => {
    if (passing) return; // the previous pass is still at work (a slow NetBox or API server)
    passing = true;
    try {
      await passOnce();
    } finally {
      passing = false;
    }
  };
  const passOnce = async (): Promise<void> => {
    if (spireNodes) {
      await spireNodes.publish().catch((e: Error) => log.warn({ err: e.message }, "publishing spire-nodes.json failed"));
    }
    await reconcile().catch((e: Error) => {
      metrics.reconcileRuns.inc({ outcome: "error" });
      log.warn({ err: e.message }, "reconcile failed");
    });
    await follow().catch((e: Error) => {
      metrics.workflowOutcomes.inc({ outcome: "error" });
      log.warn({ err: e.message }, "following Workflow outcomes failed");
    });
  };
  // The worker and the reconcile loop: one loop, on the leader only when HA is on.
  let timer: NodeJS.Timeout | undefined;
  const loop: LeaderLoop = {
    async start() {
      // Only this process (or, under HA, this leader) runs jobs now: claims of an earlier process or leader end.
      const released = await queue.release(false);
      if (released > 0) log.info({ released }, "jobs claimed by an earlier worker are due again");
      worker.start();
      await pass();
      timer ??= setInterval(() => void pass(), cfg.handler.reconcileIntervalSeconds * 1000);
      timer.unref();
    },
    async stop() {
      if (timer) clearInterval(timer);
      timer = undefined;
      await worker.stop();
    },
  };
  let detach: (() => Promise<void>) | undefined;
  if (opts.startWorker !== false) {
    if (elector) {
      detach = runWhileLeader(elector, loop);
      elector.start();
    } else {
      await loop.start();
    }
  }
  log.info({ url, nodes: Object.keys(nodes.nodes).length }, "netbox-script listening");
  return {
    url, nb, queue, intents, metrics, worker, reconcile, followWorkflows: follow, ...(elector ? { elector } : {}), ...(spireNodes ? { spireNodes } : {}), ...(spire ? { spireRetirement: spire } : {}),
    async stop() {
      // Stop accepting; webhooks in flight finish (their jobs are on disk before the 202) within 5 s.
      await drainServers([server], 5_000);
      if (elector) {
        await detach?.();
        await elector.stop();
      }
      await loop.stop();
      await store.close();
    },
  };
}

/**
 * The queue's store, picked the way talos-config-server picks its state: SQLite (`<stateDir>/store/handler.db`)
 * alone, Kubernetes (Secrets in `handler.ha.namespace`) under HA, so every replica sees every job.
 */
function openHandlerStore(cfg: HandlerConfig): HandlerStore {
  // handled.log lives in stateDir; the database in a private directory of its own (webhook data: 0700, checked)
  mkdirSync(cfg.handler.stateDir, { recursive: true, mode: 0o700 });
  const ha = cfg.handler.ha;
  if (!ha) {
    const dir = join(cfg.handler.stateDir, "store");
    ensurePrivateDir(dir, (m) => new HandlerStartError(`handler.stateDir: ${m}`));
    return new SqliteHandlerStore(join(dir, "handler.db"));
  }
  let kube;
  try {
    kube = loadKube(ha.kubeconfig);
  } catch (e) {
    throw new HandlerStartError(`handler.ha.kubeconfig: ${ha.kubeconfig}: ${(e as Error).message}`);
  }
  return new KubeHandlerStore({ kube, namespace: ha.namespace });
}
