/** Tiny benchmark kit: run a function for a time budget, report operations per second. */
import type { ServerTransport } from "@fleetd/platform/protocol/client";
export interface BenchRow {
  name: string;
  value: number;
  unit: string;
  /** The floor measured in the same run (e.g. node:crypto doing only the raw primitive). */
  floor?: number;
  floorName?: string;
  /** Unit of the floor when it differs from `unit`. */
  floorUnit?: string;
  /** value / floor: how close we get to the bare primitive (1.0 = no overhead). */
  ratio?: number;
}

export function opsPerSecond(fn: () => void, budgetMs = Number(process.env["FLEETD_BENCH_MS"] ?? 1000)): number {
  for (let i = 0; i < 20; i++) fn(); // warm-up
  let n = 0;
  const start = process.hrtime.bigint();
  const deadline = start + BigInt(budgetMs) * 1_000_000n;
  let now = start;
  while (now < deadline) {
    for (let i = 0; i < 10; i++) fn();
    n += 10;
    now = process.hrtime.bigint();
  }
  return n / (Number(now - start) / 1e9);
}

export function row(name: string, unit: string, value: number, floorName: string, floor: number): BenchRow {
  return { name, value, unit, floor, floorName, ratio: value / floor };
}

export function printRows(title: string, rows: BenchRow[]): void {
  console.log(`\n${title}`);
  const w = Math.max(...rows.map((r) => r.name.length));
  for (const r of rows) {
    const v = `${r.value.toFixed(r.value < 100 ? 2 : 0)} ${r.unit}`;
    const f = r.floor !== undefined ? `   floor (${r.floorName}): ${r.floor.toFixed(r.floor < 100 ? 2 : 0)} ${r.floorUnit ?? r.unit}   ratio ${r.ratio?.toFixed(3)}` : "";
    console.log(`  ${r.name.padEnd(w)}  ${v.padStart(14)}${f}`);
  }
}

/**
 * A transport that adds up the time spent in `inner` (the server's time, as the client sees it on loopback):
 * `ms` is read and reset by the bench between phases.
 */
export function timedTransport(inner: ServerTransport): { transport: ServerTransport; ms: number } {
  const timer = {
    ms: 0,
    transport: {
      async post(path: string, body: unknown) {
        const t = performance.now();
        try {
          return await inner.post(path, body);
        } finally {
          timer.ms += performance.now() - t;
        }
      },
    } as ServerTransport,
  };
  return timer;
}
