import { strict as assert } from "node:assert";
import { test } from "node:test";
import fc from "fast-check";
import { backoffDelayMs, DEFAULT_BACKOFF } from "./backoff.js";

test("backoff doubles from the base, is capped, and jitters within [d/2, d]", () => {
  assert.equal(backoffDelayMs(1, 0), 500);
  assert.equal(backoffDelayMs(1, 1), 1000);
  assert.equal(backoffDelayMs(2, 1), 2000);
  assert.equal(backoffDelayMs(5, 1), 16_000);
  assert.equal(backoffDelayMs(6, 1), 30_000, "capped at 30 s");
  assert.equal(backoffDelayMs(1000, 0), 15_000);
  assert.equal(backoffDelayMs(Number.NaN, Number.NaN), 1000, "nonsense input falls back to the first, widest-jitter step");
});

test("property: every delay lies in [d/2, d] for d = min(cap, base·2^(n-1)), and the upper bound never shrinks", () => {
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 200 }), fc.double({ min: 0, max: 1, noNaN: true }), (n, r) => {
      const d = Math.min(DEFAULT_BACKOFF.capMs, DEFAULT_BACKOFF.baseMs * 2 ** Math.min(n - 1, 30));
      const v = backoffDelayMs(n, r);
      assert.ok(v >= Math.floor(d / 2) && v <= d, `${v} outside [${d / 2}, ${d}] at attempt ${n}`);
      assert.ok(backoffDelayMs(n + 1, 1) >= backoffDelayMs(n, 1));
    }),
  );
});
