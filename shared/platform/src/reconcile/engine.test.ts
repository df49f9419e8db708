import { test } from "node:test";
import { strict as assert } from "node:assert";
import { reconcile, ReconcileError, type ItemResult, type MetricResult, type ReconcileBackend, type ReconcileMetrics, type Replacement, type WriteOp } from "./engine.js";

// ---- an in-memory backend ------------------------------------------------------------------------------

interface Obj {
  id: number;
  name: string;
  value: string;
  owner: "fleetd" | "other";
}
interface Want {
  name: string;
  value: string;
}

type Call = { op: WriteOp | "lookup"; keys: string[] };

interface Memory extends ReconcileBackend<Obj, Want> {
  store: Obj[];
  calls: Call[];
  pagesAsked: Array<string | undefined>;
}

interface MemoryOptions {
  pageSize?: number;
  batchSize?: number;
  /** Replaces the answer of the n-th call (0-based, per op) with a throw or a given results array. */
  fault?: (op: WriteOp, call: number, keys: string[]) => Error | ItemResult<Obj>[] | undefined;
  pickKeeper?: (dupes: readonly Obj[]) => Obj;
  lookup?: boolean;
  onWrite?: (op: WriteOp, call: number) => void;
}

function memory(initial: Obj[], o: MemoryOptions = {}): Memory {
  const store = initial.map((x) => ({ ...x }));
  const calls: Call[] = [];
  const pagesAsked: Array<string | undefined> = [];
  const perOp: Record<WriteOp, number> = { create: 0, update: 0, delete: 0 };
  let nextId = 1000;
  const pageSize = o.pageSize ?? 100;

  const run = <T>(op: WriteOp, keys: string[], items: readonly T[], each: (t: T) => ItemResult<Obj>): ItemResult<Obj>[] => {
    const n = perOp[op]++;
    calls.push({ op, keys });
    o.onWrite?.(op, n);
    const f = o.fault?.(op, n, keys);
    if (f instanceof Error) throw f;
    if (f) return f;
    return items.map(each);
  };

  const b: Memory = {
    kind: "test.obj",
    store,
    calls,
    pagesAsked,
    async listCurrent(page) {
      pagesAsked.push(page);
      const visible = store;
      const start = page === undefined ? 0 : Number(page);
      const end = start + pageSize;
      return { items: visible.slice(start, end).map((x) => ({ ...x })), ...(end < visible.length ? { next: String(end) } : {}) };
    },
    owned: (c) => c.owner === "fleetd",
    keyOfCurrent: (c) => c.name,
    keyOfDeclared: (d) => d.name,
    same: (c, d) => c.value === d.value,
    async create(batch) {
      return run("create", batch.map((d) => d.name), batch, (d) => {
        const obj: Obj = { id: nextId++, name: d.name, value: d.value, owner: "fleetd" };
        store.push(obj);
        return { ok: true, object: { ...obj } };
      });
    },
    async update(batch: readonly Replacement<Obj, Want>[]) {
      return run("update", batch.map((u) => u.declared.name), batch, (u) => {
        const obj = store.find((x) => x.id === u.current.id);
        if (!obj) return { ok: false, error: `no object ${u.current.id}` };
        obj.value = u.declared.value;
        return { ok: true, object: { ...obj } };
      });
    },
    async delete(batch) {
      return run("delete", batch.map((c) => c.name), batch, (c) => {
        const i = store.findIndex((x) => x.id === c.id);
        if (i < 0) return { ok: false, error: `no object ${c.id}` };
        store.splice(i, 1);
        return { ok: true };
      });
    },
    ...(o.batchSize !== undefined ? { batchSize: o.batchSize } : {}),
    ...(o.pickKeeper ? { pickKeeper: o.pickKeeper } : {}),
    ...(o.lookup
      ? {
          async lookup(keys: readonly string[]) {
            calls.push({ op: "lookup", keys: [...keys] });
            return store.filter((x) => keys.includes(x.name)).map((x) => ({ ...x }));
          },
        }
      : {}),
  };
  return b;
}

const own = (id: number, name: string, value = "v"): Obj => ({ id, name, value, owner: "fleetd" });
const other = (id: number, name: string, value = "v"): Obj => ({ id, name, value, owner: "other" });
const want = (name: string, value = "v"): Want => ({ name, value });

/** Metrics that sum `n` per kind/op/result. */
function counter(): ReconcileMetrics & { sums: Map<string, number>; calls: number } {
  const sums = new Map<string, number>();
  const m = {
    sums,
    calls: 0,
    write(kind: string, op: WriteOp, result: MetricResult, n: number) {
      m.calls++;
      const k = `${kind}/${op}/${result}`;
      sums.set(k, (sums.get(k) ?? 0) + n);
    },
  };
  return m;
}

/** Every sum the metrics hold is `want`'s, and no other (`want`: "kind/op/result" → n). */
const assertSums = (m: { sums: Map<string, number> }, want: Record<string, number>): void => assert.deepEqual([...m.sums].sort(), Object.entries(want).sort());

const sortedStore = (b: Memory): string[] => b.store.map((x) => `${x.id}:${x.name}=${x.value}:${x.owner}`).sort();

// ---- basics -----------------------------------------------------------------------------------------------

test("diff: create, update, unchanged, delete, sorted by key; a second run writes nothing", async () => {
  const b = memory([own(1, "b", "old"), own(2, "c"), own(3, "z")]);
  const declared = [want("d"), want("c"), want("b", "new"), want("a")];
  const r = await reconcile(b, declared);
  assert.deepEqual(r.creates, [{ key: "a", outcome: "ok" }, { key: "d", outcome: "ok" }]);
  assert.deepEqual(r.updates, [{ key: "b", outcome: "ok" }]);
  assert.deepEqual(r.deletes, [{ key: "z", outcome: "ok", reason: "undeclared" }]);
  assert.equal(r.unchanged, 1);
  assert.equal(r.listed, 3);
  assert.equal(r.pages, 1);
  assert.equal(r.aborted, false);
  assert.deepEqual([...r.byKey.keys()], ["a", "b", "c", "d"]);
  assert.equal(r.byKey.get("a")?.id, 1000);
  assert.equal(r.byKey.get("b")?.value, "new");
  assert.deepEqual(sortedStore(b), ["1000:a=v:fleetd", "1001:d=v:fleetd", "1:b=new:fleetd", "2:c=v:fleetd"]);

  b.calls.length = 0;
  const again = await reconcile(b, declared);
  assert.deepEqual(b.calls, []);
  assert.deepEqual([again.creates, again.updates, again.deletes], [[], [], []]);
  assert.equal(again.unchanged, 4);
});

test("writes go creates, then updates, then deletes", async () => {
  const b = memory([own(1, "u", "old"), own(2, "gone")]);
  await reconcile(b, [want("u", "new"), want("n")]);
  assert.deepEqual(b.calls, [
    { op: "create", keys: ["n"] },
    { op: "update", keys: ["u"] },
    { op: "delete", keys: ["gone"] },
  ]);
});

test("deleteUndeclared false: undeclared owned objects are kept and named", async () => {
  const b = memory([own(1, "keep1"), own(2, "keep2"), own(3, "x", "old")]);
  const r = await reconcile(b, [want("x", "new")], { deleteUndeclared: false });
  assert.deepEqual(r.deletes, []);
  assert.deepEqual(r.undeclared, ["keep1", "keep2"]);
  assert.deepEqual(r.updates, [{ key: "x", outcome: "ok" }]);
  assert.equal(b.store.length, 3);
});

// ---- duplicates ---------------------------------------------------------------------------------------------

test("duplicates: the first listed is kept and diffed, the others deleted", async () => {
  const b = memory([own(7, "a", "old"), own(3, "a", "old"), own(5, "a", "x"), own(9, "b")]);
  const r = await reconcile(b, [want("a", "new"), want("b")]);
  assert.equal(r.duplicates.length, 1);
  assert.equal(r.duplicates[0]?.key, "a");
  assert.equal(r.duplicates[0]?.kept.id, 7);
  assert.equal(r.duplicates[0]?.extra, 2);
  assert.deepEqual(r.deletes, [
    { key: "a", outcome: "ok", reason: "duplicate" },
    { key: "a", outcome: "ok", reason: "duplicate" },
  ]);
  assert.deepEqual(r.updates, [{ key: "a", outcome: "ok" }]);
  assert.deepEqual(sortedStore(b), ["7:a=new:fleetd", "9:b=v:fleetd"]);
});

test("duplicates: pickKeeper chooses (lowest id), the keeper is compared as any other object", async () => {
  const b = memory([own(7, "a", "x"), own(3, "a", "v"), own(5, "a", "x")], { pickKeeper: (d) => [...d].sort((p, q) => p.id - q.id)[0] ?? d[0]! });
  const r = await reconcile(b, [want("a", "v")]);
  assert.equal(r.duplicates[0]?.kept.id, 3);
  assert.deepEqual(r.updates, []);
  assert.equal(r.unchanged, 1);
  assert.deepEqual(sortedStore(b), ["3:a=v:fleetd"]);
});

test("duplicates: deleteDuplicates false reports them and deletes nothing", async () => {
  const b = memory([own(1, "a", "old"), own(2, "a"), own(3, "undeclared")]);
  const r = await reconcile(b, [want("a", "new")], { deleteDuplicates: false });
  assert.deepEqual(
    r.duplicates.map((d) => [d.key, d.kept.id, d.extra]),
    [["a", 1, 1]],
  );
  assert.deepEqual(r.deletes, [{ key: "undeclared", outcome: "ok", reason: "undeclared" }]);
  assert.deepEqual(r.updates, [{ key: "a", outcome: "ok" }]);
  assert.deepEqual(sortedStore(b), ["1:a=new:fleetd", "2:a=v:fleetd"]);
});

test("duplicates of an undeclared key: all deleted when pruning; one kept when not", async () => {
  const pruned = memory([own(1, "x"), own(2, "x")]);
  const r1 = await reconcile(pruned, []);
  assert.deepEqual(r1.duplicates, []);
  assert.deepEqual(r1.deletes.map((d) => d.reason), ["undeclared", "undeclared"]);
  assert.equal(pruned.store.length, 0);

  const kept = memory([own(1, "x"), own(2, "x")]);
  const r2 = await reconcile(kept, [], { deleteUndeclared: false });
  assert.deepEqual(r2.deletes, [{ key: "x", outcome: "ok", reason: "duplicate" }]);
  assert.deepEqual(r2.undeclared, ["x"]);
  assert.deepEqual(sortedStore(kept), ["1:x=v:fleetd"]);
});

test("a pickKeeper that returns a stranger is refused before any write", async () => {
  const b = memory([own(1, "a"), own(2, "a"), own(3, "gone")], { pickKeeper: () => own(99, "a") });
  await assert.rejects(reconcile(b, [want("a"), want("new")]), (e: unknown) => e instanceof ReconcileError && e.code === "bad-keeper");
  assert.deepEqual(b.calls, []);
});

// ---- declared keys ---------------------------------------------------------------------------------------------

test("duplicate declared keys throw before listing or writing", async () => {
  const b = memory([own(1, "gone")]);
  await assert.rejects(reconcile(b, [want("a"), want("b"), want("a", "other"), want("b")]), (e: unknown) => {
    assert.ok(e instanceof ReconcileError);
    assert.equal(e.code, "duplicate-declared-key");
    assert.match(e.message, /2 key\(s\) declared more than once.*: a, b$/);
    return true;
  });
  assert.deepEqual(b.pagesAsked, []);
  assert.deepEqual(b.calls, []);
  assert.equal(b.store.length, 1);
});

// ---- paging -------------------------------------------------------------------------------------------------------

test("paging: every page is read before the diff", async () => {
  const objs = ["a", "b", "c", "d", "e", "f", "g"].map((n, i) => own(i + 1, n));
  const b = memory(objs, { pageSize: 3 });
  const r = await reconcile(b, ["a", "b", "c", "d", "e", "f"].map((n) => want(n)));
  assert.deepEqual(b.pagesAsked, [undefined, "3", "6"]);
  assert.equal(r.pages, 3);
  assert.equal(r.listed, 7);
  assert.equal(r.unchanged, 6);
  assert.deepEqual(r.creates, []);
  assert.deepEqual(r.deletes, [{ key: "g", outcome: "ok", reason: "undeclared" }]);
});

test("paging: a repeated page token is an error, nothing is written", async () => {
  const b = memory([own(1, "gone")]);
  const tokens = ["p1", "p2", "p1"];
  let i = 0;
  b.listCurrent = async () => ({ items: [], next: tokens[i++] });
  await assert.rejects(reconcile(b, [want("new")]), (e: unknown) => {
    assert.ok(e instanceof ReconcileError);
    assert.equal(e.code, "repeated-page-token");
    assert.match(e.message, /"p1" a second time \(after page 3\)/);
    return true;
  });
  assert.equal(i, 3);
  assert.deepEqual(b.calls, []);
});

test("paging: maxPages bounds a server that pages forever", async () => {
  const b = memory([]);
  let asked = 0;
  b.listCurrent = async () => ({ items: [own(asked, `n${asked}`)], next: `t${++asked}` });
  await assert.rejects(reconcile(b, [want("new")], { maxPages: 4 }), (e: unknown) => e instanceof ReconcileError && e.code === "too-many-pages");
  assert.equal(asked, 4);
  assert.deepEqual(b.calls, []);
  // "" ends a listing (Kubernetes sends continue: "" on the last page).
  b.listCurrent = async () => ({ items: [], next: "" });
  const r = await reconcile(b, [], { maxPages: 1 });
  assert.equal(r.pages, 1);
});

// ---- batching -------------------------------------------------------------------------------------------------

test("batching: batches of batchSize, in key order", async () => {
  const b = memory([], { batchSize: 2 });
  await reconcile(b, ["e", "d", "c", "b", "a"].map((n) => want(n)));
  assert.deepEqual(b.calls, [
    { op: "create", keys: ["a", "b"] },
    { op: "create", keys: ["c", "d"] },
    { op: "create", keys: ["e"] },
  ]);
});

test("batching: a throwing batch marks its items as errors and the rest still runs", async () => {
  const b = memory([own(1, "u1", "old"), own(2, "u2", "old"), own(3, "gone")], {
    batchSize: 2,
    fault: (op, call) => (op === "create" && call === 1 ? new Error("503 Service Unavailable") : undefined),
  });
  const m = counter();
  const r = await reconcile(b, [want("a"), want("b"), want("c"), want("d"), want("e"), want("u1", "new"), want("u2", "new")], { metrics: m });
  assert.deepEqual(
    r.creates.map((c) => (c.cause as Error | undefined)?.message),
    [undefined, undefined, "503 Service Unavailable", "503 Service Unavailable", undefined],
  );
  assert.deepEqual(r.creates.map(({ cause: _c, ...rest }) => rest), [
    { key: "a", outcome: "ok" },
    { key: "b", outcome: "ok" },
    { key: "c", outcome: "error", error: "test.obj create batch of 2 failed: 503 Service Unavailable" },
    { key: "d", outcome: "error", error: "test.obj create batch of 2 failed: 503 Service Unavailable" },
    { key: "e", outcome: "ok" },
  ]);
  assert.deepEqual(r.updates, [{ key: "u1", outcome: "ok" }, { key: "u2", outcome: "ok" }]);
  assert.deepEqual(r.deletes, [{ key: "gone", outcome: "ok", reason: "undeclared" }]);
  assert.equal(r.byKey.has("c"), false);
  assert.equal(r.byKey.has("e"), true);
  assert.equal(m.sums.get("test.obj/create/error"), 2);
  assert.equal(m.sums.get("test.obj/create/ok"), 3);
  assert.deepEqual(b.calls.map((c) => c.op), ["create", "create", "create", "update", "delete"]);
});

test("batching: a results array of the wrong length fails the whole batch; per-item errors stay per item", async () => {
  const b = memory([own(1, "u1", "old"), own(2, "u2", "old"), own(3, "u3", "old")], {
    batchSize: 2,
    fault: (op, call) => {
      if (op === "update" && call === 0) return [{ ok: true }];
      if (op === "update" && call === 1) return [{ ok: false, error: "409 conflict: resourceVersion" }];
      return undefined;
    },
  });
  const r = await reconcile(b, [want("u1", "new"), want("u2", "new"), want("u3", "new")]);
  const wrong = "test.obj update: the backend returned 1 results for a batch of 2: outcome of every item unknown";
  assert.deepEqual(r.updates, [
    { key: "u1", outcome: "error", error: wrong },
    { key: "u2", outcome: "error", error: wrong },
    { key: "u3", outcome: "error", error: "409 conflict: resourceVersion" },
  ]);
  // A failed update leaves the current object in byKey.
  assert.equal(r.byKey.get("u3")?.value, "old");
});

// ---- ownership ------------------------------------------------------------------------------------------------

test("ownership: objects fleetd does not own are never updated or deleted", async () => {
  const b = memory([other(1, "theirs", "x"), other(2, "a", "x"), own(3, "a", "old"), own(4, "mine")]);
  const r = await reconcile(b, [want("a", "new")]);
  assert.equal(r.ignoredUnowned, 2);
  assert.deepEqual(r.creates, []);
  assert.deepEqual(r.updates, [{ key: "a", outcome: "ok" }]);
  assert.deepEqual(r.deletes, [{ key: "mine", outcome: "ok", reason: "undeclared" }]);
  assert.deepEqual(sortedStore(b), ["1:theirs=x:other", "2:a=x:other", "3:a=new:fleetd"]);
});

test("ownership: a declared key held only by someone else's object is a conflict, not a second object", async () => {
  const b = memory([other(1, "taken", "x")]);
  const m = counter();
  const r = await reconcile(b, [want("taken"), want("free")], { metrics: m });
  assert.deepEqual(r.creates, [
    { key: "free", outcome: "ok" },
    { key: "taken", outcome: "conflict", error: "test.obj taken exists and is not owned by fleetd: left alone, not created" },
  ]);
  assert.deepEqual(b.calls, [{ op: "create", keys: ["free"] }]);
  assert.deepEqual(b.store.filter((x) => x.name === "taken").length, 1);
  assert.equal(m.sums.get("test.obj/create/conflict"), 1);
  assert.equal(r.byKey.has("taken"), false);
});

test("lookup: a listing narrowed to ours still finds someone else's object, and ours outside the listing", async () => {
  const b = memory([other(1, "taken", "x"), own(2, "listed")], { lookup: true });
  b.store.push(own(3, "stray", "old"));
  // The listing is a label selector: only ours, and "stray" (ours, outside the selector) is not in it either.
  b.listCurrent = async () => ({ items: [own(2, "listed")] });
  const r = await reconcile(b, [want("listed"), want("taken"), want("stray", "new"), want("free")]);
  assert.deepEqual(b.calls[0], { op: "lookup", keys: ["free", "stray", "taken"] });
  assert.equal(r.listed, 3);
  assert.equal(r.ignoredUnowned, 1);
  assert.deepEqual(r.creates, [
    { key: "free", outcome: "ok" },
    { key: "taken", outcome: "conflict", error: "test.obj taken exists and is not owned by fleetd: left alone, not created" },
  ]);
  assert.deepEqual(r.updates, [{ key: "stray", outcome: "ok" }]);
  assert.equal(r.unchanged, 1);
});

// ---- dry run --------------------------------------------------------------------------------------------------

test("dry run: no writes, the same plan as a real run, metrics counted as dry_run", async () => {
  const initial = [own(1, "a", "old"), own(2, "a"), own(3, "b"), own(4, "gone"), other(5, "taken")];
  const declared = [want("a", "new"), want("b"), want("c"), want("taken")];
  const dry = memory(initial);
  const m = counter();
  const d = await reconcile(dry, declared, { dryRun: true, metrics: m });
  assert.deepEqual(dry.calls, []);
  assert.deepEqual(sortedStore(dry), sortedStore(memory(initial)));
  assert.equal(d.dryRun, true);

  const real = await reconcile(memory(initial), declared);
  const asReal = <T extends { outcome: string }>(xs: T[]): T[] => xs.map((x) => (x.outcome === "dry_run" ? { ...x, outcome: "ok" } : x));
  assert.deepEqual(asReal(d.creates), real.creates);
  assert.deepEqual(asReal(d.updates), real.updates);
  assert.deepEqual(asReal(d.deletes), real.deletes);
  assert.deepEqual(d.duplicates, real.duplicates);
  assert.equal(d.unchanged, real.unchanged);
  assert.deepEqual(d.creates.map((c) => c.outcome), ["dry_run", "conflict"]);
  assertSums(m, { "test.obj/create/conflict": 1, "test.obj/create/dry_run": 1, "test.obj/delete/dry_run": 2, "test.obj/update/dry_run": 1 });
  // byKey in a dry run: current objects only, nothing for creates.
  assert.deepEqual([...d.byKey.keys()], ["a", "b"]);
  assert.equal(d.byKey.get("a")?.value, "old");
});

// ---- metrics ----------------------------------------------------------------------------------------------------

test("metrics: counts by kind / op / result", async () => {
  const b = memory([own(1, "u1", "old"), own(2, "u2", "old"), own(3, "d1"), own(4, "d2"), own(5, "d3")], {
    batchSize: 2,
    fault: (op, call) => {
      if (op === "create") return [{ ok: true }, { ok: false, error: "400 name too long" }];
      if (op === "delete" && call === 1) return new Error("timeout");
      return undefined;
    },
  });
  const m = counter();
  await reconcile(b, [want("c1"), want("c2"), want("u1", "new"), want("u2", "new")], { metrics: m });
  assertSums(m, { "test.obj/create/error": 1, "test.obj/create/ok": 1, "test.obj/delete/error": 1, "test.obj/delete/ok": 2, "test.obj/update/ok": 2 });
  // one call per batch and result: create (ok, error), update (ok), delete batch 1 (ok), delete batch 2 (error)
  assert.equal(m.calls, 5);
});

// ---- abort ------------------------------------------------------------------------------------------------------

test("abort between batches: the batch in flight completes, the rest is skipped and reported", async () => {
  const ac = new AbortController();
  const b = memory([own(1, "u", "old"), own(2, "gone")], { batchSize: 2, onWrite: (op, call) => op === "create" && call === 0 && ac.abort(new Error("shutdown")) });
  const m = counter();
  const r = await reconcile(b, [want("a"), want("b"), want("c"), want("u", "new")], { signal: ac.signal, metrics: m });
  assert.equal(r.aborted, true);
  assert.deepEqual(b.calls, [{ op: "create", keys: ["a", "b"] }]);
  const skipped = "not written: aborted (shutdown)";
  assert.deepEqual(r.creates, [
    { key: "a", outcome: "ok" },
    { key: "b", outcome: "ok" },
    { key: "c", outcome: "skipped", error: skipped },
  ]);
  assert.deepEqual(r.updates, [{ key: "u", outcome: "skipped", error: skipped }]);
  assert.deepEqual(r.deletes, [{ key: "gone", outcome: "skipped", error: skipped, reason: "undeclared" }]);
  assert.deepEqual([...m.sums], [["test.obj/create/ok", 2]]);
});

test("abort before the run: the listing is not read and the abort reason is thrown", async () => {
  const b = memory([own(1, "gone")]);
  await assert.rejects(reconcile(b, [], { signal: AbortSignal.abort(new Error("stop")) }), /stop/);
  assert.deepEqual(b.pagesAsked, []);
  assert.deepEqual(b.calls, []);
});

test("bad options are refused", async () => {
  const b = memory([], { batchSize: 0 });
  await assert.rejects(reconcile(b, []), (e: unknown) => e instanceof ReconcileError && e.code === "bad-option");
  await assert.rejects(reconcile(memory([]), [], { maxPages: 0 }), (e: unknown) => e instanceof ReconcileError && e.code === "bad-option");
});

test("an error outcome carries the original error: the item's own cause, or the batch's throw", async () => {
  class Outage extends Error {}
  const down = new Outage("NetBox unreachable");
  const backend: ReconcileBackend<Obj, Want> = {
    kind: "test.cause",
    listCurrent: async () => ({ items: [] }),
    owned: () => true,
    keyOfCurrent: (c) => c.name,
    keyOfDeclared: (d) => d.name,
    same: () => false,
    create: async (batch) => {
      if (batch.some((d) => d.name === "b")) throw down;
      return batch.map((d) => ({ ok: false as const, error: `refused ${d.name}`, cause: new RangeError(d.name) }));
    },
    update: async () => [],
    delete: async () => [],
    batchSize: 1,
  };
  const r = await reconcile(backend, [{ name: "a", value: "1" }, { name: "b", value: "2" }]);
  assert.equal(r.creates[0]?.error, "refused a");
  assert.ok(r.creates[0]?.cause instanceof RangeError);
  assert.match(r.creates[1]?.error ?? "", /batch of 1 failed: NetBox unreachable/);
  assert.equal(r.creates[1]?.cause, down);
});

test("oneAtATime: items in order, one call each; after the first failure nothing more is attempted, across batches", async () => {
  const { oneAtATime } = await import("./engine.js");
  const calls: string[] = [];
  const write = oneAtATime<string>();
  const down = new Error("NetBox unreachable");
  const first = await write(["a", "b", "c"], async (x) => {
    calls.push(x);
    if (x === "b") throw down;
    return x === "a" ? "A" : undefined;
  });
  assert.deepEqual(first, [{ ok: true, object: "A" }, { ok: false, error: "NetBox unreachable", cause: down }, { ok: false, error: "not attempted after an earlier failed write" }]);
  const second = await write(["d"], async (x) => {
    calls.push(x);
    return x;
  });
  assert.deepEqual(second, [{ ok: false, error: "not attempted after an earlier failed write" }]);
  assert.deepEqual(calls, ["a", "b"]);
});
