/**
 * A client of the SPIRE server's admin API over its Unix socket (`server { socket_path }`): the Entry API (paged
 * list, count, batch create/update/delete with per-item statuses), the Agent API (list, ban, delete) and the gRPC
 * health check. Whoever can connect to the socket is "local" and may call every admin RPC (SPIRE
 * `pkg/server/api/middleware/caller.go`): no token, no TLS; the socket's mode (0770) is the access control.
 *
 * Calls fail fast when SPIRE is not there (no wait-for-ready) with a `SpireApiError` whose `outage()` says so; a
 * refusal is a `spire-refused` error; batch RPCs answer OK and carry each item's own status, which this client
 * returns in request order and never turns into an exception.
 */
import * as grpc from "@grpc/grpc-js";
import type { MethodDefinition } from "@grpc/proto-loader";
import { fromServiceError, SpireApiError } from "./errors.js";
import { serverApi } from "./proto.js";
import {
  type Agent,
  agentFromWire,
  BatchDeleteResponse,
  BatchEntryResponse,
  CountEntriesResponse,
  type Entry,
  type EntryField,
  entryFromWire,
  entryMask,
  type EntrySpec,
  entryToWire,
  HealthCheckResponse,
  type ItemStatus,
  itemStatus,
  ListAgentsResponse,
  ListEntriesResponse,
  readAnswer,
  type Selector,
  selectorsToWire,
  spiffeIdToWire,
} from "./wire.js";

export type SelectorMatch = "MATCH_EXACT" | "MATCH_SUBSET" | "MATCH_SUPERSET" | "MATCH_ANY";

export interface EntryFilter {
  bySpiffeId?: string;
  byParentId?: string;
  bySelectors?: { selectors: readonly Selector[]; match: SelectorMatch };
  byHint?: string;
}

export interface AgentFilter {
  /** e.g. `tpm_devid` */
  byAttestationType?: string;
  bySelectors?: { selectors: readonly Selector[]; match: SelectorMatch };
  byBanned?: boolean;
}

/** One item of a BatchCreateEntry or BatchUpdateEntry answer, in request order. */
export interface EntryResult {
  readonly status: ItemStatus;
  /** OK: the entry as stored. ALREADY_EXISTS on create: the similar entry that exists (SPIRE returns it). */
  readonly entry?: Entry;
}

/** One item of a BatchDeleteEntry answer, in request order. */
export interface DeleteResult {
  readonly status: ItemStatus;
  readonly id: string;
}

export type RpcOutcome = "ok" | "unavailable" | "refused" | "bad_response";

export interface SpireServerClientOptions {
  /** The server's admin socket (`server { socket_path }`), an absolute path. */
  socketPath: string;
  /** Deadline of each RPC (default 60 s: a batch of 1,000 creates can take 20 s on SQLite). */
  timeoutMs?: number;
  /** Called once per RPC with its outcome (metrics; tests count RPCs with it). */
  onRpc?: (rpc: string, outcome: RpcOutcome, ms: number) => void;
  /** Largest answer accepted (default 16 MiB; pages keep answers far below it). */
  maxReceiveBytes?: number;
}

/** SPIRE's largest ListEntries page is unbounded; fleetd asks for this many unless told otherwise. */
export const DEFAULT_PAGE_SIZE = 500;

export class SpireServerClient {
  private readonly client: grpc.Client;
  private readonly timeoutMs: number;
  private readonly onRpc: SpireServerClientOptions["onRpc"];

  constructor(opts: SpireServerClientOptions) {
    if (!opts.socketPath.startsWith("/")) throw new SpireApiError("spire-bad-request", "connect", undefined, `the admin socket path must be absolute: ${opts.socketPath}`);
    this.timeoutMs = opts.timeoutMs ?? 60_000;
    this.onRpc = opts.onRpc;
    this.client = new grpc.Client(`unix://${opts.socketPath}`, grpc.credentials.createInsecure(), {
      "grpc.max_receive_message_length": opts.maxReceiveBytes ?? 16 * 1024 * 1024,
      // A local socket: when SPIRE comes back, notice within a second or two (grpc's default backoff grows to 120 s).
      "grpc.initial_reconnect_backoff_ms": 100,
      "grpc.max_reconnect_backoff_ms": 2000,
    });
  }

  close(): void {
    this.client.close();
  }

  private async call(service: string, method: string, request: object): Promise<unknown> {
    const def = serverApi()[service] as Record<string, MethodDefinition<object, unknown>> | undefined;
    const m = def?.[method];
    const rpc = `${service.split(".").pop() ?? service}/${method}`;
    if (!m) throw new SpireApiError("spire-bad-request", rpc, undefined, "not in the API subset");
    const start = Date.now();
    try {
      const answer = await new Promise<unknown>((resolve, reject) => {
        this.client.makeUnaryRequest(m.path, m.requestSerialize, m.responseDeserialize, request, new grpc.Metadata(), { deadline: Date.now() + this.timeoutMs }, (err, value) =>
          err ? reject(err) : resolve(value),
        );
      });
      this.onRpc?.(rpc, "ok", Date.now() - start);
      return answer;
    } catch (e) {
      const err = fromServiceError(rpc, e);
      this.onRpc?.(rpc, err.code === "spire-unavailable" ? "unavailable" : err.code === "spire-bad-response" ? "bad_response" : "refused", Date.now() - start);
      throw err;
    }
  }

  // ---- health ----

  /** `grpc.health.v1.Health/Check` on the admin socket (what `spire-server healthcheck` asks). */
  async health(): Promise<"UNKNOWN" | "SERVING" | "NOT_SERVING" | "SERVICE_UNKNOWN"> {
    const rpc = "Health/Check";
    return readAnswer(rpc, HealthCheckResponse, await this.call("grpc.health.v1.Health", "Check", { service: "" })).status;
  }

  // ---- Entry API ----

  private entryFilter(rpc: string, f: EntryFilter): Record<string, unknown> {
    const w: Record<string, unknown> = {};
    if (f.bySpiffeId !== undefined) w["by_spiffe_id"] = spiffeIdToWire(rpc, f.bySpiffeId, "filter bySpiffeId");
    if (f.byParentId !== undefined) w["by_parent_id"] = spiffeIdToWire(rpc, f.byParentId, "filter byParentId");
    if (f.bySelectors !== undefined) w["by_selectors"] = { selectors: selectorsToWire(rpc, f.bySelectors.selectors, "filter bySelectors"), match: f.bySelectors.match };
    if (f.byHint !== undefined) w["by_hint"] = { value: f.byHint };
    return w;
  }

  /** `Entry/CountEntries`. */
  async countEntries(filter: EntryFilter = {}): Promise<number> {
    const rpc = "Entry/CountEntries";
    const req = { filter: this.entryFilter(rpc, filter) };
    return readAnswer(rpc, CountEntriesResponse, await this.call("spire.api.server.entry.v1.Entry", "CountEntries", req)).count;
  }

  /**
   * `Entry/ListEntries`, one page per yield, until SPIRE's page token is empty (with a page size SPIRE returns a
   * token after every non-empty page, so the last call answers an empty page).
   */
  async *entryPages(filter: EntryFilter = {}, pageSize = DEFAULT_PAGE_SIZE): AsyncGenerator<Entry[]> {
    const rpc = "Entry/ListEntries";
    if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > 0x7fffffff) throw new SpireApiError("spire-bad-request", rpc, undefined, "the page size must be a positive integer (0 would ask for everything at once)");
    const f = this.entryFilter(rpc, filter);
    let token = "";
    const seen = new Set<string>();
    for (;;) {
      const page = readAnswer(rpc, ListEntriesResponse, await this.call("spire.api.server.entry.v1.Entry", "ListEntries", { filter: f, page_size: pageSize, page_token: token }));
      if (page.entries.length > pageSize) throw new SpireApiError("spire-bad-response", rpc, undefined, `a page of ${page.entries.length} entries for a page size of ${pageSize}`);
      if (page.next_page_token !== "" && seen.has(page.next_page_token)) throw new SpireApiError("spire-bad-response", rpc, undefined, `the page token ${page.next_page_token} came back twice`);
      seen.add(page.next_page_token);
      if (page.entries.length > 0) yield page.entries.map((e) => entryFromWire(rpc, e));
      if (page.next_page_token === "") return;
      token = page.next_page_token;
    }
  }

  /**
   * One `Entry/ListEntries` page: `token` "" for the first; `next` "" after the last (SPIRE answers a token after
   * every non-empty page, so the last call returns an empty page). For callers that drive paging themselves
   * (the reconcile engine's `listCurrent`).
   */
  async listEntriesPage(filter: EntryFilter, pageSize: number, token: string): Promise<{ entries: Entry[]; next: string }> {
    const rpc = "Entry/ListEntries";
    if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > 0x7fffffff) throw new SpireApiError("spire-bad-request", rpc, undefined, "the page size must be a positive integer (0 would ask for everything at once)");
    const page = readAnswer(rpc, ListEntriesResponse, await this.call("spire.api.server.entry.v1.Entry", "ListEntries", { filter: this.entryFilter(rpc, filter), page_size: pageSize, page_token: token }));
    if (page.entries.length > pageSize) throw new SpireApiError("spire-bad-response", rpc, undefined, `a page of ${page.entries.length} entries for a page size of ${pageSize}`);
    return { entries: page.entries.map((e) => entryFromWire(rpc, e)), next: page.entries.length === 0 ? "" : page.next_page_token };
  }

  /** Every entry the filter selects (all pages). */
  async listEntries(filter: EntryFilter = {}, pageSize = DEFAULT_PAGE_SIZE): Promise<Entry[]> {
    const all: Entry[] = [];
    for await (const page of this.entryPages(filter, pageSize)) all.push(...page);
    return all;
  }

  private checkBatch<T>(rpc: string, sent: number, results: T[]): T[] {
    if (results.length !== sent) throw new SpireApiError("spire-bad-response", rpc, undefined, `${results.length} results for ${sent} items`);
    return results;
  }

  private entryResults(rpc: string, sent: number, value: unknown): EntryResult[] {
    const a = readAnswer(rpc, BatchEntryResponse, value);
    return this.checkBatch(rpc, sent, a.results).map((r, i) => {
      const status = itemStatus(r.status);
      if (status.code === 0 && r.entry === null) throw new SpireApiError("spire-bad-response", rpc, undefined, `item ${i} is OK without its entry`);
      return { status, ...(r.entry !== null ? { entry: entryFromWire(rpc, r.entry) } : {}) };
    });
  }

  /** `Entry/BatchCreateEntry`: one result per entry, in order (OK, ALREADY_EXISTS with the similar entry, INVALID_ARGUMENT, …). */
  async batchCreateEntry(entries: readonly EntrySpec[]): Promise<EntryResult[]> {
    const rpc = "Entry/BatchCreateEntry";
    if (entries.length === 0) return [];
    const req = { entries: entries.map((e, i) => entryToWire(rpc, e, i)) };
    return this.entryResults(rpc, entries.length, await this.call("spire.api.server.entry.v1.Entry", "BatchCreateEntry", req));
  }

  /**
   * `Entry/BatchUpdateEntry` writing exactly `fields` of each entry (the `input_mask`; never left out, see
   * proto.ts). Each entry names its ID. Results in order (OK, NOT_FOUND, INVALID_ARGUMENT, …).
   */
  async batchUpdateEntry(entries: readonly (EntrySpec & { id: string })[], fields: readonly EntryField[]): Promise<EntryResult[]> {
    const rpc = "Entry/BatchUpdateEntry";
    const mask = entryMask(rpc, fields);
    if (entries.length === 0) return [];
    const req = { entries: entries.map((e, i) => entryToWire(rpc, e, i)), input_mask: mask };
    return this.entryResults(rpc, entries.length, await this.call("spire.api.server.entry.v1.Entry", "BatchUpdateEntry", req));
  }

  /** `Entry/BatchDeleteEntry`: one result per ID, in order (OK, NOT_FOUND, INVALID_ARGUMENT). */
  async batchDeleteEntry(ids: readonly string[]): Promise<DeleteResult[]> {
    const rpc = "Entry/BatchDeleteEntry";
    if (ids.length === 0) return [];
    if (ids.some((id) => id === "")) throw new SpireApiError("spire-bad-request", rpc, undefined, "an empty entry ID");
    const a = readAnswer(rpc, BatchDeleteResponse, await this.call("spire.api.server.entry.v1.Entry", "BatchDeleteEntry", { ids: [...ids] }));
    return this.checkBatch(rpc, ids.length, a.results).map((r) => ({ status: itemStatus(r.status), id: r.id }));
  }

  // ---- Agent API ----

  /** `Agent/ListAgents`, all pages. */
  async listAgents(filter: AgentFilter = {}, pageSize = DEFAULT_PAGE_SIZE): Promise<Agent[]> {
    const rpc = "Agent/ListAgents";
    const f: Record<string, unknown> = {};
    if (filter.byAttestationType !== undefined) f["by_attestation_type"] = filter.byAttestationType;
    if (filter.bySelectors !== undefined) f["by_selector_match"] = { selectors: selectorsToWire(rpc, filter.bySelectors.selectors, "filter bySelectors"), match: filter.bySelectors.match };
    if (filter.byBanned !== undefined) f["by_banned"] = { value: filter.byBanned };
    const all: Agent[] = [];
    let token = "";
    for (;;) {
      const page = readAnswer(rpc, ListAgentsResponse, await this.call("spire.api.server.agent.v1.Agent", "ListAgents", { filter: f, page_size: pageSize, page_token: token }));
      all.push(...page.agents.map((a) => agentFromWire(rpc, a)));
      if (page.next_page_token === "" || page.agents.length === 0) return all;
      token = page.next_page_token;
    }
  }

  /**
   * `Agent/BanAgent`: SPIRE refuses the agent's SVID from now on (its next call fails, it must not re-attest until
   * deleted). An unknown agent is a `spire-refused` NOT_FOUND.
   */
  async banAgent(agentId: string): Promise<void> {
    const rpc = "Agent/BanAgent";
    await this.call("spire.api.server.agent.v1.Agent", "BanAgent", { id: spiffeIdToWire(rpc, agentId, "agent ID") });
  }

  /** `Agent/DeleteAgent`: forgets the agent (a banned agent may attest again afterwards). */
  async deleteAgent(agentId: string): Promise<void> {
    const rpc = "Agent/DeleteAgent";
    await this.call("spire.api.server.agent.v1.Agent", "DeleteAgent", { id: spiffeIdToWire(rpc, agentId, "agent ID") });
  }
}
