import { strict as assert } from "node:assert";
import { test } from "node:test";
import { comparableJson, diffFields, normalizeRead, renderPlan, syncKind, type SyncKind } from "./sync.js";

type E = { id: number; name: string; v: number };
type B = { name: string; v: number; _local?: string };

test("normalizeRead: choices to values, nested objects to ids, key order irrelevant", () => {
  assert.equal(normalizeRead({ value: "active", label: "Active" }), "active");
  assert.equal(normalizeRead({ id: 4, url: "u", display: "d", name: "n" }), 4);
  assert.deepEqual(diffFields({ status: { value: "active", label: "Active" }, site: { id: 1, url: "x" }, cf: { b: 1, a: 2 } }, { status: "active", site: 1, cf: { a: 2, b: 1 } }), []);
  assert.deepEqual(diffFields({ object_types: ["b", "a"] }, { object_types: ["a", "b"] }, ["object_types"]), []);
  assert.equal(diffFields({ object_types: ["b", "a"] }, { object_types: ["a", "b"] }).length, 1);
});

test("syncKind: create, update, unchanged; dry run writes nothing; a second pass is a no-op", async () => {
  const store = new Map<string, E>([["a", { id: 1, name: "a", v: 1 }]]);
  let writes = 0;
  const kind: SyncKind<E, B> = {
    what: "x",
    list: async () => [...store.values()],
    keyOf: (e) => e.name,
    keyOfDesired: (b) => b.name,
    create: async (b) => {
      writes++;
      const e = { id: store.size + 1, ...b };
      store.set(b.name, e);
      return e;
    },
    update: async (id, p) => {
      writes++;
      const e = [...store.values()].find((x) => x.id === id);
      if (!e) throw new Error("gone");
      Object.assign(e, p);
      return e;
    },
  };
  const desired: B[] = [{ name: "a", v: 2 }, { name: "b", v: 1, _local: "never sent" }];
  const dry = await syncKind(kind, desired, true);
  assert.deepEqual(dry.changes.map((c) => c.kind), ["update", "create"]);
  assert.equal(writes, 0);
  await syncKind(kind, desired, false);
  assert.equal(writes, 2);
  assert.equal("_local" in (store.get("b") ?? {}), false);
  const again = await syncKind(kind, desired, false);
  assert.deepEqual(again.changes.map((c) => c.kind), ["unchanged", "unchanged"]);
  assert.equal(writes, 2);
  assert.match(renderPlan(dry.changes, "Plan"), /Plan: 1 to create, 1 to update, 0 unchanged\./);
  assert.match(renderPlan([{ kind: "update", object: "w", fields: [{ field: "secret", from: "old", to: "new" }] }], "Plan"), /secret: \(secret\) -> \(secret, changed\)/);
});

test("normalizeRead keeps a key named __proto__ (as JSON.parse does): values that differ there compare different", () => {
  const a = JSON.parse('{"x":1,"__proto__":{"y":2}}') as unknown;
  const b = JSON.parse('{"x":1}') as unknown;
  assert.notEqual(comparableJson(a), comparableJson(b));
  assert.equal(comparableJson(a), '{"__proto__":{"y":2},"x":1}');
  assert.deepEqual(diffFields({ ek_bindings: a }, { ek_bindings: b }).map((c) => c.field), ["ek_bindings"]);
});
