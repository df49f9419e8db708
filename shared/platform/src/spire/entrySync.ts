/**
 * The SPIRE node-entry sync: the reconcile engine's third user (after NetBox and Tinkerbell), with a SPIRE
 * backend. Declared = `nodeEntries(list)`; current = the entries parented to `spiffe://<td>/spire/server`
 * (ListEntries filtered by parent, paged); key = the entry ID, which fleetd chooses deterministically
 * (`fleetd.node.<name>.<root SHA-1>`).
 *
 * Ownership is the ID prefix `fleetd.node.` (and the parent): SPIRE accepts client-chosen IDs, so ownership needs
 * no field a workload sees (the `hint` is handed to workloads by the Workload API, it is not a label), a lost
 * create answer retried is ALREADY_EXISTS on the same ID rather than a second entry, and a prefix match is all
 * it takes to leave everyone else alone. Entries of other owners (other IDs, join-token aliases) are counted and
 * never written; workload entries parented to a node entry are not even listed (another parent).
 *
 * A node that leaves the list loses its entry and its agents are banned: ListAgents (tpm_devid, not banned)
 * with the removed entry's selectors (`subject:cn:<CN>` and `ca:fingerprint:<root>`, MATCH_SUPERSET, checked
 * again here), then BanAgent each. Not by the agent ID SPIRE derives from the LDevID leaf (SHA-1 of its DER):
 * neither NetBox nor the list holds the leaf, and the selectors are exactly what made an agent that node. Agents
 * of an older LDevID generation cannot re-attest (their certificate's CN no longer matches) and their SVIDs
 * expire. A ban not yet done (SPIRE down) is kept pending and retried on every pass.
 */
import { reconcile, type ItemResult, type ReconcileBackend, type ReconcileMetrics, type ReconcileReport } from "../reconcile/engine.js";
import { nodeEntries, parseNodeEntryId, type NodeEntrySpec, type NodeList } from "./nodeList.js";
import type { SpireServerClient } from "./server.js";
import { serverId } from "./spiffeId.js";
import type { Entry, EntryField, Selector } from "./wire.js";

/** Every field of an entry fleetd manages: the update mask (never left out: SPIRE would overwrite all fields). */
export const MANAGED_ENTRY_FIELDS: readonly EntryField[] = ["spiffeId", "parentId", "selectors", "x509SvidTtl", "jwtSvidTtl", "federatesWith", "admin", "downstream", "expiresAt", "dnsNames", "storeSvid", "hint"];

/** A declared node entry with every managed field set (SPIRE's defaults: 0 TTL = the server's default). */
export function fullSpec(d: NodeEntrySpec): Required<NodeEntrySpec> {
  return {
    id: d.id,
    spiffeId: d.spiffeId,
    parentId: d.parentId,
    selectors: d.selectors,
    x509SvidTtl: d.x509SvidTtl ?? 0,
    jwtSvidTtl: d.jwtSvidTtl ?? 0,
    federatesWith: d.federatesWith ?? [],
    admin: d.admin ?? false,
    downstream: d.downstream ?? false,
    expiresAt: d.expiresAt ?? 0,
    dnsNames: d.dnsNames ?? [],
    storeSvid: d.storeSvid ?? false,
    hint: d.hint ?? "",
  };
}

const selKey = (s: Selector): string => `${s.type}:${s.value}`;
const sameSet = (a: readonly string[], b: readonly string[]): boolean => {
  if (a.length !== b.length) return false;
  const x = [...a].sort();
  const y = [...b].sort();
  return x.every((v, i) => v === y[i]);
};

/** True when `current` holds exactly what fleetd declares in every managed field (then nothing is written). */
export function sameEntry(current: Entry, declared: NodeEntrySpec): boolean {
  const d = fullSpec(declared);
  return (
    current.spiffeId === d.spiffeId &&
    current.parentId === d.parentId &&
    sameSet(current.selectors.map(selKey), d.selectors.map(selKey)) &&
    current.x509SvidTtl === d.x509SvidTtl &&
    current.jwtSvidTtl === d.jwtSvidTtl &&
    sameSet(current.federatesWith, d.federatesWith) &&
    current.admin === d.admin &&
    current.downstream === d.downstream &&
    current.expiresAt === d.expiresAt &&
    sameSet(current.dnsNames, d.dnsNames) &&
    current.storeSvid === d.storeSvid &&
    current.hint === d.hint
  );
}

/** What the entry backend calls (a SpireServerClient; tests pass a fake). */
export type EntryApi = Pick<SpireServerClient, "listEntriesPage" | "batchCreateEntry" | "batchUpdateEntry" | "batchDeleteEntry">;
/** What the bans call. */
export type AgentApi = Pick<SpireServerClient, "listAgents" | "banAgent">;

export interface NodeEntryBackendOptions {
  trustDomain: string;
  /** ListEntries page size (default 500). */
  pageSize?: number;
  /** Entries per batch write (default 200: 10,000 nodes are 50 BatchCreateEntry calls). */
  batchSize?: number;
  /** Called with every entry a delete removed (or found already gone): the bans are derived from them. */
  onDeleted?: (e: Entry) => void;
}

const OK = 0;
const ALREADY_EXISTS = 6;
const NOT_FOUND = 5;

/** The engine backend for fleetd's SPIRE node entries. */
export function nodeEntryBackend(client: EntryApi, o: NodeEntryBackendOptions): ReconcileBackend<Entry, NodeEntrySpec> {
  const parent = serverId(o.trustDomain);
  const pageSize = o.pageSize ?? 500;
  return {
    kind: "spire.entry",
    batchSize: o.batchSize ?? 200,
    async listCurrent(page) {
      const r = await client.listEntriesPage({ byParentId: parent }, pageSize, page ?? "");
      return { items: r.entries, next: r.next };
    },
    owned: (e) => e.parentId === parent && parseNodeEntryId(e.id) !== undefined,
    keyOfCurrent: (e) => e.id,
    keyOfDeclared: (d) => d.id,
    same: sameEntry,
    async create(batch): Promise<ItemResult<Entry>[]> {
      const results = await client.batchCreateEntry(batch.map(fullSpec));
      return results.map((r, i) => {
        if (r.status.code === OK && r.entry) return { ok: true, object: r.entry };
        // Our own ID already there (a create whose answer was lost): the entry exists; the next run diffs it.
        if (r.status.code === ALREADY_EXISTS && r.entry?.id === batch[i]?.id) return { ok: true, object: r.entry };
        const similar = r.status.code === ALREADY_EXISTS && r.entry ? `: a similar entry ${r.entry.id} exists that fleetd does not own` : "";
        return { ok: false, error: `${r.status.codeName}: ${r.status.message}${similar}` };
      });
    },
    async update(batch): Promise<ItemResult<Entry>[]> {
      const results = await client.batchUpdateEntry(
        batch.map((u) => fullSpec({ ...u.declared, id: u.current.id })),
        MANAGED_ENTRY_FIELDS,
      );
      return results.map((r) => (r.status.code === OK && r.entry ? { ok: true, object: r.entry } : { ok: false, error: `${r.status.codeName}: ${r.status.message}` }));
    },
    async delete(batch): Promise<ItemResult<unknown>[]> {
      const results = await client.batchDeleteEntry(batch.map((e) => e.id));
      return results.map((r, i) => {
        if (r.status.code === OK || r.status.code === NOT_FOUND) {
          o.onDeleted?.(batch[i] as Entry);
          return { ok: true };
        }
        return { ok: false, error: `${r.status.codeName}: ${r.status.message}` };
      });
    },
  };
}

/** A node whose agents are to be banned: its name and the selectors of an entry that was removed. */
export interface PendingBan {
  node: string;
  selectors: Selector[];
}

export interface BanOutcome {
  node: string;
  /** Agents banned now. */
  banned: string[];
  /** Set when the ban could not be done (it stays pending). */
  error?: string;
}

/** The selectors of a removed fleetd entry as a pending ban (undefined for an entry that is not fleetd's). */
export function pendingBanOf(e: Entry): PendingBan | undefined {
  const id = parseNodeEntryId(e.id);
  if (!id) return undefined;
  return { node: id.name, selectors: e.selectors.map((s) => ({ type: s.type, value: s.value })) };
}

const hasAll = (agent: readonly Selector[], want: readonly Selector[]): boolean => {
  const have = new Set(agent.map(selKey));
  return want.every((s) => have.has(selKey(s)));
};

/** Bans every agent (tpm_devid, not banned yet) whose selectors include all of `ban.selectors`. */
export async function banAgentsOf(client: AgentApi, ban: PendingBan): Promise<string[]> {
  const agents = await client.listAgents({ byAttestationType: "tpm_devid", byBanned: false, bySelectors: { selectors: ban.selectors, match: "MATCH_SUPERSET" } });
  const banned: string[] = [];
  for (const a of agents) {
    if (a.banned || !hasAll(a.selectors, ban.selectors)) continue;
    await client.banAgent(a.id);
    banned.push(a.id);
  }
  return banned;
}

export interface SyncOptions {
  dryRun?: boolean;
  metrics?: ReconcileMetrics;
  signal?: AbortSignal;
  pageSize?: number;
  batchSize?: number;
}

export interface SyncResult {
  report: ReconcileReport<Entry, string>;
  /** Nodes whose entries were removed in this run and that are not in the list any more (their agents get banned). */
  removedNodes: PendingBan[];
}

/**
 * One reconcile of SPIRE's node entries to `list` (no bans: see `EntrySync` for the loop that bans and retries).
 * Throws before any write when the listing fails; write failures are per-item outcomes in the report.
 */
export async function syncNodeEntries(client: EntryApi, list: NodeList, o: SyncOptions = {}): Promise<SyncResult> {
  const deleted: Entry[] = [];
  const backend = nodeEntryBackend(client, {
    trustDomain: list.trustDomain,
    ...(o.pageSize !== undefined ? { pageSize: o.pageSize } : {}),
    ...(o.batchSize !== undefined ? { batchSize: o.batchSize } : {}),
    onDeleted: (e) => deleted.push(e),
  });
  const report = await reconcile(backend, nodeEntries(list), {
    ...(o.dryRun !== undefined ? { dryRun: o.dryRun } : {}),
    ...(o.metrics ? { metrics: o.metrics } : {}),
    ...(o.signal ? { signal: o.signal } : {}),
  });
  const listed = new Set(list.nodes.map((n) => n.name));
  const removedNodes = deleted
    .map(pendingBanOf)
    .filter((b): b is PendingBan => b !== undefined && !listed.has(b.node));
  return { report, removedNodes };
}
