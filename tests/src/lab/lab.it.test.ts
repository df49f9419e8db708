/**
 * The lab (the README's main job) as an end-to-end test: part 1 (the TPM on its own) and the machines' continuous
 * story on one set of platforms (world.ts, story.ts) — the same scenario `bash .ci/lab` runs, shortened in one
 * place only: worker-1's LDevID renewal is not waited for (`--no-renewal-wait`: the LDevIDs live a day instead of 15
 * minutes, so no renewal comes due; the renewal with a LAK-signed quote and spire-agent attesting again is
 * spire/renewAgent.it's and `pnpm lab`'s).
 * Every other step runs on real firmware, real boots and real platforms. The report streams to
 * $FLEETD_CACHE/lab-it.log while it runs (CI prints its tail on failure).
 */
import { strict as assert } from "node:assert";
import { spawn } from "node:child_process";
import { createWriteStream, mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { fleetdCache } from "../harness/podman.js";

test("the lab's default scenario completes with every step as expected (the machines' story, renewal not waited for)", { timeout: 38 * 60_000 }, async () => {
  const main = resolve(fileURLToPath(import.meta.url), "../main.js");
  mkdirSync(fleetdCache(), { recursive: true });
  const logFile = join(fleetdCache(), "lab-it.log");
  const log = createWriteStream(logFile);
  const child = spawn(process.execPath, [main, "--no-renewal-wait"], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (d: Buffer) => {
    out += d.toString();
    log.write(d);
  });
  child.stderr.on("data", (d: Buffer) => {
    out += d.toString();
    log.write(d);
  });
  const code = await new Promise<number | null>((done) => child.on("close", done));
  log.end();
  assert.equal(code, 0, `the lab failed (whole report: ${logFile}):\n${out.slice(-20_000)}`);
  assert.match(out, /(\d+) of \1 steps as expected/);
  for (const node of ["worker-1", "worker-2", "worker-3", "worker-4", "worker-5"]) assert.match(out, new RegExp(`\\u2713 ${node}`), `a passed step about ${node}`);
});
