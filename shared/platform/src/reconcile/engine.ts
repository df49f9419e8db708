/**
 * The one sync loop of fleetd (style.md §4), in the shape of spire-controller-manager's
 * `pkg/spireentry/reconciler.go`: list what exists, take what should exist from the caller, key both the same
 * way, diff into create / update / delete, apply in batches, read each item's own result, count outcomes in
 * metrics, touch only what fleetd owns.
 *
 * The engine knows nothing of NetBox, Kubernetes or SPIRE: a backend (see `ReconcileBackend`) lists, keys,
 * compares and writes one kind of object. Everything here is pure TypeScript; its one import is the refusal shape `CodedError`.
 *
 * The run has two halves, kept apart so that every refusal happens before the first write:
 *   1. plan — check the declared set (duplicate keys throw), list every page, drop what is not ours, pick one
 *      keeper per duplicated key, and diff into creates / updates / deletes / conflicts;
 *   2. apply — creates, then updates, then deletes, each in batches; a failing batch marks its own items as
 *      errors and the run goes on with the next batch.
 */
import { CodedError } from "../fleet/codedError.js";

/** Result of one item of a batch write. `object` is the object as the server now holds it, when known. */
/** `cause` is the original error, for callers that classify it (an outage is not a refusal). */
export type ItemResult<R = never> = { ok: true; object?: R } | { ok: false; error: string; cause?: unknown };

/** One page of a listing; `next` is the token of the following page (absent or "" on the last page). */
export interface Page<Current> {
  items: Current[];
  next?: string | undefined;
}

export interface ReconcileBackend<Current, Declared, Key extends string = string> {
  /** Object kind for metrics and reports, e.g. "netbox.device", "tinkerbell.hardware", "spire.entry". */
  readonly kind: string;
  /** One page of the current objects; `page` is undefined for the first page, then the previous `next`. */
  listCurrent(page: string | undefined, signal?: AbortSignal): Promise<Page<Current>>;
  /**
   * Optional: fetch the current objects of declared keys that the listing did not return. For a backend whose
   * listing is already narrowed to fleetd's objects (a Kubernetes label selector), this is how an object of the
   * same name owned by someone else is found before fleetd tries to create it. Called once per run with the
   * sorted keys that would otherwise be created; return each object at most once, missing keys are left out.
   */
  lookup?(keys: readonly Key[], signal?: AbortSignal): Promise<Current[]>;
  /** True when fleetd owns the object (ownership label fleetd.io/…, tag, ID prefix). Others are never written. */
  owned(current: Current): boolean;
  keyOfCurrent(current: Current): Key;
  keyOfDeclared(declared: Declared): Key;
  /** True when `current` equals `declared` in every field fleetd manages (then nothing is written). */
  same(current: Current, declared: Declared): boolean;
  /**
   * Which of several owned objects with one key is kept; must return one of `dupes` (given in listing order).
   * Default: the first in listing order. Listing order is only stable if the server sorts: a backend with
   * IDs or creation times should pass a stable rule (lowest NetBox id; oldest creationTimestamp, then uid).
   */
  pickKeeper?(dupes: readonly Current[]): Current;
  /** Per-item results in the order of `batch`. A throw marks the whole batch as failed. */
  create(batch: readonly Declared[], signal?: AbortSignal): Promise<ItemResult<Current>[]>;
  update(batch: readonly Replacement<Current, Declared>[], signal?: AbortSignal): Promise<ItemResult<Current>[]>;
  /** Per-item results; an `object` in them is ignored. */
  delete(batch: readonly Current[], signal?: AbortSignal): Promise<ItemResult<unknown>[]>;
  /** Items per write call; default 50. */
  readonly batchSize?: number;
}

export interface Replacement<Current, Declared> {
  current: Current;
  declared: Declared;
}

export type WriteOp = "create" | "update" | "delete";
/**
 * ok / error: the backend's answer for the item; dry_run: would have been written; conflict: a create refused
 * because an object of that key exists and is not fleetd's; skipped: not attempted because the run was aborted.
 */
export type Outcome = "ok" | "error" | "dry_run" | "conflict" | "skipped";
/** Outcomes counted in metrics (skipped items were never written, so they are not counted). */
export type MetricResult = Exclude<Outcome, "skipped">;

/** Implemented by the caller (e.g. a prom-client counter `fleetd_reconcile_writes_total{kind,op,result}`). */
export interface ReconcileMetrics {
  write(kind: string, op: WriteOp, result: MetricResult, n: number): void;
}

export interface ReconcileOptions {
  /** Compute the same plan, write nothing, report every write as "dry_run". */
  dryRun?: boolean;
  /** Delete the extra owned objects of a duplicated key (default true); false = report them only. */
  deleteDuplicates?: boolean;
  /** Delete owned objects whose key is not declared (default true); false for partial declared sets. */
  deleteUndeclared?: boolean;
  metrics?: ReconcileMetrics;
  /** Checked before every page and every batch; passed on to the backend. */
  signal?: AbortSignal;
  /** Most pages read before giving up on a server that pages forever; default 1000. */
  maxPages?: number;
}

export interface ItemOutcome<Key> {
  key: Key;
  outcome: Outcome;
  error?: string;
  /** The original error of an "error" outcome (the item's own, or the batch's throw). */
  cause?: unknown;
}

export interface DeleteOutcome<Key> extends ItemOutcome<Key> {
  /** duplicate: an extra object of a kept key; undeclared: its key is not declared. */
  reason: "duplicate" | "undeclared";
}

export interface ReconcileReport<Current, Key> {
  kind: string;
  dryRun: boolean;
  /** The signal fired between batches: the items not yet written are reported as "skipped". */
  aborted: boolean;
  pages: number;
  /** Objects returned by the listing (owned or not), plus those returned by `lookup`. */
  listed: number;
  /** Listed (or looked-up) objects fleetd does not own: never updated or deleted. */
  ignoredUnowned: number;
  /** Keys with several owned objects of which one was kept; `extra` is how many others there were. */
  duplicates: Array<{ key: Key; kept: Current; extra: number }>;
  /** Includes declared keys held by an object fleetd does not own (outcome "conflict", nothing written). */
  creates: ItemOutcome<Key>[];
  updates: ItemOutcome<Key>[];
  deletes: DeleteOutcome<Key>[];
  unchanged: number;
  /** Owned, not declared, and left in place because deleteUndeclared is false. */
  undeclared: Key[];
  /**
   * For each declared key, the object as it stands after the run when known: the created or updated object the
   * backend returned, else the current one (unchanged, dry-run update, failed update). Absent for creates that
   * were not done (dry run, error, conflict). Lets a caller use IDs of one kind when rendering the next.
   */
  byKey: ReadonlyMap<Key, Current>;
}

export const RECONCILE_ERROR_CODES = ["duplicate-declared-key", "repeated-page-token", "too-many-pages", "bad-keeper", "bad-option"] as const;
export type ReconcileErrorCode = (typeof RECONCILE_ERROR_CODES)[number];

/** A refusal before any write: the caller's input, the backend or the server broke a rule of the engine. */
export class ReconcileError extends CodedError<ReconcileErrorCode> {
  override readonly name = "ReconcileError";
}

const DEFAULT_BATCH_SIZE = 50;
const DEFAULT_MAX_PAGES = 1000;

/** Code-unit order: the same on every machine and locale. */
const byKeyOrder = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

const message = (e: unknown): string => (e instanceof Error ? e.message : String(e));

interface Plan<C, D, K extends string> {
  creates: Array<{ key: K; item: D }>;
  conflicts: K[];
  updates: Array<{ key: K; item: Replacement<C, D> }>;
  deletes: Array<{ key: K; item: C; reason: "duplicate" | "undeclared" }>;
  duplicates: Array<{ key: K; kept: C; extra: number }>;
  unchanged: Array<{ key: K; current: C }>;
  undeclared: K[];
}

/**
 * Makes the current objects of `backend` match `declared`, for the objects fleetd owns. Throws
 * `ReconcileError` (before any write) on duplicate declared keys, a bad listing or a bad keeper; errors of the
 * writes themselves never throw, they are per-item outcomes in the report.
 */
export async function reconcile<C, D, K extends string>(
  backend: ReconcileBackend<C, D, K>,
  declared: readonly D[],
  options: ReconcileOptions = {},
): Promise<ReconcileReport<C, K>> {
  const dryRun = options.dryRun ?? false;
  const batchSize = backend.batchSize ?? DEFAULT_BATCH_SIZE;
  const maxPages = options.maxPages ?? DEFAULT_MAX_PAGES;
  if (!Number.isInteger(batchSize) || batchSize < 1) throw new ReconcileError("bad-option", `${backend.kind}: batchSize must be a positive integer, got ${batchSize}`);
  if (!Number.isInteger(maxPages) || maxPages < 1) throw new ReconcileError("bad-option", `${backend.kind}: maxPages must be a positive integer, got ${maxPages}`);
  const { signal } = options;

  const declaredByKey = indexDeclared(backend, declared);
  const listing = await listAll(backend, maxPages, signal);

  const owned = new Map<K, C[]>();
  const unownedKeys = new Set<K>();
  let ignoredUnowned = 0;
  const take = (c: C): void => {
    const key = backend.keyOfCurrent(c);
    if (!backend.owned(c)) {
      ignoredUnowned++;
      unownedKeys.add(key);
      return;
    }
    const group = owned.get(key);
    if (group) group.push(c);
    else owned.set(key, [c]);
  };
  listing.items.forEach(take);
  let listed = listing.items.length;

  if (backend.lookup) {
    const missing = [...declaredByKey.keys()].filter((k) => !owned.has(k)).sort(byKeyOrder);
    if (missing.length > 0) {
      signal?.throwIfAborted();
      const asked = new Set<K>(missing);
      // Only keys that were asked for count: an answer for another key cannot add objects to the diff.
      const found = (await backend.lookup(missing, signal)).filter((c) => asked.has(backend.keyOfCurrent(c)));
      listed += found.length;
      found.forEach(take);
    }
  }

  const plan = diff(backend, declaredByKey, owned, unownedKeys, options);
  return apply(backend, plan, { dryRun, batchSize, signal, metrics: options.metrics, pages: listing.pages, listed, ignoredUnowned });
}

function indexDeclared<C, D, K extends string>(backend: ReconcileBackend<C, D, K>, declared: readonly D[]): Map<K, D> {
  const out = new Map<K, D>();
  const dupes = new Set<K>();
  for (const d of declared) {
    const key = backend.keyOfDeclared(d);
    if (out.has(key)) dupes.add(key);
    else out.set(key, d);
  }
  if (dupes.size > 0) {
    const keys = [...dupes].sort(byKeyOrder);
    throw new ReconcileError("duplicate-declared-key", `${backend.kind}: ${keys.length} key(s) declared more than once, nothing was written: ${keys.slice(0, 10).join(", ")}${keys.length > 10 ? ", …" : ""}`);
  }
  return out;
}

async function listAll<C, D, K extends string>(backend: ReconcileBackend<C, D, K>, maxPages: number, signal: AbortSignal | undefined): Promise<{ items: C[]; pages: number }> {
  const items: C[] = [];
  const seen = new Set<string>();
  let page: string | undefined;
  for (let pages = 1; pages <= maxPages; pages++) {
    signal?.throwIfAborted();
    const answer = await backend.listCurrent(page, signal);
    items.push(...answer.items);
    const next = answer.next;
    if (next === undefined || next === "") return { items, pages };
    if (seen.has(next)) throw new ReconcileError("repeated-page-token", `${backend.kind}: the listing returned page token ${JSON.stringify(next)} a second time (after page ${pages}): refusing to loop`);
    seen.add(next);
    page = next;
  }
  throw new ReconcileError("too-many-pages", `${backend.kind}: the listing still had a next page after ${maxPages} pages (maxPages)`);
}

function diff<C, D, K extends string>(
  backend: ReconcileBackend<C, D, K>,
  declaredByKey: Map<K, D>,
  owned: Map<K, C[]>,
  unownedKeys: Set<K>,
  options: ReconcileOptions,
): Plan<C, D, K> {
  const deleteDuplicates = options.deleteDuplicates ?? true;
  const deleteUndeclared = options.deleteUndeclared ?? true;
  const plan: Plan<C, D, K> = { creates: [], conflicts: [], updates: [], deletes: [], duplicates: [], unchanged: [], undeclared: [] };
  const keys = [...new Set<K>([...declaredByKey.keys(), ...owned.keys()])].sort(byKeyOrder);

  for (const key of keys) {
    const group = owned.get(key) ?? [];
    const want = declaredByKey.get(key);

    // Undeclared and pruned: every owned object of the key goes, so no keeper needs choosing.
    if (want === undefined && deleteUndeclared) {
      for (const c of group) plan.deletes.push({ key, item: c, reason: "undeclared" });
      continue;
    }

    let keeper = group[0];
    if (group.length > 1) {
      keeper = backend.pickKeeper ? backend.pickKeeper(group) : group[0];
      if (keeper === undefined || !group.includes(keeper)) {
        throw new ReconcileError("bad-keeper", `${backend.kind}: pickKeeper for key ${key} returned an object that is not one of the ${group.length} duplicates`);
      }
      plan.duplicates.push({ key, kept: keeper, extra: group.length - 1 });
      if (deleteDuplicates) for (const c of group) if (c !== keeper) plan.deletes.push({ key, item: c, reason: "duplicate" });
    }

    if (want === undefined) {
      if (keeper !== undefined) plan.undeclared.push(key);
    } else if (keeper === undefined) {
      // Someone else's object holds the key: creating would make a second object of a name fleetd does not own.
      if (unownedKeys.has(key)) plan.conflicts.push(key);
      else plan.creates.push({ key, item: want });
    } else if (backend.same(keeper, want)) {
      plan.unchanged.push({ key, current: keeper });
    } else {
      plan.updates.push({ key, item: { current: keeper, declared: want } });
    }
  }
  return plan;
}

interface ApplyContext {
  dryRun: boolean;
  batchSize: number;
  signal: AbortSignal | undefined;
  metrics: ReconcileMetrics | undefined;
  pages: number;
  listed: number;
  ignoredUnowned: number;
}

/**
 * Order: creates, then updates, then deletes. A run cut short (a failed batch, an abort, a crash) then leaves
 * objects too many rather than declared objects missing, and the only step that destroys anything comes last,
 * after everything it might be replaced by exists. (spire-controller-manager deletes first; fleetd prefers
 * availability.) The cost: a uniqueness rule the key does not cover (a NetBox MAC, a SPIRE entry ID reused
 * by a new entry) can fail a create until the old object is deleted — that item converges on the next run.
 */
async function apply<C, D, K extends string>(backend: ReconcileBackend<C, D, K>, plan: Plan<C, D, K>, ctx: ApplyContext): Promise<ReconcileReport<C, K>> {
  const state = { aborted: false };
  const after = new Map<K, C>();
  for (const u of plan.unchanged) after.set(u.key, u.current);

  const conflicts: ItemOutcome<K>[] = plan.conflicts.map((key) => ({
    key,
    outcome: "conflict",
    error: `${backend.kind} ${key} exists and is not owned by fleetd: left alone, not created`,
  }));
  if (conflicts.length > 0) ctx.metrics?.write(backend.kind, "create", "conflict", conflicts.length);

  const created = await applyOp<K, D, C, Plan<C, D, K>["creates"][number]>(backend.kind, "create", plan.creates, (b, s) => backend.create(b, s), ctx, state, (key, _item, object) => {
    if (object !== undefined) after.set(key, object);
  });
  const updated = await applyOp<K, Replacement<C, D>, C, Plan<C, D, K>["updates"][number]>(backend.kind, "update", plan.updates, (b, s) => backend.update(b, s), ctx, state, (key, item, object, ok) => {
    after.set(key, ok && object !== undefined ? object : item.current);
  });
  const deletes: DeleteOutcome<K>[] = await applyOp<K, C, unknown, Plan<C, D, K>["deletes"][number]>(backend.kind, "delete", plan.deletes, (b, s) => backend.delete(b, s), ctx, state);

  const creates = [...created, ...conflicts].sort((a, b) => byKeyOrder(a.key, b.key));
  return {
    kind: backend.kind,
    dryRun: ctx.dryRun,
    aborted: state.aborted,
    pages: ctx.pages,
    listed: ctx.listed,
    ignoredUnowned: ctx.ignoredUnowned,
    duplicates: plan.duplicates,
    creates,
    updates: updated,
    deletes,
    unchanged: plan.unchanged.length,
    undeclared: plan.undeclared,
    byKey: new Map([...after].sort(([a], [b]) => byKeyOrder(a, b))),
  };
}

/**
 * Writes `items` in batches; every item gets exactly one outcome, in the order of `items`, carrying the item's
 * other fields (a delete's reason).
 */
async function applyOp<K extends string, I, R, T extends { key: K; item: I }>(
  kind: string,
  op: WriteOp,
  items: readonly T[],
  write: (batch: readonly I[], signal: AbortSignal | undefined) => Promise<ItemResult<R>[]>,
  ctx: ApplyContext,
  state: { aborted: boolean },
  onResult?: (key: K, item: I, object: R | undefined, ok: boolean) => void,
): Promise<Array<ItemOutcome<K> & Omit<T, "key" | "item">>> {
  const out: Array<ItemOutcome<K> & Omit<T, "key" | "item">> = [];
  const push = (t: T, outcome: Outcome, error?: string, cause?: unknown): void => {
    const { key, item: _item, ...rest } = t;
    out.push({ ...rest, key, outcome, ...(error !== undefined ? { error } : {}), ...(cause !== undefined ? { cause } : {}) });
  };
  for (let start = 0; start < items.length; start += ctx.batchSize) {
    const batch = items.slice(start, start + ctx.batchSize);
    if (state.aborted || ctx.signal?.aborted) {
      state.aborted = true;
      const why = `not written: aborted (${message(ctx.signal?.reason ?? "signal")})`;
      for (const t of batch) {
        push(t, "skipped", why);
        onResult?.(t.key, t.item, undefined, false);
      }
      continue;
    }
    if (ctx.dryRun) {
      for (const t of batch) {
        push(t, "dry_run");
        onResult?.(t.key, t.item, undefined, false);
      }
      ctx.metrics?.write(kind, op, "dry_run", batch.length);
      continue;
    }
    let results: ItemResult<R>[] | undefined;
    let failure: string | undefined;
    let failureCause: unknown;
    try {
      results = await write(
        batch.map((b) => b.item),
        ctx.signal,
      );
      if (!Array.isArray(results) || results.length !== batch.length) {
        failure = `${kind} ${op}: the backend returned ${Array.isArray(results) ? results.length : "no"} results for a batch of ${batch.length}: outcome of every item unknown`;
      }
    } catch (e) {
      failure = `${kind} ${op} batch of ${batch.length} failed: ${message(e)}`;
      failureCause = e;
    }
    let ok = 0;
    batch.forEach((t, i) => {
      const r = failure === undefined ? results?.[i] : undefined;
      if (r?.ok === true) {
        ok++;
        push(t, "ok");
        onResult?.(t.key, t.item, r.object, true);
      } else {
        if (r?.ok === false) push(t, "error", r.error, r.cause);
        else push(t, "error", failure ?? `${kind} ${op}: no result`, failureCause);
        onResult?.(t.key, t.item, undefined, false);
      }
    });
    if (ok > 0) ctx.metrics?.write(kind, op, "ok", ok);
    if (batch.length - ok > 0) ctx.metrics?.write(kind, op, "error", batch.length - ok);
  }
  return out;
}

/**
 * Writes for a backend whose server has no batch endpoint: the items of a batch one at a time, in order. One
 * instance per run: after its first failed write, every later item (of this batch and the run's other batches and
 * operations) is answered "not attempted" without a call — during an outage each would only fail again — and the
 * failure keeps its cause for the caller to rethrow or classify. `object` is what `write` returns, when anything.
 */
export function oneAtATime<R>(): <I>(batch: readonly I[], write: (item: I) => Promise<R | undefined>) => Promise<ItemResult<R>[]> {
  let failed = false;
  return async (batch, write) => {
    const out: ItemResult<R>[] = [];
    for (const item of batch) {
      if (failed) {
        out.push({ ok: false, error: "not attempted after an earlier failed write" });
        continue;
      }
      try {
        const object = await write(item);
        out.push(object === undefined ? { ok: true } : { ok: true, object });
      } catch (e) {
        failed = true;
        out.push({ ok: false, error: message(e), cause: e });
      }
    }
    return out;
  };
}
