/**
 * Benchmark: NetBox webhook to handler dispatch, on loopback, against the real NetBox of the harness.
 *   pnpm -s build && node tests/dist/bench/netbox.js [--iterations N]
 * Rows: PATCH → webhook receipt (NetBox's event pipeline + RQ delivery), receipt → decision (netbox-script:
 * verify, enqueue durably, re-read, change log, decide, clear with If-Match, journal), PATCH → decision, and the
 * handler's 202 latency for signed bodies. Loops are bounded; nothing leaves 127.0.0.1.
 */
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { signHookBody } from "@fleetd/platform/netbox";
import { fleetd, startFleet } from "../netbox/fixture.js";
import { device, handlerRig, requestAction } from "../netbox/handlerFixture.js";

import type { BenchRow } from "./measure.js";

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] ?? NaN;
}

export async function benchNetbox(iterations = 20): Promise<BenchRow[]> {
  const f = await startFleet();
  const rig = handlerRig(f);
  let h: Awaited<ReturnType<typeof rig.start>> | undefined;
  try {
    const adminCfg = f.configFile(f.nb.authorization.replace(/^Bearer /, ""));
    if (fleetd(["netbox", "setup", "--config", adminCfg]).code !== 0) throw new Error("netbox setup failed");
    if (fleetd(["inventory", "apply", rig.nodesFile, "--config", f.configFile(f.apply.token)]).code !== 0) throw new Error("inventory apply failed");
    h = await rig.start();
    // let NetBox's worker drain the search-index jobs of the apply before measuring
    await new Promise((r) => setTimeout(r, 3000));
    const names = ["worker-1", "edge-1"];
    const ids = new Map<string, number>();
    for (const n of names) ids.set(n, (await device(f, n)).id);
    const toReceipt: number[] = [];
    const toDecision: number[] = [];
    const total: number[] = [];
    for (let i = 0; i < iterations; i++) {
      const name = names[i % names.length] as string;
      const id = ids.get(name) as number;
      const mark = rig.decisions.events.length;
      const t0 = Date.now();
      await requestAction(f, f.alice.token, name, "attest");
      const e = await rig.decisions.wait(mark, (x) => x.deviceId === id && x.decision.outcome !== "ignore", `attest ${name}`, 120_000);
      if (e.job.source !== "webhook") continue; // a reconcile pick-up is not a webhook measurement
      const received = Date.parse(e.job.receivedAt);
      toReceipt.push(received - t0);
      toDecision.push(e.at - received);
      total.push(e.at - t0);
    }
    // the handler's own answer time for signed bodies (synthetic; device without a request → ignored later)
    const answer: number[] = [];
    const someId = ids.get("worker-1") as number;
    for (let i = 0; i < 100; i++) {
      const body = JSON.stringify({ event: "updated", timestamp: new Date().toISOString(), object_type: "dcim.device", request: { id: `bench-${i}`, user: "alice" }, data: { id: someId } });
      const t0 = performance.now();
      const r = await fetch(`${h.url}/netbox/events`, { method: "POST", headers: { "content-type": "application/json", "x-hook-signature": signHookBody(Buffer.from(body), f.webhookSecret) }, body });
      await r.arrayBuffer();
      answer.push(performance.now() - t0);
    }
    const rows: BenchRow[] = [];
    const add = (name: string, xs: number[]): void => {
      rows.push({ name: `${name} p50`, value: Math.round(pct(xs, 50) * 10) / 10, unit: "ms" });
      rows.push({ name: `${name} p95`, value: Math.round(pct(xs, 95) * 10) / 10, unit: "ms" });
    };
    add("netbox PATCH to webhook receipt", toReceipt);
    add("netbox webhook receipt to dispatch decision", toDecision);
    add("netbox PATCH to dispatch decision", total);
    add("netbox-script 202 answer (signed body, durable enqueue)", answer);
    rows.push({ name: "netbox webhook samples", value: total.length, unit: "count" });
    return rows;
  } finally {
    await h?.stop();
    await f.nb.stop();
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf("--iterations");
  const n = i > 0 ? Number(process.argv[i + 1]) : 20;
  const rows = await benchNetbox(Number.isFinite(n) && n > 0 && n <= 500 ? n : 20);
  for (const r of rows) process.stdout.write(`${r.name.padEnd(60)} ${String(r.value).padStart(8)} ${r.unit}\n`);
}
