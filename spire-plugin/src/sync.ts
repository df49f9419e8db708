/**
 * The sync loop: read spire-nodes.json, validate it, reconcile SPIRE's node entries through the reconcile engine
 * (`syncNodeEntries`), ban the agents of nodes that left the list, delete the agents of nodes whose entry's selectors
 * moved (a renewed LDevID) so that they attest again, write the status. A pass runs at once when the
 * list's store reports a change (file or ConfigMap watch), else every `intervalSeconds`; after a failed pass
 * (SPIRE down, its datastore failing) the next one comes after a backoff (0.5 s doubling to 30 s, jittered) and
 * the loop converges once SPIRE answers again. While a re-attestation is pending the next pass comes within
 * `REATTEST_RECHECK_MS`; a node whose agents did not move in a try (nothing deleted, no agent with the current
 * selectors yet, or SPIRE failing) is tried again after a back-off of its own (5 s doubling to
 * `REATTEST_RECHECK_CAP_MS`), so a fleet renewing at once costs SPIRE a few listings per node, not one every
 * 5 s for a day; one pending for longer than `reattestGiveUpMs` is dropped (logged, counted).
 *
 * A list that is absent, too large, not JSON, invalid or for another trust domain changes no entry: the pass is
 * reported (log, `fleetd_spire_plugin_list_refusals_total{code}`, /readyz `list` detail, the status's error)
 * and SPIRE keeps what it holds.
 */
import type { Logger } from "pino";
import { Counter, Gauge, type Registry } from "prom-client";
import { backoffDelayMs, outageOf } from "@fleetd/platform/outage";
import type { ReconcileMetrics } from "@fleetd/platform/reconcile";
import {
  type AgentApi, banAgentsOf, DocumentTooLarge, type EntryApi, type ReattestApi, type PendingReattest, reattestAgentsOf, type DocumentStore, NodeListError, nodeListDigest, parseNodeEntryId, parseNodeList, parseSyncStatus, type PendingBan,
  SYNC_STATUS_API_VERSION, SYNC_STATUS_MAX_BANS, serializeSyncStatus, syncNodeEntries, type SyncStatus, type NodeList,
} from "@fleetd/platform/spire";
import { serviceRegistry } from "@fleetd/platform/service";

export interface SyncMetrics {
  registry: Registry;
  writes: Counter<"kind" | "op" | "result">;
  bans: Counter<"result">;
  passes: Counter<"outcome">;
  listRefusals: Counter<"code">;
  entries: Gauge;
  pendingBans: Gauge;
  reattests: Counter<"result">;
  pendingReattests: Gauge;
}

export function createSyncMetrics(): SyncMetrics {
  const registry = serviceRegistry("fleetd_spire_plugin_");
  return {
    registry,
    writes: new Counter({ name: "fleetd_spire_plugin_writes_total", help: "SPIRE entry writes by kind, operation and result (the reconcile engine's metrics)", labelNames: ["kind", "op", "result"], registers: [registry] }),
    bans: new Counter({ name: "fleetd_spire_plugin_bans_total", help: "Agents banned (ok), ban attempts that failed (error)", labelNames: ["result"], registers: [registry] }),
    passes: new Counter({ name: "fleetd_spire_plugin_passes_total", help: "Sync passes by outcome: converged, item-errors, list-refused, no-list, spire-unavailable, error", labelNames: ["outcome"], registers: [registry] }),
    listRefusals: new Counter({ name: "fleetd_spire_plugin_list_refusals_total", help: "spire-nodes.json refused (no entry changed), by code", labelNames: ["code"], registers: [registry] }),
    entries: new Gauge({ name: "fleetd_spire_plugin_entries", help: "fleetd's SPIRE node entries after the last pass", registers: [registry] }),
    pendingBans: new Gauge({ name: "fleetd_spire_plugin_pending_bans", help: "Nodes removed from the list whose agents are not banned yet", registers: [registry] }),
    reattests: new Counter({
      name: "fleetd_spire_plugin_reattests_total",
      help: "Re-attestations of nodes whose entry's selectors moved: agents deleted (deleted), tries that failed (error), nodes whose agent attested with the current selectors (done), nodes without an attested agent (no-agent), re-attestations given up (gave-up)",
      labelNames: ["result"],
      registers: [registry],
    }),
    pendingReattests: new Gauge({ name: "fleetd_spire_plugin_pending_reattests", help: "Nodes whose entry's selectors moved and whose agent has not attested with them yet", registers: [registry] }),
  };
}

export interface EntrySyncOptions {
  /** A SpireServerClient (tests pass a fake). */
  client: EntryApi & AgentApi & ReattestApi;
  trustDomain: string;
  /** SHA-1 of each root of spire-server's LDevID CA bundle, read at every pass (a list naming another root is refused). */
  trustedRoots: () => readonly string[];
  list: DocumentStore;
  status: DocumentStore;
  log: Logger;
  metrics: SyncMetrics;
  intervalMs: number;
  maxListBytes: number;
  pageSize?: number;
  batchSize?: number;
  now?: () => Date;
  /** A re-attestation pending longer than this is given up (default `REATTEST_GIVE_UP_MS`). */
  reattestGiveUpMs?: number;
}

/**
 * 24 hours: a node's agent still attesting with the old selectors that long after its entry moved has not been
 * restarted on the renewed LDevID (renewal is due at two thirds of an LDevID's lifetime of days, so the old LDevID
 * is still valid then); it is logged and left to the old LDevID's expiry.
 */
export const REATTEST_GIVE_UP_MS = 24 * 3600_000;
/** While a re-attestation is pending the next pass comes within this (a spire-agent restarted after a renewal). */
export const REATTEST_RECHECK_MS = 5_000;
/** The longest back-off between two tries of one node's pending re-attestation (see the file comment). */
export const REATTEST_RECHECK_CAP_MS = 5 * 60_000;

export type PassOutcome = "converged" | "item-errors" | "list-refused" | "no-list" | "spire-unavailable" | "error" | "dry-run";

export interface PassResult {
  outcome: PassOutcome;
  digest?: string;
  creates: number;
  updates: number;
  deletes: number;
  unchanged: number;
  banned: string[];
  /** Agents deleted so that they attest again with their node's current LDevID. */
  reattested: string[];
  /** Dry run: the plan (entry IDs per operation, bans, nodes whose agents are to attest again). */
  plan?: { create: string[]; update: string[]; delete: string[]; ban: string[]; reattest: string[] };
  error?: string;
}

const banKey = (b: PendingBan): string => `${b.node}|${b.selectors.map((s) => `${s.type}:${s.value}`).sort().join(",")}`;
const reattestKey = (r: PendingReattest): string => banKey({ node: r.node, selectors: r.previous });

export class EntrySync {
  private readonly pending = new Map<string, PendingBan>();
  private readonly reattests = new Map<string, PendingReattest>();
  /** Per pending re-attestation (its key): tries without progress in a row and when the next try is due (ms). */
  private readonly reattestBackoff = new Map<string, { tries: number; dueAt: number }>();
  private bans: SyncStatus["bans"] = [];
  private lastStatus: string | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private timer: NodeJS.Timeout | undefined;
  private stopWatch: (() => void) | undefined;
  private failures = 0;
  private active = false;
  private loaded = false;
  /** For /readyz: the last list read, and the last pass. */
  listState: { ok: true } | { ok: false; detail: string } = { ok: false, detail: "no pass yet" };
  spireState: { ok: true } | { ok: false; detail: string } = { ok: false, detail: "no pass yet" };
  last: PassResult | undefined;
  /** Resolves listeners waiting for a pass to finish (tests, retirement confirmation). */
  private readonly passListeners = new Set<(r: PassResult) => void>();

  constructor(private readonly o: EntrySyncOptions) {}

  private readonly engineMetrics: ReconcileMetrics = {
    write: (kind, op, result, n) => this.o.metrics.writes.inc({ kind, op, result }, n),
  };

  /** Start watching and passing (leader only). */
  async start(): Promise<void> {
    if (this.active) return;
    this.active = true;
    await this.loadPending();
    this.stopWatch = this.o.list.watch(
      () => this.trigger(),
      (e) => this.o.log.warn({ err: e instanceof Error ? e.message : String(e), store: this.o.list.describe }, "watching the node list failed; the interval still applies"),
    );
    this.trigger();
  }

  async stop(): Promise<void> {
    this.active = false;
    this.stopWatch?.();
    this.stopWatch = undefined;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
  }

  /** Run a pass now (coalesced: a pass under way runs one more after it). */
  trigger(): void {
    if (!this.active) return;
    if (this.running) {
      this.again = true;
      return;
    }
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.running = this.pass(false)
      .then((r) => {
        this.last = r;
        for (const l of this.passListeners) l(r);
      })
      .catch((e: unknown) => this.o.log.error({ err: e }, "sync pass failed unexpectedly"))
      .finally(() => {
        this.running = undefined;
        if (!this.active) return;
        if (this.again) {
          this.again = false;
          this.trigger();
          return;
        }
        const base = this.failures > 0 ? backoffDelayMs(this.failures, Math.random(), { baseMs: 500, capMs: 30_000 }) : this.o.intervalMs;
        const wait = this.reattests.size > 0 ? Math.min(base, this.nextReattestInMs()) : base;
        this.timer = setTimeout(() => this.trigger(), wait);
        this.timer.unref();
      });
  }

  /** The next pass's result (tests). */
  nextPass(): Promise<PassResult> {
    return new Promise((resolve) => {
      const l = (r: PassResult): void => {
        this.passListeners.delete(l);
        resolve(r);
      };
      this.passListeners.add(l);
    });
  }

  /** Pending bans survive a restart through the status document. */
  private async loadPending(): Promise<void> {
    if (this.loaded) return;
    try {
      const got = await this.o.status.read(4 * 1024 * 1024);
      if (got) {
        const s = parseSyncStatus(got.bytes);
        for (const b of s.pendingBans) this.pending.set(banKey(b), b);
        for (const r of s.pendingReattests ?? []) this.reattests.set(reattestKey(r), r);
        this.bans = s.bans;
      }
      this.loaded = true;
    } catch (e) {
      this.o.log.warn({ err: e instanceof Error ? e.message : String(e), store: this.o.status.describe }, "could not read the previous status (pending bans and re-attestations from before are not known)");
      this.loaded = true;
    }
  }

  private async readList(): Promise<{ list: NodeList } | { refused: string; code: string } | { absent: true }> {
    let doc;
    try {
      doc = await this.o.list.read(this.o.maxListBytes);
    } catch (e) {
      if (e instanceof DocumentTooLarge) return { refused: e.message, code: "node-list-too-large" };
      throw e;
    }
    if (!doc) return { absent: true };
    try {
      return { list: parseNodeList(doc.bytes, this.o.trustDomain, this.o.maxListBytes, this.o.trustedRoots()) };
    } catch (e) {
      if (e instanceof NodeListError) return { refused: e.message, code: e.code };
      throw e;
    }
  }

  /**
   * One pass. `dryRun`: the same plan, no entry written, no agent banned, no status written; the plan is returned.
   * Never throws for SPIRE or list problems: they are the outcome.
   */
  async pass(dryRun: boolean): Promise<PassResult> {
    const { log, metrics } = this.o;
    const empty = { creates: 0, updates: 0, deletes: 0, unchanged: 0, banned: [] as string[], reattested: [] as string[] };
    let read;
    try {
      read = await this.readList();
    } catch (e) {
      const detail = `reading ${this.o.list.describe}: ${e instanceof Error ? e.message : String(e)}`;
      this.listState = { ok: false, detail };
      this.failures++;
      metrics.passes.inc({ outcome: "error" });
      log.warn({ err: detail }, "node list unreadable; no entry changed");
      return { outcome: "error", error: detail, ...empty };
    }
    if ("absent" in read) {
      this.listState = { ok: false, detail: `${this.o.list.describe} does not exist yet` };
      metrics.passes.inc({ outcome: "no-list" });
      log.info({ store: this.o.list.describe }, "no node list yet; no entry changed");
      return { outcome: "no-list", ...empty };
    }
    if ("refused" in read) {
      this.listState = { ok: false, detail: `${read.code}: ${read.refused}` };
      metrics.listRefusals.inc({ code: read.code });
      metrics.passes.inc({ outcome: "list-refused" });
      log.error({ code: read.code, detail: read.refused, store: this.o.list.describe }, "node list refused; no entry changed");
      if (!dryRun) await this.writeStatus({ listDigest: this.lastDigest(), converged: false, error: `node list refused: ${read.code}: ${read.refused}` });
      return { outcome: "list-refused", error: read.refused, ...empty };
    }
    this.listState = { ok: true };
    const list = read.list;
    const digest = nodeListDigest(list);
    const listed = new Set(list.nodes.map((n) => n.name));
    try {
      const { report, removedNodes, movedNodes } = await syncNodeEntries(this.o.client, list, {
        dryRun,
        ...(this.o.now ? { now: this.o.now } : {}),
        metrics: this.engineMetrics,
        ...(this.o.pageSize !== undefined ? { pageSize: this.o.pageSize } : {}),
        ...(this.o.batchSize !== undefined ? { batchSize: this.o.batchSize } : {}),
      });
      this.spireState = { ok: true };
      const counts = { creates: report.creates.length, updates: report.updates.length, deletes: report.deletes.length, unchanged: report.unchanged };
      if (dryRun) {
        const ban = [...new Set(report.deletes.map((d) => parseNodeEntryId(d.key)?.name).filter((n): n is string => n !== undefined && !listed.has(n)))].sort();
        // a dry run writes nothing, so no update reports its selectors: the pending re-attestations and every updated
        // node (an update may or may not move the selectors)
        const reattest = [...new Set([...[...this.reattests.values()].map((r) => r.node), ...report.updates.map((u) => parseNodeEntryId(u.key)?.name).filter((n): n is string => n !== undefined)])].sort();
        return {
          outcome: "dry-run", digest, ...counts, banned: [], reattested: [],
          plan: { create: report.creates.map((c) => c.key), update: report.updates.map((u) => u.key), delete: report.deletes.map((d) => d.key), ban, reattest },
        };
      }
      for (const b of removedNodes) this.pending.set(banKey(b), b);
      // A node back in the list (re-admitted before its ban ran) is not banned.
      for (const [k, b] of this.pending) if (listed.has(b.node)) this.pending.delete(k);
      for (const r of movedNodes) {
        // a later move of the same node: its older pending re-attestations now wait for the newest selectors (an
        // agent still on an older generation is deleted for each, an agent on the newest ends them all)
        for (const [k, x] of this.reattests) {
          if (x.node !== r.node) continue;
          x.current = r.current;
          this.reattestBackoff.delete(k);
        }
        this.reattests.set(reattestKey(r), r);
        this.reattestBackoff.delete(reattestKey(r));
      }
      // a node that left the list is banned instead: also its agents still carrying a previous entry's selectors
      for (const [k, r] of this.reattests) {
        if (listed.has(r.node)) continue;
        this.reattests.delete(k);
        const ban = { node: r.node, selectors: r.previous };
        this.pending.set(banKey(ban), ban);
      }
      const banned = await this.runBans();
      const reattested = await this.runReattests();
      const itemErrors = [...report.creates, ...report.updates, ...report.deletes].filter((x) => x.outcome !== "ok");
      const errorText = itemErrors.length > 0 ? `${itemErrors.length} entry write(s) failed, e.g. ${itemErrors[0]?.key}: ${itemErrors[0]?.error ?? itemErrors[0]?.outcome}` : undefined;
      const banError = this.pending.size > 0 ? `${this.pending.size} ban(s) pending` : undefined;
      const converged = itemErrors.length === 0 && this.pending.size === 0;
      const entries = report.byKey.size;
      metrics.entries.set(entries);
      metrics.pendingBans.set(this.pending.size);
      metrics.pendingReattests.set(this.reattests.size);
      const outageInItems = itemErrors.some((x) => outageOf(x.cause) !== undefined);
      this.failures = converged ? 0 : this.failures + 1;
      if (!converged && outageInItems) this.spireState = { ok: false, detail: errorText ?? "SPIRE failed some writes" };
      const outcome: PassOutcome = converged ? "converged" : "item-errors";
      metrics.passes.inc({ outcome });
      const error = [errorText, banError].filter((x) => x !== undefined).join("; ");
      await this.writeStatus({ listDigest: digest, converged, entries, ...(error ? { error } : {}) });
      const changed = counts.creates + counts.updates + counts.deletes + banned.length + reattested.length > 0;
      const pendingReattests = this.reattests.size;
      (changed || !converged ? log.info.bind(log) : log.debug.bind(log))({ digest, ...counts, banned, reattested, pendingReattests, converged, ...(error ? { error } : {}) }, "sync pass");
      return { outcome, digest, ...counts, banned, reattested, ...(error ? { error } : {}) };
    } catch (e) {
      const o = outageOf(e);
      const detail = e instanceof Error ? e.message : String(e);
      this.failures++;
      if (o) this.spireState = { ok: false, detail: o.detail };
      metrics.passes.inc({ outcome: o ? "spire-unavailable" : "error" });
      log.warn({ err: detail, outage: o !== undefined, retryAfterFailures: this.failures }, o ? "SPIRE unavailable; retrying with backoff" : "sync pass failed; retrying with backoff");
      if (!dryRun) await this.writeStatus({ listDigest: this.lastDigest(), converged: false, error: detail.slice(0, 4000) });
      return { outcome: o ? "spire-unavailable" : "error", digest, error: detail, ...empty };
    }
  }

  private lastDigest(): string | null {
    if (!this.lastStatus) return null;
    try {
      return parseSyncStatus(this.lastStatus).listDigest;
    } catch {
      return null;
    }
  }

  private async runBans(): Promise<string[]> {
    const all: string[] = [];
    for (const [k, b] of [...this.pending].sort(([a], [c]) => (a < c ? -1 : 1))) {
      try {
        const banned = await banAgentsOf(this.o.client, b);
        this.pending.delete(k);
        this.o.metrics.bans.inc({ result: "ok" }, banned.length);
        all.push(...banned);
        this.bans = [...this.bans, { node: b.node, agents: banned, at: (this.o.now?.() ?? new Date()).toISOString() }].slice(-SYNC_STATUS_MAX_BANS);
        this.o.log.info({ node: b.node, agents: banned }, banned.length > 0 ? "agents of a removed node banned" : "no attested agent of the removed node to ban");
      } catch (e) {
        this.o.metrics.bans.inc({ result: "error" });
        this.o.log.warn({ node: b.node, err: e instanceof Error ? e.message : String(e) }, "banning the agents of a removed node failed; it stays pending");
      }
    }
    return all;
  }

  /** How long until the first pending re-attestation is due (at least 1 s, at most REATTEST_RECHECK_MS if one is due now). */
  private nextReattestInMs(): number {
    const now = (this.o.now?.() ?? new Date()).getTime();
    let next = REATTEST_RECHECK_CAP_MS;
    for (const k of this.reattests.keys()) next = Math.min(next, (this.reattestBackoff.get(k)?.dueAt ?? 0) - now);
    return Math.max(next <= 0 ? REATTEST_RECHECK_MS : next, 1_000);
  }

  /** A try of `k` that moved nothing: the next one after 5 s, 10 s, … up to REATTEST_RECHECK_CAP_MS. */
  private backOffReattest(k: string, now: number): void {
    const tries = (this.reattestBackoff.get(k)?.tries ?? 0) + 1;
    this.reattestBackoff.set(k, { tries, dueAt: now + Math.min(REATTEST_RECHECK_MS * 2 ** (tries - 1), REATTEST_RECHECK_CAP_MS) });
  }

  /**
   * Deletes the agents of the pending re-attestations that are due; a failed try stays pending, a done or
   * given-up one does not. A try that deleted agents is followed by another at the next pass (the agents attest
   * again within seconds); one that moved nothing backs off (`backOffReattest`).
   */
  private async runReattests(): Promise<string[]> {
    const all: string[] = [];
    const now = (this.o.now?.() ?? new Date()).getTime();
    const giveUp = this.o.reattestGiveUpMs ?? REATTEST_GIVE_UP_MS;
    for (const k of this.reattestBackoff.keys()) if (!this.reattests.has(k)) this.reattestBackoff.delete(k);
    for (const [k, r] of [...this.reattests].sort(([a], [c]) => (a < c ? -1 : 1))) {
      if (now - Date.parse(r.since) > giveUp) {
        this.reattests.delete(k);
        this.reattestBackoff.delete(k);
        this.o.metrics.reattests.inc({ result: "gave-up" });
        this.o.log.warn({ node: r.node, since: r.since, previous: r.previous, current: r.current }, "gave up re-attesting the agents of a node whose entry moved: no agent attested with the current selectors (is its spire-agent restarted on the renewed LDevID?)");
        continue;
      }
      if ((this.reattestBackoff.get(k)?.dueAt ?? 0) > now) continue;
      try {
        const out = await reattestAgentsOf(this.o.client, r);
        this.o.metrics.reattests.inc({ result: "deleted" }, out.deleted.length);
        all.push(...out.deleted);
        r.deletions += out.deleted.length;
        if (out.deleted.length > 0) this.o.log.info({ node: r.node, agents: out.deleted }, "agents of a node whose entry moved deleted: they attest again with the node's current LDevID");
        if (out.deleted.length > 0) this.reattestBackoff.delete(k);
        else if (!out.done) this.backOffReattest(k, now);
        if (out.done) {
          this.reattests.delete(k);
          this.reattestBackoff.delete(k);
          this.o.metrics.reattests.inc({ result: out.done === "attested" ? "done" : "no-agent" });
          this.o.log.info({ node: r.node, deletions: r.deletions }, out.done === "attested" ? "an agent of the node attested with its entry's current selectors" : "no attested agent of the node to re-attest");
        }
      } catch (e) {
        this.o.metrics.reattests.inc({ result: "error" });
        this.backOffReattest(k, now);
        this.o.log.warn({ node: r.node, err: e instanceof Error ? e.message : String(e) }, "deleting the agents of a node whose entry moved failed; it stays pending");
      }
    }
    return all;
  }

  private async writeStatus(s: Pick<SyncStatus, "listDigest" | "converged"> & { entries?: number; error?: string }): Promise<void> {
    const prev = this.lastStatus ? parseSyncStatus(this.lastStatus) : undefined;
    const body: Omit<SyncStatus, "at"> = {
      apiVersion: SYNC_STATUS_API_VERSION,
      listDigest: s.listDigest,
      converged: s.converged,
      entries: s.entries ?? prev?.entries ?? 0,
      pendingBans: [...this.pending.values()],
      ...(this.reattests.size > 0 ? { pendingReattests: [...this.reattests.values()] } : {}),
      bans: this.bans,
      ...(s.error !== undefined ? { error: s.error } : {}),
    };
    // Written when anything but the time changed (a quiet fleet does not rewrite its status every interval).
    if (prev) {
      const { at: _at, ...p } = prev;
      if (serializeSyncStatus(p as SyncStatus) === serializeSyncStatus(body as SyncStatus)) return;
    }
    const text = serializeSyncStatus({ ...body, at: (this.o.now?.() ?? new Date()).toISOString() });
    try {
      await this.o.status.write(Buffer.from(text));
      this.lastStatus = text;
    } catch (e) {
      this.o.log.warn({ err: e instanceof Error ? e.message : String(e), store: this.o.status.describe }, "writing the status failed (retried next pass)");
    }
  }
}
