/**
 * Benchmark: `GET /talos/config` under a burst (issue 12: "200 concurrent fetches of 200 different configs: p99 <
 * 10 ms"), on loopback, through talos-config-server's own app, the real SQLite state store and the production
 * listener limits (tests/src/talos/configFetchRig.ts): 200 real worker configs, each sealed to its own code, and
 * 200 fetches started at once, each on its own connection from its own 127.1.x.y address (as 200 machines).
 * Each fetch is timed from the request's start to the last byte of the body; the burst is repeated with fresh
 * codes (FLEETD_BENCH_TALOS_CONFIG_BURSTS, default 5, after one warm-up burst), FLEETD_BENCH_TALOS_CONFIG_FETCHES
 * sets the burst's size (default 200).
 * Floor, same run, same client, same server: the same burst against a trivial handler of the same express app
 * (`/healthz`: a constant `{"ok":true}`; the config's ~5 KB more on loopback is one larger write). What the floor
 * leaves out is the config fetch's own work: the rate-limit charge
 * and refund, the claim, the open (AES-GCM), and after each response the delivery commit in SQLite (the row
 * blanked and deleted, the outbox items, a WAL checkpoint) — on the same event loop as the other fetches.
 * Not in it: the fetch's NetBox read (`stillWanted`: is the node still staged?), which answers at once here; in a
 * deployment every fetch waits for one NetBox GET (see the NetBox bench for its latency) and the outbox flush.
 *   pnpm -s build && node tests/dist/bench/talosConfig.js
 */
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { clientAddress, configPath, get, putConfigs, startConfigRig, workerConfig } from "../talos/configFetchRig.js";
import type { BenchRow } from "./measure.js";
import { pct } from "./netbox.js";

async function burst(port: number, paths: string[]): Promise<{ ms: number[]; wallMs: number; statuses: Map<number, number> }> {
  const t0 = performance.now();
  const res = await Promise.all(paths.map((p, i) => get(port, p, clientAddress(i))));
  const statuses = new Map<number, number>();
  for (const r of res) statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
  return { ms: res.map((r) => r.ms), wallMs: performance.now() - t0, statuses };
}

export async function benchTalosConfig(
  bursts = Number(process.env["FLEETD_BENCH_TALOS_CONFIG_BURSTS"] ?? 5),
  fetches = Number(process.env["FLEETD_BENCH_TALOS_CONFIG_FETCHES"] ?? 200),
): Promise<BenchRow[]> {
  const texts = Array.from({ length: fetches }, (_, i) => workerConfig(i));
  const size = Math.round(texts.reduce((a, t) => a + t.length, 0) / texts.length);
  const rig = await startConfigRig({ configs: texts });
  try {
    const served: number[] = [];
    const floor: number[] = [];
    const wall: number[] = [];
    const floorWall: number[] = [];
    let wrong = 0;
    for (let b = 0; b <= bursts; b++) {
      // fresh codes for every burst after the first (device ids of their own: one live code per node)
      const configs = b === 0 ? rig.configs : await putConfigs(rig.store, texts, 1001 + b * fetches);
      const f = await burst(rig.port, configs.map(() => "/healthz"));
      const r = await burst(rig.port, configs.map(configPath));
      wrong += fetches - (r.statuses.get(200) ?? 0) + (fetches - (f.statuses.get(200) ?? 0));
      if (b === 0) continue; // warm-up: connections, JIT, SQLite's caches
      served.push(...r.ms);
      floor.push(...f.ms);
      wall.push(r.wallMs);
      floorWall.push(f.wallMs);
    }
    if (wrong > 0) throw new Error(`${wrong} fetches were not answered 200`);
    const rows: BenchRow[] = [];
    const round = (x: number) => Math.round(x * 100) / 100;
    for (const p of [50, 95, 99]) {
      const v = round(pct(served, p));
      const fl = round(pct(floor, p));
      rows.push({ name: `talos config fetch, ${fetches} concurrent, p${p}${p === 99 ? " (target 10 ms)" : ""}`, value: v, unit: "ms", floor: fl, floorName: `the same app's /healthz, p${p}`, ratio: v / fl });
    }
    rows.push({ name: `talos config burst of ${fetches}: first request to last body, median`, value: round(pct(wall, 50)), unit: "ms", floor: round(pct(floorWall, 50)), floorName: "the floor's burst", ratio: pct(wall, 50) / pct(floorWall, 50) });
    rows.push({ name: `talos config fetches measured (bursts × fetches; configs of ${size} B)`, value: served.length, unit: "count" });
    return rows;
  } finally {
    await rig.close();
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const rows = await benchTalosConfig();
  for (const r of rows) process.stdout.write(`${r.name.padEnd(72)} ${String(r.value).padStart(8)} ${r.unit}${r.floor !== undefined ? `   floor (${r.floorName}) ${r.floor} ${r.unit}, ratio ${r.ratio?.toFixed(2)}` : ""}\n`);
}
