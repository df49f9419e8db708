import { strict as assert } from "node:assert";
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { FileQueue } from "./queue.js";

test("jobs survive a restart; delivery ids are remembered on disk for their window", () => {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-queue-"));
  const q1 = new FileQueue(dir);
  const id = "a".repeat(64);
  assert.equal(q1.rememberDelivery(id, Date.now() + 60_000), true);
  assert.equal(q1.rememberDelivery(id, Date.now() + 60_000), false);
  assert.equal(q1.rememberDelivery("b".repeat(64), Date.now() - 1), true);
  q1.enqueue({ id: "wh:1", deviceId: 3, source: "webhook", receivedAt: "2026-01-01T00:00:01Z", hintEvent: "updated" });
  q1.enqueue({ id: "wh:0", deviceId: 4, source: "webhook", receivedAt: "2026-01-01T00:00:00Z", hintEvent: "updated" });
  const q2 = new FileQueue(dir); // "after a crash"
  assert.equal(q2.rememberDelivery(id, Date.now() + 60_000), false, "still a duplicate after restart");
  assert.equal(q2.rememberDelivery("b".repeat(64), Date.now() + 60_000), true, "expired ids are forgotten");
  assert.deepEqual(q2.pending().map((j) => j.id), ["wh:0", "wh:1"]);
  assert.equal(q2.hasPendingFor(3), true);
  const [first] = q2.pending();
  assert.ok(first);
  assert.equal(q2.retryLater(first, "NetBox down", 1000, 2), "retry");
  const again = q2.pending().find((j) => j.id === "wh:0");
  assert.equal(again?.attempts, 1);
  assert.ok(again && again.notBefore > Date.now());
  assert.equal(q2.retryLater(again, "NetBox down", 1000, 2), "parked");
  assert.deepEqual(q2.pending().map((j) => j.id), ["wh:1"]);
  assert.equal(readdirSync(join(dir, "failed")).length, 1);
  const last = q2.pending()[0];
  assert.ok(last);
  q2.done(last);
  assert.equal(q2.pending().length, 0);
  // a corrupt job file is parked, not fatal
  writeFileSync(join(dir, "pending", "junk.json"), "{");
  assert.equal(q2.pending().length, 0);
  assert.equal(readdirSync(join(dir, "failed")).length, 2);
});

test("deliveries.log stays bounded: ids past their window are dropped from the file while the handler runs", () => {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-queue-"));
  const q = new FileQueue(dir);
  const log = join(dir, "deliveries.log");
  const lines = (): number => readFileSync(log, "utf8").split("\n").filter(Boolean).length;
  for (let i = 0; i < 5000; i++) assert.equal(q.rememberDelivery(i.toString(16).padStart(64, "0"), Date.now() - 1), true);
  assert.ok(lines() <= 1001 && q.deliveryLogLines === lines(), `expired ids compacted away: ${lines()} lines`);
  // live ids are kept, through compactions and a restart
  const live = "f".repeat(64);
  assert.equal(q.rememberDelivery(live, Date.now() + 60_000), true);
  for (let i = 0; i < 3000; i++) q.rememberDelivery((i + 10_000).toString(16).padStart(64, "0"), Date.now() - 1);
  assert.equal(q.rememberDelivery(live, Date.now() + 60_000), false);
  assert.equal(new FileQueue(dir).rememberDelivery(live, Date.now() + 60_000), false);
  assert.equal(lines(), 1, "a restart keeps only the live id");
});

test("a reconcile pass reads the pending directory once: pendingDevices", () => {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-queue-"));
  const q = new FileQueue(dir);
  for (let d = 1; d <= 50; d++) q.enqueue({ id: `wh:${d}`, deviceId: d, source: "webhook", receivedAt: "2026-01-01T00:00:00Z", hintEvent: null });
  const s = q.pendingDevices();
  assert.equal(s.size, 50);
  assert.ok(s.has(7) && !s.has(51));
});
