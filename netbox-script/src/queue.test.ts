import { strict as assert } from "node:assert";
import { mkdirSync, mkdtempSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { pino } from "pino";
import { SqliteHandlerStore } from "@fleetd/platform/state";
import { Intents } from "./intents.js";
import { importLegacyState } from "./legacyImport.js";
import { JobQueue } from "./queue.js";

const open = (dir: string): JobQueue => new JobQueue(new SqliteHandlerStore(join(dir, "handler.db")), 60_000);

test("jobs survive a restart; delivery ids are remembered in the store for their window; failing jobs back off, then park", async () => {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-queue-"));
  const q1 = open(dir);
  const id = "a".repeat(64);
  assert.equal(await q1.rememberDelivery(id, Date.now() + 60_000), true);
  assert.equal(await q1.rememberDelivery(id, Date.now() + 60_000), false);
  assert.equal(await q1.rememberDelivery("b".repeat(64), Date.now() - 1), true);
  await q1.enqueue({ id: "wh:1", deviceId: 3, source: "webhook", receivedAt: "2026-01-01T00:00:01Z", hintEvent: "updated" });
  await q1.enqueue({ id: "wh:0", deviceId: 4, source: "webhook", receivedAt: "2026-01-01T00:00:00Z", hintEvent: "updated" });
  await q1.store.close();
  const q2 = open(dir); // "after a crash"
  assert.equal(await q2.rememberDelivery(id, Date.now() + 60_000), false, "still a duplicate after restart");
  assert.equal(await q2.rememberDelivery("b".repeat(64), Date.now() + 60_000), true, "expired ids are forgotten");
  assert.deepEqual((await q2.pending()).map((j) => j.id), ["wh:0", "wh:1"]);
  assert.equal(await q2.hasPendingFor(3), true);
  const [first] = await q2.take(1);
  assert.equal(first?.id, "wh:0");
  assert.equal(await q2.retryLater(first, "NetBox down", 1000, 2), "retry");
  const again = (await q2.pending()).find((j) => j.id === "wh:0");
  assert.equal(again?.attempts, 1);
  assert.ok(again && again.notBefore > Date.now());
  assert.deepEqual((await q2.take(10)).map((j) => j.id), ["wh:1"], "wh:0 waits for its backoff");
  await q2.release(true);
  assert.ok(again);
  const [retaken] = await q2.store.takeJobs(again.notBefore, q2.claimer, 60_000, 1); // once its backoff ended
  assert.equal(retaken?.id, "wh:0");
  assert.equal(await q2.retryLater(again, "NetBox down", 1000, 2), "parked");
  assert.deepEqual((await q2.pending()).map((j) => j.id), ["wh:1"]);
  assert.deepEqual((await q2.parked()).map((j) => [j.id, j.lastError]), [["wh:0", "NetBox down"]]);
  const [last] = await q2.take(1);
  assert.ok(last);
  await q2.done(last);
  assert.equal((await q2.pending()).length, 0);
  await q2.store.close();
});

test("a reconcile pass reads the pending jobs once: pendingDevices", async () => {
  const q = open(mkdtempSync(join(tmpdir(), "fleetd-queue-")));
  for (let d = 1; d <= 50; d++) await q.enqueue({ id: `wh:${d}`, deviceId: d, source: "webhook", receivedAt: "2026-01-01T00:00:00Z", hintEvent: null });
  const s = await q.pendingDevices();
  assert.equal(s.size, 50);
  assert.ok(s.has(7) && !s.has(51));
  await q.store.close();
});

test("the file queue of an older netbox-script is imported once: pending jobs queued, intents replayed, the files moved aside", async () => {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-legacy-"));
  mkdirSync(join(dir, "queue", "pending"), { recursive: true });
  mkdirSync(join(dir, "queue", "failed"), { recursive: true });
  writeFileSync(join(dir, "queue", "pending", "wh_1.json"), JSON.stringify({ id: "wh:1", deviceId: 3, source: "webhook", receivedAt: "2026-01-01T00:00:01Z", hintEvent: "updated", attempts: 2, notBefore: 0, lastError: "x" }));
  writeFileSync(join(dir, "queue", "pending", "junk.json"), "{");
  writeFileSync(join(dir, "queue", "failed", "wh_2.json"), "{}");
  const settled = { action: "provision", deviceId: 5, node: "w5", requestedBy: "alice" };
  const lines = [
    { ...settled, key: "desired_action:5:1", recordedAt: "2026-01-01T00:00:00Z", state: "claimed" },
    { ...settled, key: "desired_action:5:1", recordedAt: "2026-01-01T00:00:01Z", effect: { effect: "workflow", workflow: "wf-5", created: true, deleted: [] } },
    { action: "wipe", deviceId: 6, node: "w6", requestedBy: "bob", key: "desired_action:6:2", recordedAt: "2026-01-01T00:00:02Z", state: "claimed" },
  ];
  writeFileSync(join(dir, "intents.jsonl"), lines.map((l) => JSON.stringify(l) + "\n").join(""));
  const store = new SqliteHandlerStore(join(dir, "handler.db"));
  try {
    const r = await importLegacyState(dir, store, pino({ level: "silent" }));
    assert.deepEqual(r, { jobs: 1, intents: 3, parkedLeft: 1 });
    assert.deepEqual((await store.listJobs("pending")).map((j) => [j.id, j.deviceId]), [["wh:1", 3]]);
    const intents = new Intents(store);
    assert.deepEqual((await intents.all()).map((i) => [i.key, i.effect]), [["desired_action:5:1", { effect: "workflow", workflow: "wf-5", created: true, deleted: [] }]]);
    assert.equal((await intents.unsettledFor(6))?.key, "desired_action:6:2", "an unsettled claim is resumed");
    const left = readdirSync(dir).sort();
    assert.ok(left.some((f) => f.startsWith("queue.imported-")) && left.some((f) => f.startsWith("intents.jsonl.imported-")) && !left.includes("queue") && !left.includes("intents.jsonl"), left.join(" "));
    assert.equal(await importLegacyState(dir, store, pino({ level: "silent" })), undefined, "once");
  } finally {
    await store.close();
  }
});
