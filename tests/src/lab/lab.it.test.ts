/** The lab (the README's main job) runs to completion with every step as expected. */
import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

test("the lab completes with every step as expected", () => {
  const main = resolve(fileURLToPath(import.meta.url), "../main.js");
  const r = spawnSync(process.execPath, [main], { encoding: "utf8", timeout: 900_000 });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /(\d+) of \1 steps as expected/);
});
