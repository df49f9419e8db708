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
 * neither NetBox nor the list holds the leaf, and the selectors are exactly what made an agent that node. A ban
 * not yet done (SPIRE down) is kept pending and retried on every pass.
 *
 * A node whose entry's selectors move (a renewed LDevID: the CN's next generation, an update of the entry; or a root
 * no longer listed: its entry is deleted, the ID holding the root, while the node's other entries stay) needs its
 * agent to attest again: SPIRE keeps the selectors an agent attested with until it attests again, and a
 * spire-agent started with a valid agent SVID in its data_dir loads it and does not attest (a restart after the
 * renewal is not enough), so the moved entry would match no agent and the node's workloads would get no SVID
 * until the agent SVID's own rotation. So the agents (tpm_devid, not banned) carrying the entry's previous
 * selectors are deleted (DeleteAgent, not BanAgent): the agent's next call to SPIRE is refused with
 * AGENT_NOT_ATTESTED and spire-agent attests again (tpm_devid is re-attestable) with the LDevID its tpm_devid
 * plugin loaded when spire-agent started. That re-attestation is pending until an agent carrying the entry's
 * current selectors is listed: a spire-agent not yet restarted on the renewed files attests again with the old
 * leaf (the old selectors again) and is deleted again on the next pass, until it has been restarted. An agent
 * carrying the current selectors is never deleted, and only fleetd's own entries are followed.
 */
import { reconcile, type ItemResult, type ReconcileBackend, type ReconcileMetrics, type ReconcileReport } from "../reconcile/engine.js";
import { nodeEntries, parseNodeEntryId, type NodeEntrySpec, type NodeList } from "./nodeList.js";
import type { SpireServerClient } from "./server.js";
import { serverId } from "./spiffeId.js";
import type { Agent, Entry, EntryField, Selector } from "./wire.js";

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
/** What the re-attestations call. */
export type ReattestApi = Pick<SpireServerClient, "listAgents" | "deleteAgent">;

export interface NodeEntryBackendOptions {
  trustDomain: string;
  /** ListEntries page size (default 500). */
  pageSize?: number;
  /** Entries per batch write (default 200: 10,000 nodes are 50 BatchCreateEntry calls). */
  batchSize?: number;
  /** Called with every entry a delete removed (or found already gone): the bans are derived from them. */
  onDeleted?: (e: Entry) => void;
  /** Called with every entry an update wrote (before, after): the re-attestations are derived from them. */
  onUpdated?: (before: Entry, after: Entry) => void;
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
      return results.map((r, i) => {
        if (r.status.code === OK && r.entry) {
          const before = batch[i]?.current;
          if (before) o.onUpdated?.(before, r.entry);
          return { ok: true, object: r.entry };
        }
        return { ok: false, error: `${r.status.codeName}: ${r.status.message}` };
      });
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

/**
 * A node whose entry's selectors moved: the agents carrying `previous` (and none of the `current` sets) are to be
 * deleted so that they attest again, until an agent carrying one of the `current` sets is listed (or `since` is
 * older than the give-up time).
 */
export interface PendingReattest {
  node: string;
  /** The selectors of the node's entry before the update (or of its entry a root change removed). */
  previous: Selector[];
  /** The selectors of each of the node's entries now (one per root of the list). */
  current: Selector[][];
  /** When the move was written (ISO 8601). */
  since: string;
  /** Agents deleted for it so far. */
  deletions: number;
}

const copySelectors = (x: readonly Selector[]): Selector[] => x.map((s) => ({ type: s.type, value: s.value }));

/**
 * The re-attestations a run calls for: for each entry of a listed node that an update changed or a delete removed
 * (`before`: the entry as it was), one whose selectors are none of the node's declared entries' selectors now (a
 * renewed LDevID's CN; a root no longer listed). Entries fleetd does not own and nodes not listed give none.
 */
export function pendingReattestsOf(before: readonly Entry[], list: NodeList, at: Date): PendingReattest[] {
  const declared = new Map<string, Selector[][]>();
  for (const d of nodeEntries(list)) {
    const name = parseNodeEntryId(d.id)?.name;
    if (name !== undefined) declared.set(name, [...(declared.get(name) ?? []), copySelectors(d.selectors)]);
  }
  const out: PendingReattest[] = [];
  const seen = new Set<string>();
  for (const e of before) {
    const name = parseNodeEntryId(e.id)?.name;
    const current = name !== undefined ? declared.get(name) : undefined;
    if (name === undefined || !current) continue;
    const keys = e.selectors.map(selKey);
    if (current.some((c) => sameSet(c.map(selKey), keys))) continue;
    const k = `${name}|${[...keys].sort().join(",")}`;
    if (seen.has(k)) continue;
    seen.add(k);
    out.push({ node: name, previous: copySelectors(e.selectors), current, since: at.toISOString(), deletions: 0 });
  }
  return out;
}

export interface ReattestOutcome {
  /** Agents carrying the previous selectors that were deleted now. */
  deleted: string[];
  /**
   * Nothing is pending any more: an agent carrying the current selectors is listed ("attested"), or none carries
   * either and none was ever deleted for it ("no-agent": the node had no attested agent to move; a spire-agent
   * that starts later attests with the files it finds).
   */
  done?: "attested" | "no-agent";
}

const agentFilter = (selectors: Selector[]) => ({ byAttestationType: "tpm_devid", byBanned: false, bySelectors: { selectors, match: "MATCH_SUPERSET" as const } });

/**
 * One try of a pending re-attestation: deletes every agent (tpm_devid, not banned) whose selectors include all of
 * `r.previous` and not all of any `r.current` set, then reports whether an agent carrying all of one is listed
 * (the caller counts `deleted` into `r.deletions`).
 */
export async function reattestAgentsOf(client: ReattestApi, r: PendingReattest): Promise<ReattestOutcome> {
  const deleted: string[] = [];
  const carriesCurrent = (a: Agent): boolean => !a.banned && r.current.some((c) => hasAll(a.selectors, c));
  for (const a of await client.listAgents(agentFilter(r.previous))) {
    if (a.banned || !hasAll(a.selectors, r.previous) || carriesCurrent(a)) continue;
    await client.deleteAgent(a.id);
    deleted.push(a.id);
  }
  for (const c of r.current) {
    if ((await client.listAgents(agentFilter(c))).some(carriesCurrent)) return { deleted, done: "attested" };
  }
  if (deleted.length === 0 && r.deletions === 0) return { deleted, done: "no-agent" };
  return { deleted };
}

export interface SyncOptions {
  dryRun?: boolean;
  metrics?: ReconcileMetrics;
  signal?: AbortSignal;
  pageSize?: number;
  batchSize?: number;
  /** The time recorded in re-attestations (tests). */
  now?: () => Date;
}

export interface SyncResult {
  report: ReconcileReport<Entry, string>;
  /** Nodes whose entries were removed in this run and that are not in the list any more (their agents get banned). */
  removedNodes: PendingBan[];
  /** Listed nodes whose entries' selectors this run moved (their agents are to attest again): `pendingReattestsOf`. */
  movedNodes: PendingReattest[];
}

/**
 * One reconcile of SPIRE's node entries to `list` (no bans: see `EntrySync` for the loop that bans and retries).
 * Throws before any write when the listing fails; write failures are per-item outcomes in the report.
 */
export async function syncNodeEntries(client: EntryApi, list: NodeList, o: SyncOptions = {}): Promise<SyncResult> {
  const deleted: Entry[] = [];
  const changed: Entry[] = [];
  const backend = nodeEntryBackend(client, {
    trustDomain: list.trustDomain,
    ...(o.pageSize !== undefined ? { pageSize: o.pageSize } : {}),
    ...(o.batchSize !== undefined ? { batchSize: o.batchSize } : {}),
    onDeleted: (e) => deleted.push(e),
    onUpdated: (before) => changed.push(before),
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
  const movedNodes = pendingReattestsOf([...changed, ...deleted], list, o.now?.() ?? new Date());
  return { report, removedNodes, movedNodes };
}
