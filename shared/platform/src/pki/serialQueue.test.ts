import { strict as assert } from "node:assert";
import { test } from "node:test";
import { SerialQueue } from "./serialQueue.js";

/** Counts how many tasks are inside at once; each task yields to the event loop several times. */
function meter() {
  let inFlight = 0;
  let max = 0;
  const order: number[] = [];
  const task = (i: number, fail = false) => async (): Promise<number> => {
    inFlight++;
    max = Math.max(max, inFlight);
    for (let k = 0; k < 3; k++) await new Promise<void>((r) => setImmediate(r));
    inFlight--;
    order.push(i);
    if (fail) throw new Error(`task ${i} failed`);
    return i;
  };
  return { task, get max() { return max; }, order };
}

test("SerialQueue runs one task at a time, in call order", async () => {
  const q = new SerialQueue();
  const m = meter();
  const results = await Promise.all(Array.from({ length: 12 }, (_, i) => q.run(m.task(i))));
  assert.deepEqual(results, Array.from({ length: 12 }, (_, i) => i));
  assert.equal(m.max, 1);
  assert.deepEqual(m.order, results);
  assert.equal(q.pending, 0);
});

test("the meter sees overlap when tasks are not queued (so the test above can fail)", async () => {
  const m = meter();
  await Promise.all(Array.from({ length: 4 }, (_, i) => m.task(i)()));
  assert.ok(m.max > 1, `expected overlap, max in flight ${m.max}`);
});

test("a failing task rejects its caller only; the queue goes on", async () => {
  const q = new SerialQueue();
  const m = meter();
  const a = q.run(m.task(0));
  const b = q.run(m.task(1, true));
  const c = q.run(m.task(2));
  assert.equal(await a, 0);
  await assert.rejects(b, /task 1 failed/);
  assert.equal(await c, 2);
  assert.equal(m.max, 1);
});
