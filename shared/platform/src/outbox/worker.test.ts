/**
 * The outbox worker's scheduling over the real SQLite store: order per device, backoff after an outage or a
 * refusal, items it cannot read, moot ones, flush, and two workers sharing one store. Deliveries go to a
 * recording target here; the real NetBox deliveries are the attestation suites' (tests/src/attestation).
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { Unavailable } from "../outage/outage.js";
import { SqliteAttestationStore } from "../state/sqliteStore.js";
import type { OutboxEntry } from "../state/store.js";
import { StepEffects, type Effect } from "./effects.js";
import { OutboxWorker, type DeliveryOutcome, type OutboxDelivery } from "./worker.js";

const node = (deviceId: number) => ({ deviceId, name: `n${deviceId}` });
const silent = { info: () => undefined, warn: () => undefined, error: () => undefined };

/** Records deliveries; `fail` decides per item whether (and how) it fails this time. */
function target(fail: (e: OutboxEntry, effect: Effect) => Error | "moot" | undefined = () => undefined) {
  const delivered: string[] = [];
  const delivery: OutboxDelivery = {
    async deliver(e, effect) {
      const f = fail(e, effect);
      if (f === "moot") return "moot";
      if (f) throw f;
      delivered.push(`${e.deviceId}:${effect.kind === "netbox.journal" ? effect.entry.summary : effect.kind}`);
      return "delivered";
    },
  };
  return { delivered, delivery };
}

function journal(prefix: string, deviceId: number, ...summaries: string[]) {
  const fx = new StepEffects(prefix);
  for (const s of summaries) fx.journal(node(deviceId), { kind: "info", summary: s });
  return fx.items;
}

test("each device's items in the order they were committed; devices independent; a no-op pass delivers nothing", async () => {
  const store = new SqliteAttestationStore(":memory:");
  const t = target();
  const outcomes: DeliveryOutcome[] = [];
  const w = new OutboxWorker({ store, delivery: t.delivery, log: silent, onDelivery: (_k, o) => outcomes.push(o) });
  await store.enqueue([...journal("a", 1, "a1", "a2", "a3"), ...journal("b", 2, "b1")], 1);
  for (let i = 0; i < 5; i++) await w.runOnce();
  assert.deepEqual(t.delivered.filter((d) => d.startsWith("1:")), ["1:a1", "1:a2", "1:a3"]);
  assert.deepEqual(t.delivered.filter((d) => d.startsWith("2:")), ["2:b1"]);
  assert.deepEqual(await store.listOutbox(), []);
  assert.deepEqual(await w.runOnce(), { claimed: 0, delivered: 0, deferred: 0 });
  assert.equal(outcomes.length, 4);
});

test("an outage defers the item (and the device's later ones) with backoff; it is delivered once the dependency is back", async () => {
  const store = new SqliteAttestationStore(":memory:");
  let down = true;
  const t = target(() => (down ? new Unavailable("netbox-unavailable", "NetBox did not answer") : undefined));
  let now = 1000;
  const outcomes: DeliveryOutcome[] = [];
  const w = new OutboxWorker({ store, delivery: t.delivery, log: silent, now: () => now, onDelivery: (_k, o) => outcomes.push(o) });
  await store.enqueue(journal("a", 1, "a1", "a2"), now);
  assert.deepEqual(await w.runOnce(), { claimed: 1, delivered: 0, deferred: 1 });
  const [head] = await store.listOutbox();
  assert.equal(head?.attempts, 1);
  assert.match(head?.lastError ?? "", /netbox-unavailable/);
  assert.ok((head?.notBefore ?? 0) > now && (head?.notBefore ?? 0) <= now + 30_000, "retried soon: an outage ends");
  assert.deepEqual(await w.runOnce(), { claimed: 0, delivered: 0, deferred: 0 }, "not before its time; a2 waits behind a1");
  down = false;
  now += 31_000;
  await w.runOnce();
  await w.runOnce();
  assert.deepEqual(t.delivered, ["1:a1", "1:a2"]);
  assert.deepEqual(outcomes, ["outage", "delivered", "delivered"]);
});

test("a refusal (not an outage) is retried slowly and logged; an unreadable item is kept with why; a moot one is dropped", async () => {
  const store = new SqliteAttestationStore(":memory:");
  const errors: string[] = [];
  const t = target((e) => (e.key === "r:0" ? new Error("HTTP 400: unknown custom field") : e.key === "m:0" ? "moot" : undefined));
  const w = new OutboxWorker({ store, delivery: t.delivery, log: { ...silent, error: (o) => errors.push(JSON.stringify(o)) }, now: () => 5000 });
  await store.enqueue(journal("r", 1, "refused"), 5000);
  await store.enqueue(journal("m", 2, "moot"), 5000);
  await store.enqueue([{ key: "x", deviceId: 3, effect: { kind: "netbox.teleport" }, notBefore: 0 }], 5000);
  await w.runOnce();
  const left = await store.listOutbox();
  assert.deepEqual(left.map((o) => o.key).sort(), ["r:0", "x"]);
  const r = left.find((o) => o.key === "r:0");
  assert.ok((r?.notBefore ?? 0) - 5000 >= 5000, "a refusal waits at least seconds before the next try");
  assert.match(left.find((o) => o.key === "x")?.lastError ?? "", /not an effect this fleetd knows/);
  assert.equal(errors.length, 1);
  assert.match(errors[0] ?? "", /unknown custom field/);
});

test("flush delivers one device's items now (cutting its backoff short), and says false while its dependency is down", async () => {
  const store = new SqliteAttestationStore(":memory:");
  let down = true;
  const t = target(() => (down ? new Unavailable("netbox-unavailable", "down") : undefined));
  const w = new OutboxWorker({ store, delivery: t.delivery, log: silent });
  await store.enqueue([...journal("a", 1, "a1", "a2"), ...journal("b", 2, "b1")], Date.now());
  assert.equal(await w.flush(1), false);
  down = false;
  assert.equal(await w.flush(1), true, "the deferred item is tried at once when someone waits for it");
  assert.deepEqual(t.delivered, ["1:a1", "1:a2"]);
  assert.deepEqual((await store.listOutbox()).map((o) => o.deviceId), [2], "other devices are left to the passes");
});

test("two workers over one store deliver every item exactly once", async () => {
  const store = new SqliteAttestationStore(":memory:");
  const t = target();
  const a = new OutboxWorker({ store, delivery: t.delivery, log: silent, batch: 3 });
  const b = new OutboxWorker({ store, delivery: t.delivery, log: silent, batch: 3 });
  for (let d = 1; d <= 6; d++) await store.enqueue(journal(`d${d}`, d, "x", "y"), 1);
  for (let i = 0; i < 10; i++) await Promise.all([a.runOnce(), b.runOnce()]);
  assert.equal(t.delivered.length, 12);
  assert.equal(new Set(t.delivered.map((d, i) => `${d}#${t.delivered.slice(0, i).filter((x) => x === d).length}`)).size, 12);
  for (let d = 1; d <= 6; d++) assert.deepEqual(t.delivered.filter((x) => x.startsWith(`${d}:`)), [`${d}:x`, `${d}:y`]);
});

test("start and kick deliver without waiting for the interval; stop leaves what is queued", async () => {
  const store = new SqliteAttestationStore(":memory:");
  const t = target();
  const w = new OutboxWorker({ store, delivery: t.delivery, log: silent, intervalMs: 3_600_000 });
  w.start();
  await store.enqueue(journal("a", 1, "a1"), Date.now());
  w.kick();
  for (let i = 0; i < 100 && t.delivered.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
  assert.deepEqual(t.delivered, ["1:a1"]);
  await w.stop();
  await store.enqueue(journal("b", 1, "b1"), Date.now());
  w.kick();
  await new Promise((r) => setTimeout(r, 50));
  assert.deepEqual((await store.listOutbox()).map((o) => o.key), ["b:0"], "a stopped worker delivers nothing");
});

test("flush claims the device's queue as a run: field writes in order, then its journal entries in one bulk delivery; `journal: false` leaves trailing journal entries queued", async () => {
  const store = new SqliteAttestationStore(":memory:");
  const bulks: string[][] = [];
  const t = target();
  const delivery: OutboxDelivery = {
    deliver: t.delivery.deliver,
    async deliverJournals(deviceId, items) {
      bulks.push(items.map((i) => `${deviceId}:${i.effect.entry.summary}:${i.entry.attempts}`));
      return "delivered";
    },
  };
  const now = Date.now();
  const w = new OutboxWorker({ store, delivery, log: silent });
  // an evidence: its verdict, then its journal entry lingering for the confirm
  const ev = new StepEffects("ev");
  ev.attestation(node(1), { verdict: "pass", at: new Date(now) });
  ev.journal(node(1), { kind: "success", summary: "evidence" }, now + 60_000);
  await store.enqueue(ev.items, now);
  assert.equal(await w.flush(1, { journal: false }), true);
  assert.deepEqual(t.delivered, ["1:netbox.attestation"], "the field write, not the journal entry");
  assert.deepEqual((await store.listOutbox(1)).map((o) => o.key), ["ev:1"]);
  assert.equal(await w.flush(1, { journal: false }), true, "nothing a gate reads is pending");
  assert.deepEqual(bulks, []);
  assert.deepEqual(await w.runOnce(), { claimed: 0, delivered: 0, deferred: 0 }, "the lingering entry is not due for the passes");
  // the confirm (provision): a status, then its journal entry
  const cf = new StepEffects("cf");
  cf.status(node(1), "staged", "provision confirmed");
  cf.journal(node(1), { kind: "success", summary: "confirm" });
  await store.enqueue(cf.items, now);
  assert.equal(await w.flush(1), true);
  assert.deepEqual(t.delivered, ["1:netbox.attestation", "1:netbox.status"], "the status before any journal entry queued after it");
  assert.deepEqual(bulks, [["1:evidence:0", "1:confirm:0"]], "the evidence's and the confirm's entries in one delivery, in order");
  assert.deepEqual(await store.listOutbox(), []);
});

test("a run whose field write fails gives the rest back (counted: a journal entry is then looked up first); a failed bulk delivery defers every entry of it", async () => {
  const store = new SqliteAttestationStore(":memory:");
  let down = true;
  const bulks: string[][] = [];
  const t = target((_e, effect) => (down && effect.kind === "netbox.status" ? new Unavailable("netbox-unavailable", "down") : undefined));
  let bulkDown = false;
  const delivery: OutboxDelivery = {
    deliver: t.delivery.deliver,
    async deliverJournals(deviceId, items) {
      if (bulkDown) throw new Unavailable("netbox-unavailable", "down");
      bulks.push(items.map((i) => `${deviceId}:${i.effect.entry.summary}:${i.entry.attempts}`));
      return "delivered";
    },
  };
  const w = new OutboxWorker({ store, delivery, log: silent });
  const fx = new StepEffects("s");
  fx.status(node(1), "staged", "x");
  fx.journal(node(1), { kind: "info", summary: "j1" });
  fx.journal(node(1), { kind: "info", summary: "j2" });
  await store.enqueue(fx.items, Date.now());
  assert.equal(await w.flush(1), false);
  assert.deepEqual((await store.listOutbox(1)).map((o) => [o.key, o.attempts]), [["s:0", 1], ["s:1", 1], ["s:2", 1]]);
  down = false;
  bulkDown = true;
  assert.equal(await w.flush(1), false, "the status went; the entries' request failed");
  assert.deepEqual(t.delivered, ["1:netbox.status"]);
  assert.deepEqual((await store.listOutbox(1)).map((o) => [o.key, o.attempts]), [["s:1", 2], ["s:2", 2]]);
  bulkDown = false;
  assert.equal(await w.flush(1), true);
  assert.deepEqual(bulks, [["1:j1:2", "1:j2:2"]], "once, with their attempts counted (the delivery looks their keys up)");
});
