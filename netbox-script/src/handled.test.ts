import { strict as assert } from "node:assert";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { Handled } from "./handled.js";

test("handled.log keeps the newest decommissioning request and settled state per device: bounded while running and after a restart", () => {
  const path = join(mkdtempSync(join(tmpdir(), "fleetd-handled-")), "handled.log");
  const lines = (): number => readFileSync(path, "utf8").split("\n").filter(Boolean).length;
  const h = new Handled(path);
  // a reconcile pass every minute for days: each pass settles device 7 at a new last_updated
  for (let i = 0; i < 5000; i++) h.add(`settled:7:2026-01-01T00:00:${String(i).padStart(5, "0")}Z`);
  h.add("decommission:7:100");
  h.add("decommission:8:200");
  assert.ok(lines() <= 1003, `${lines()} lines`);
  assert.equal(h.has("settled:7:2026-01-01T00:00:04999Z"), true);
  assert.equal(h.has("settled:7:2026-01-01T00:00:00001Z"), false, "superseded");
  assert.equal(h.has("decommission:7:100"), true);
  h.add("decommission:7:101");
  assert.equal(h.has("decommission:7:100"), false);
  const again = new Handled(path);
  assert.equal(lines(), 3, "one line per kind and device after a restart");
  assert.ok(again.has("decommission:7:101") && again.has("decommission:8:200") && again.has("settled:7:2026-01-01T00:00:04999Z"));
});
