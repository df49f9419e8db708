/**
 * Benchmark: a NetBox change to a Tinkerbell Workflow, per stage, on loopback: the real NetBox of the harness (its
 * RQ worker delivers the webhook), netbox-script, and a real kube-apiserver holding Tinkerbell v0.25.0's CRDs.
 *   pnpm -s build && node tests/dist/bench/netbox.js [--iterations N] [--trace]
 * Each iteration sets desired_action provision on edge-1 or worker-1 (both attested: a proven MAC) as alice would in
 * the UI, and times (issue 12: "NetBox change → Workflow created: p95 < 1 s end to end, measured per stage"):
 *  - NetBox's share, from RQ's own job timestamps (NetBox's Redis): PATCH sent → webhook job enqueued (NetBox's web
 *    request: the save, its change log, the event rules — flushed as the request ends), enqueued → started (the RQ
 *    worker's pick-up), started → webhook received (render, sign, POST); and PATCH sent → webhook received;
 *  - webhook received → job started (durable enqueue, worker wake-up) → decision (device read, the request's change
 *    log, then the EK attribution and the requester's groups together, decide());
 *  - decision → taken (claim in the intent log, desired_action cleared with If-Match at the decision's ETag; the
 *    boot MAC's change log is read beside it);
 *  - taken → Workflow created (Hardware, BMC Machine and the Workflow in the kube-apiserver: its 201 — the
 *    handler's own mark, DecisionEvent.marks.effect);
 *  - PATCH sent → Workflow created (end to end), and the fleetd share (webhook received → Workflow created);
 *  - Workflow created → job done (intent recorded, NetBox journal entry), after the Workflow exists.
 * The Workflow of the node is deleted between iterations (outside the timing), so each is a first provision.
 * --trace (FLEETD_BENCH_NETBOX_TRACE=1) prints every HTTP request of one iteration (undici's and node:http's
 * diagnostics channels) on a time line from the PATCH. Then the handler's 202 latency for signed bodies.
 * Loops are bounded; nothing leaves 127.0.0.1.
 */
import { spawnSync } from "node:child_process";
import { subscribe } from "node:diagnostics_channel";
import { writeFileSync } from "node:fs";
import type { ClientRequest, IncomingMessage } from "node:http";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { pino } from "pino";
import { startHandler, toHandlerConfig, type DecisionEvent, type Handler } from "@fleetd/netbox-script";
import { loadKube, type Kube } from "@fleetd/platform/kube";
import { NetBoxInventory, patchDevice, signHookBody } from "@fleetd/platform/netbox";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";
import { nodeRef } from "../harness/nodeRef.js";
import { installTinkerbellCrds } from "../harness/tinkerbellCrds.js";
import { fleetd, startFleet, type Fleet } from "../netbox/fixture.js";
import { Decisions, device, handlerNodesText } from "../netbox/handlerFixture.js";
import { kubernetesSection } from "../tinkerbell/fixtures.js";

import type { BenchRow } from "./measure.js";

const NS = "tinkerbell";
/** The issue's target for PATCH → Workflow created, p95. */
const TARGET_MS = 1000;

export function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] ?? NaN;
}

/** Every outgoing HTTP request of this process while `on`: [start, end, what] (ms since the epoch). */
class HttpTrace {
  on = false;
  readonly spans: { start: number; end: number; what: string }[] = [];
  private readonly open = new WeakMap<object, { start: number; what: string }>();
  constructor() {
    // fetch (the NetBox client): undici's channels
    subscribe("undici:request:create", (m) => {
      const { request } = m as { request: { method: string; origin: string; path: string } };
      if (this.on) this.open.set(request, { start: Date.now(), what: `${request.method} ${request.origin.replace(/^https?:\/\/127\.0\.0\.1:/, ":")}${request.path.split("?")[0]}` });
    });
    subscribe("undici:request:trailers", (m) => this.close((m as { request: object }).request));
    subscribe("undici:request:error", (m) => this.close((m as { request: object }).request));
    // node:https (the Kubernetes client)
    subscribe("http.client.request.start", (m) => {
      const { request } = m as { request: ClientRequest };
      if (this.on) this.open.set(request, { start: Date.now(), what: `${request.method} kube${request.path.split("?")[0]}` });
    });
    subscribe("http.client.response.finish", (m) => {
      const { request, response } = m as { request: ClientRequest; response: IncomingMessage };
      // the body is read after 'finish' of the headers: close at the end of the body
      const done = () => this.close(request);
      if (response.complete) done();
      else response.once("end", done);
    });
  }
  private close(key: object): void {
    const o = this.open.get(key);
    if (!o) return;
    this.open.delete(key);
    this.spans.push({ start: o.start, end: Date.now(), what: o.what });
  }
}

interface Sample {
  node: string;
  patchSent: number;
  patchAnswered: number;
  received: number;
  e: DecisionEvent;
  /** RQ's own timestamps of the webhook's job (ms since the epoch), when it was found. */
  rq?: RqJob;
}

interface RqJob {
  id: string;
  enqueued: number;
  started: number;
  ended: number;
}

/**
 * The webhook jobs RQ finished, with RQ's own timestamps, read from NetBox's Redis with redis-cli. `send_webhook`
 * is the job NetBox's event rules enqueue for a webhook action, on the `high` queue here (QUEUE_MAPPINGS in
 * tests/scripts/netbox/fleetd_configuration.py).
 */
function finishedWebhookJobs(redis: { port: number; password: string }): RqJob[] {
  const cli = (args: string[]): string[] => {
    const r = spawnSync("redis-cli", ["-h", "127.0.0.1", "-p", String(redis.port), "--raw", ...args], { env: { ...process.env, REDISCLI_AUTH: redis.password }, encoding: "utf8", timeout: 10_000 });
    if (r.status !== 0) throw new Error(`redis-cli ${args[0]}: ${r.stderr || r.error?.message}`);
    return r.stdout.split("\n").filter((l, i, all) => i < all.length - 1 || l !== "");
  };
  const utc = (s: string | undefined): number => (s ? Date.parse(s.endsWith("Z") ? s : `${s}Z`) : NaN);
  const jobs: RqJob[] = [];
  for (const id of cli(["ZRANGE", "rq:finished:high", "0", "-1"])) {
    const [description, enqueued, started, ended] = cli(["HMGET", `rq:job:${id}`, "description", "enqueued_at", "started_at", "ended_at"]);
    if (!description?.includes("send_webhook")) continue;
    jobs.push({ id, enqueued: utc(enqueued), started: utc(started), ended: utc(ended) });
  }
  return jobs;
}

export async function benchNetbox(iterations = Number(process.env["FLEETD_BENCH_NETBOX_ITERATIONS"] ?? 20), trace = process.env["FLEETD_BENCH_NETBOX_TRACE"] === "1"): Promise<BenchRow[]> {
  let f: Fleet | undefined;
  let cp: ControlPlane | undefined;
  let h: Handler | undefined;
  const http = new HttpTrace();
  try {
    [f, cp] = await Promise.all([startFleet(), startControlPlane()]);
    await installTinkerbellCrds(cp);
    const kube: Kube = loadKube(cp.kubeconfig);
    for (const name of [NS, "fleetd"]) await kube.core.createNamespace({ body: { metadata: { name } } });
    const adminCfg = f.configFile(f.nb.authorization.replace(/^Bearer /, ""));
    if (fleetd(["netbox", "setup", "--config", adminCfg]).code !== 0) throw new Error("netbox setup failed");
    const nodesFile = join(f.dir, "bench-nodes.yaml");
    writeFileSync(nodesFile, handlerNodesText());
    if (fleetd(["inventory", "apply", nodesFile, "--config", f.configFile(f.apply.token)]).code !== 0) throw new Error("inventory apply failed");
    // What a passing attestation records: the proven MAC on the cabled interface (as tinkerbell/netboxHandler.it).
    const macs: Record<string, string> = { "edge-1": "0C:C4:7A:AA:00:31", "worker-1": "0C:C4:7A:AA:00:21" };
    const inv = new NetBoxInventory(f.client(f.handler.token), { applyAccount: f.apply.username, attestationAccount: f.handler.username, roleSlugs: { worker: "fleetd-worker", "control-plane": "fleetd-control-plane" } });
    for (const [n, mac] of Object.entries(macs)) await inv.recordAttestation(await nodeRef(f.admin, n), { verdict: "pass", at: new Date(), macs: [mac] });
    const caFile = join(f.dir, "server-ca.pem");
    writeFileSync(caFile, cp.caPem);
    const decisions = new Decisions();
    h = await startHandler(
      toHandlerConfig(f.config(f.handler.token, {
        handler: { listen: { host: "127.0.0.1", port: f.handlerPort }, stateDir: join(f.dir, "bench-state"), nodesFile, reconcileIntervalSeconds: 3600 },
        kubernetes: kubernetesSection(cp.kubeconfig, NS, caFile),
      } as never)),
      { logger: pino({ level: process.env["FLEETD_TEST_LOG"] ?? "silent" }), onDecision: (e) => decisions.push(e) },
    );
    // let NetBox's worker drain the search-index jobs of the apply before measuring
    await new Promise((r) => setTimeout(r, 3000));

    const names = Object.keys(macs);
    const ids = new Map<string, number>();
    for (const n of names) ids.set(n, (await device(f, n)).id);
    const alice = f.client(f.alice.token);
    const samples: Sample[] = [];
    const warmUp = names.length; // one provision per node first (connections, the handler's first Hardware and Machine)
    let traced = false;
    for (let i = 0; i < iterations + warmUp; i++) {
      const name = names[i % names.length] as string;
      const id = ids.get(name) as number;
      const mark = decisions.events.length;
      const tracing = trace && !traced && i >= warmUp;
      http.on = tracing;
      const patchSent = Date.now();
      await patchDevice(alice, id, { custom_fields: { desired_action: "provision" } }, null, "bench: provision");
      const patchAnswered = Date.now();
      const e = await decisions.wait(mark, (x) => x.deviceId === id && x.decision.outcome !== "ignore", `provision ${name}`, 120_000);
      http.on = false;
      if (e.decision.outcome !== "dispatch" || e.marks.effect === undefined) throw new Error(`provision ${name}: ${JSON.stringify(e.decision)}`);
      const wfs = (await kube.custom.listNamespacedCustomObject({ group: "tinkerbell.org", version: "v1alpha1", namespace: NS, plural: "workflows", labelSelector: `fleetd.io/node=${name}` })) as { items: { metadata: { name: string } }[] };
      if (wfs.items.length !== 1) throw new Error(`provision ${name}: ${wfs.items.length} Workflows`);
      for (const w of wfs.items) await kube.custom.deleteNamespacedCustomObject({ group: "tinkerbell.org", version: "v1alpha1", namespace: NS, plural: "workflows", name: w.metadata.name });
      if (i < warmUp || e.job.source !== "webhook") continue; // a reconcile pick-up is not a webhook measurement
      // the webhook of this PATCH: the first send_webhook job enqueued after it was sent (the handler's own writes come after the receipt)
      const received = Date.parse(e.job.receivedAt);
      const rq = finishedWebhookJobs(f.nb.redis).filter((j) => j.enqueued >= patchSent - 5 && j.started <= received).sort((a, b) => a.enqueued - b.enqueued)[0];
      const s: Sample = { node: name, patchSent, patchAnswered, received, e, ...(rq ? { rq } : {}) };
      samples.push(s);
      if (tracing) {
        traced = true;
        printTrace(s, http.spans);
      }
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
    return rowsOf(samples, answer);
  } finally {
    await h?.stop();
    await Promise.all([f?.nb.stop(), cp?.stop()]);
  }
}

function rowsOf(samples: Sample[], answer: number[]): BenchRow[] {
  const m = (s: Sample) => s.e.marks as Required<DecisionEvent["marks"]>;
  const rows: BenchRow[] = [];
  const add = (name: string, xs: number[], target?: number): void => {
    rows.push({ name: `${name} p50`, value: Math.round(pct(xs, 50) * 10) / 10, unit: "ms" });
    const p95 = Math.round(pct(xs, 95) * 10) / 10;
    rows.push(target === undefined ? { name: `${name} p95`, value: p95, unit: "ms" } : { name: `${name} p95`, value: p95, unit: "ms", floor: target, floorName: "issue 12 target", ratio: p95 / target });
  };
  const rq = samples.filter((s): s is Sample & { rq: RqJob } => s.rq !== undefined);
  add("NetBox: PATCH sent to webhook job enqueued (web: save, change log, event rules)", rq.map((s) => s.rq.enqueued - s.patchSent));
  add("NetBox: webhook job enqueued to started (RQ worker pick-up)", rq.map((s) => s.rq.started - s.rq.enqueued));
  add("NetBox: webhook job started to received (RQ worker: render, sign, POST)", rq.map((s) => s.received - s.rq.started));
  add("NetBox's share: PATCH sent to webhook received", samples.map((s) => s.received - s.patchSent));
  add("(NetBox: PATCH sent to its response, for comparison)", samples.map((s) => s.patchAnswered - s.patchSent));
  add("fleetd: webhook received to job started (enqueue, worker wake-up)", samples.map((s) => m(s).started - s.received));
  add("fleetd: job started to decision (device, change log, then EK ‖ groups)", samples.map((s) => m(s).decided - m(s).started));
  add("fleetd: decision to taken (claim, desired_action cleared with If-Match)", samples.map((s) => m(s).taken - m(s).decided));
  add("fleetd: taken to Workflow created (Hardware, Machine, Workflow)", samples.map((s) => m(s).effect - m(s).taken));
  add("fleetd's share: webhook received to Workflow created", samples.map((s) => m(s).effect - s.received));
  add("end to end: PATCH sent to Workflow created", samples.map((s) => m(s).effect - s.patchSent), TARGET_MS);
  add("after: Workflow created to job done (intent log, journal)", samples.map((s) => s.e.at - m(s).effect));
  add("netbox-script 202 answer (signed body, durable enqueue)", answer);
  rows.push({ name: "webhook → Workflow samples", value: samples.length, unit: "count" });
  rows.push({ name: "  of which with RQ's job timestamps", value: rq.length, unit: "count" });
  return rows;
}

/** One iteration's HTTP requests on a time line from the PATCH (ms), with the handler's marks. */
function printTrace(s: Sample, spans: { start: number; end: number; what: string }[]): void {
  const t = (x: number) => String(x - s.patchSent).padStart(5);
  const m = s.e.marks;
  const events: [number, string][] = [
    [s.patchSent, "PATCH sent"], [s.patchAnswered, "PATCH answered"], [s.received, "webhook received"], [m.started, "job started"],
    ...(s.rq ? [[s.rq.enqueued, "RQ: webhook job enqueued"], [s.rq.started, "RQ: webhook job started"], [s.rq.ended, "RQ: webhook job ended"]] as [number, string][] : []),
    ...(m.decided !== undefined ? [[m.decided, "decided"] as [number, string]] : []),
    ...(m.taken !== undefined ? [[m.taken, "taken"] as [number, string]] : []),
    ...(m.effect !== undefined ? [[m.effect, "Workflow created"] as [number, string]] : []),
    [s.e.at, "job done"],
  ];
  const lines: [number, string][] = [
    ...events.map(([at, what]): [number, string] => [at, `${t(at)}        --- ${what}`]),
    ...spans.map((x): [number, string] => [x.start, `${t(x.start)} ${String(x.end - x.start).padStart(5)}  ${x.what}`]),
  ];
  lines.sort((a, b) => a[0] - b[0]);
  process.stdout.write(`\ntrace of one iteration (${s.node}): ms from the PATCH, duration, request\n${lines.map((l) => `  ${l[1]}`).join("\n")}\n`);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf("--iterations");
  const n = i > 0 ? Number(process.argv[i + 1]) : Number(process.env["FLEETD_BENCH_NETBOX_ITERATIONS"] ?? 20);
  const rows = await benchNetbox(Number.isFinite(n) && n > 0 && n <= 500 ? n : 20, process.argv.includes("--trace") || process.env["FLEETD_BENCH_NETBOX_TRACE"] === "1");
  for (const r of rows) process.stdout.write(`${r.name.padEnd(76)} ${String(r.value).padStart(8)} ${r.unit}${r.floor !== undefined ? `   (${r.floorName} ${r.floor} ${r.unit}, ratio ${r.ratio?.toFixed(2)})` : ""}\n`);
}
