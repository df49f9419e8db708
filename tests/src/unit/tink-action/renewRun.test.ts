/** `renew` as a process runs it: the loop over attempts, the exit codes, the health endpoint, the CLI's refusals. */
import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, unlinkSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, test } from "node:test";
import pino from "pino";
import { EXIT } from "@fleetd/platform/cmd";
import { AttestationRefused } from "@fleetd/platform/protocol/client";
import { runRenew } from "@fleetd/tink-action/renewCommand";
import { loadRenewConfig } from "@fleetd/tink-action/renewConfig";
import { startHealthServer, type AgentStatus } from "@fleetd/tink-action/renewStatus";
import { makeKeys, makeSet, writeSeed } from "./renewFixture.js";

const root = mkdtempSync(join(tmpdir(), "fleetd-renew-run-"));
after(() => rmSync(root, { recursive: true, force: true }));
const keys = makeKeys();
const silent = pino({ level: "silent" });
let n = 0;
function setup() {
  const d = join(root, `c${n++}`);
  const seed = join(d, "seed");
  writeSeed(seed, makeSet(keys, "worker-1", 1));
  return loadRenewConfig({ FLEETD_SERVER: "http://127.0.0.1:9", FLEETD_ALLOW_HTTP: "lab", FLEETD_SEED_DIR: seed, FLEETD_DEVID_DIR: join(d, "devid"), FLEETD_STATUS_FILE: join(d, "status.json") });
}

test("running, failures never end the process: the loop keeps attempting with backoff until stopped; exit 0", async () => {
  const cfg = setup();
  const stop = new AbortController();
  const waits: number[] = [];
  let attempts = 0;
  const code = await runRenew(cfg, {
    stop: stop.signal,
    log: silent,
    deps: {
      attest: async () => {
        attempts++;
        throw new AttestationRefused("renew-challenge", 503, { error: "unavailable", reasons: [] });
      },
      sleep: async (ms) => {
        waits.push(ms);
        if (waits.length === 6) stop.abort();
      },
      random: () => 0.5,
    },
  });
  assert.equal(code, EXIT.ok);
  assert.equal(attempts, 6);
  assert.deepEqual(waits.slice(0, 2), [22_500, 45_000], "exponential from the 30 s base");
  assert.ok(waits.slice(2).every((x) => x === 2_700_000), "at the cap (jittered) once the verdict failed");
});

test("--once exit codes: 0 pass, 1 refused, 5 failed; --seed-only 0; a corrupt devid directory 2 before any attempt", async () => {
  const pass = setup();
  assert.equal(await runRenew(pass, { once: true, log: silent, deps: { attest: async () => ({ verdict: "pass" }) } }), EXIT.ok);
  assert.equal(
    await runRenew(pass, { once: true, log: silent, deps: { attest: async () => { throw new AttestationRefused("renew-evidence", 403, { error: "refused", reasons: [{ check: "policy.x", detail: "y" }] }); } } }),
    EXIT.refused,
  );
  assert.equal(await runRenew(pass, { once: true, log: silent, deps: { attest: async () => { throw new Error("ECONNREFUSED"); } } }), EXIT.unavailable);
  const seedOnly = setup();
  let called = false;
  assert.equal(await runRenew(seedOnly, { seedOnly: true, log: silent, deps: { attest: async () => { called = true; return { verdict: "pass" }; } } }), EXIT.ok);
  assert.equal(called, false, "--seed-only attests nothing");
  unlinkSync(join(seedOnly.devidDir, "g1", "ldevid.priv"));
  assert.equal(await runRenew(seedOnly, { once: true, log: silent, deps: { attest: async () => { called = true; return { verdict: "pass" }; } } }), EXIT.usage);
  assert.equal(called, false, "no attempt with a corrupt directory");
});

test("/healthz answers while the process serves; /readyz follows the node's verdict", async () => {
  let s: AgentStatus | undefined;
  const server = await startHealthServer(0, () => s, "127.0.0.1");
  try {
    const port = (server.address() as AddressInfo).port;
    const get = async (p: string) => {
      const r = await fetch(`http://127.0.0.1:${port}${p}`);
      return [r.status, await r.json()] as const;
    };
    assert.equal((await get("/healthz"))[0], 200);
    assert.equal((await get("/readyz"))[0], 503, "not ready before the first status");
    s = { version: 1, ready: true, verdict: "pass", consecutiveFailures: 0, failuresForVerdict: 3, refused: false, reasons: [], updatedAt: new Date().toISOString() };
    assert.equal((await get("/readyz"))[0], 200);
    s = { ...s, ready: false, verdict: "failed", consecutiveFailures: 3 };
    const [code, body] = await get("/readyz");
    assert.equal(code, 503);
    assert.equal((body as AgentStatus).verdict, "failed");
  } finally {
    await new Promise((r) => server.close(r));
  }
});

test("the CLI: `renew --help` documents it; a bad setting exits 2 naming the variable or flag", () => {
  const cli = resolve(fileURLToPath(import.meta.url), "../../../../../tink-action/dist/cli.js");
  const help = spawnSync(process.execPath, [cli, "renew", "--help"], { encoding: "utf8" });
  assert.equal(help.status, 0);
  assert.match(help.stdout, /FLEETD_RENEW_FAILURES/);
  assert.match(help.stdout, /exit codes/);
  const top = spawnSync(process.execPath, [cli, "--help"], { encoding: "utf8" });
  assert.match(top.stdout, /renew +the node agent on Talos/);
  const bad = spawnSync(process.execPath, [cli, "renew", "--once", "--failures", "x"], { encoding: "utf8", env: { PATH: process.env["PATH"], FLEETD_SERVER: "http://127.0.0.1:9", FLEETD_ALLOW_HTTP: "lab" } });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /--failures \(FLEETD_RENEW_FAILURES\): must be a whole number/);
  const missing = spawnSync(process.execPath, [cli, "renew", "--once"], { encoding: "utf8", env: { PATH: process.env["PATH"] } });
  assert.equal(missing.status, 2);
  assert.match(missing.stderr, /FLEETD_SERVER: is required/);
});
