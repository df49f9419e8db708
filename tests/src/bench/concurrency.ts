/**
 * Concurrency and power-on storm of the attestation server (issue 12), against real NetBox run as production runs
 * it (gunicorn, FLEETD_BENCH_NETBOX_WORKERS workers, NetBox's contrib/gunicorn.py) and, beside it, the same server
 * with the NetBox adapter replaced by the in-memory one (the ceiling: what NetBox costs). The server
 * (benchServer.ts) runs in a child process: its RSS and CPU are its own; the CA key is on SoftHSM2 (PKCS#11) in
 * both. The machines are the software TPM model (softMachines.ts), every key made before the clock starts, so the
 * machine side is a few milliseconds of node:crypto per attestation, not a TPM.
 *
 *  - concurrent: FLEETD_BENCH_CONCURRENT_MACHINES (32) machines attest at once, each FLEETD_BENCH_CONCURRENT_ROUNDS
 *    (3) times in a row after a warm-up round: sustained attestations/s, p50/p95 of the server time per
 *    attestation (the three HTTP calls as the machine sees them, queueing included), NetBox requests per
 *    attestation (gunicorn's access log, counted once it has settled), server CPU per attestation.
 *  - storm: FLEETD_BENCH_STORM_MACHINES (1000, in-memory adapter) and FLEETD_BENCH_STORM_NETBOX_MACHINES (50,
 *    real NetBox: what fits in a few minutes on a 2-core machine) machines challenge within
 *    FLEETD_BENCH_STORM_SPREAD_MS (3000) and complete evidence and confirm; a 503 is retried as the real client
 *    does. Afterwards: every machine attested or refused with a stated reason, exactly one LDevID and one LAK per
 *    device in the store's issued list, the same number of journal entries on every device (NetBox's journal, or
 *    the memory journal), the server's peak RSS (VmHWM of its process) against 256 MB.
 *  The server process runs with the NODE_OPTIONS of talos-config-server's image (V8's heap bounds; its Containerfile
 *  says why); FLEETD_BENCH_SERVER_NODE_ARGS adds node options for experiments.
 *  FLEETD_BENCH_NETBOX=0 leaves NetBox out (the in-memory rows only); FLEETD_BENCH_SERVER_CPU_PROF=DIR has each server
 *  process write a V8 CPU profile into DIR when it ends.
 *   node tests/dist/bench/concurrency.js
 */
import { netboxRequestLines, settled } from "./attestation.js";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { parse as parseYaml, stringify } from "yaml";
import { bootScenario, makeLabKeys, writeSiteAuthorities } from "@fleetd/testkit/bootScenarios";
import { softwareManufacturer } from "@fleetd/testkit/softwareTpm";
import { EXAMPLE_NODES, fleetd, startFleet, type Fleet } from "../netbox/fixture.js";
import { sleep } from "../harness/ports.js";
import { TALOS_VERSION } from "../talos/goTools.js";
import type { BenchRow } from "./measure.js";
import { benchNetboxWorkers } from "./attestation.js";
import type { BenchServerConfig, BenchServerStats, DeviceAudit } from "./benchServer.js";
import { attestSoft, httpTransport, makeMachines, memoryNode, nodesFileNode, pct, type AttestationRun, type SoftMachine } from "./softMachines.js";

const env = (name: string, dflt: number): number => {
  const v = Number(process.env[name] ?? dflt);
  if (!Number.isInteger(v) || v < 0) throw new Error(`${name}=${process.env[name]}: a whole number ≥ 0`);
  return v;
};

interface Child {
  url: string;
  proc: ChildProcess;
  stats(): Promise<BenchServerStats>;
  drain(): Promise<void>;
  audit(deviceIds: number[]): Promise<Record<number, DeviceAudit>>;
  /** Peak and current RSS of the server process (VmHWM, VmRSS), bytes. */
  rss(): { peak: number; now: number };
  /** Its RSS once it was ready, before any request (bytes). */
  rssReady: number;
  stop(): Promise<void>;
}

const CONTAINERFILE = fileURLToPath(new URL("../../../talos-config-server/Containerfile", import.meta.url));
/**
 * The NODE_OPTIONS talos-config-server's image sets (its Containerfile's `ENV NODE_OPTIONS="…"`): the bench's server
 * runs with V8's heap bounds as deployed.
 */
export function imageNodeOptions(): string {
  const m = /^ENV NODE_OPTIONS="([^"]*)"$/m.exec(readFileSync(CONTAINERFILE, "utf8"));
  if (!m) throw new Error(`${CONTAINERFILE}: no ENV NODE_OPTIONS="…" line (the bench runs the server as the image does)`);
  return m[1] as string;
}

async function startChild(dir: string, cfg: Omit<BenchServerConfig, "dir">): Promise<Child> {
  mkdirSync(dir, { recursive: true, mode: 0o700 }); // the state file's directory holds secrets: owner only
  const file = join(dir, "config.json");
  writeFileSync(file, JSON.stringify({ ...cfg, dir }));
  // FLEETD_BENCH_SERVER_CPU_PROF=DIR: the server writes a V8 CPU profile there when it ends (node --cpu-prof)
  const prof = process.env["FLEETD_BENCH_SERVER_CPU_PROF"];
  // FLEETD_BENCH_SERVER_NODE_ARGS: extra node options for the server process (space-separated), for experiments
  const extra = (process.env["FLEETD_BENCH_SERVER_NODE_ARGS"] ?? "").split(/\s+/).filter(Boolean);
  const proc = spawn(process.execPath, [...extra, ...(prof ? ["--cpu-prof", `--cpu-prof-dir=${prof}`] : []), fileURLToPath(new URL("./benchServer.js", import.meta.url)), file], { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, NODE_OPTIONS: imageNodeOptions() } });
  const ready = await new Promise<{ url: string }>((resolve, reject) => {
    const rl = createInterface({ input: proc.stdout as NodeJS.ReadableStream });
    rl.on("line", (l) => {
      if (l.startsWith("READY ")) resolve(JSON.parse(l.slice(6)) as { url: string });
    });
    proc.once("exit", (code) => reject(new Error(`the bench server exited (${code}) before it was ready`)));
  });
  const get = async <T>(path: string, body?: unknown): Promise<T> => {
    const r = await fetch(ready.url + path, body === undefined ? {} : { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    if (r.status !== 200) throw new Error(`${path}: ${r.status} ${await r.text()}`);
    return (await r.json()) as T;
  };
  const status = (field: string): number => {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync(`/proc/${proc.pid}/status`, "utf8"));
    return m ? Number(m[1]) * 1024 : NaN;
  };
  return {
    url: ready.url,
    proc,
    rssReady: status("VmRSS"),
    stats: () => get<BenchServerStats>("/bench/stats"),
    drain: async () => void (await get("/bench/drain", {})),
    audit: (deviceIds) => get<Record<number, DeviceAudit>>("/bench/audit", { deviceIds }),
    rss: () => ({ peak: status("VmHWM"), now: status("VmRSS") }),
    async stop() {
      if (proc.exitCode !== null) return;
      const gone = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGTERM");
      await Promise.race([gone, sleep(10_000).then(() => proc.kill("SIGKILL"))]);
    },
  };
}


/** Device IDs by name (every device, paged). */
async function deviceIds(f: Fleet): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (let url: string | null = `${f.nb.url}/api/dcim/devices/?limit=1000&brief=1`; url; ) {
    const r = await fetch(url, { headers: { authorization: f.nb.authorization, accept: "application/json" } });
    const page = (await r.json()) as { next: string | null; results: { id: number; name: string }[] };
    for (const d of page.results) out.set(d.name, d.id);
    url = page.next;
  }
  return out;
}

/** Journal entries per device ID (every entry on a device, paged). */
async function journalCounts(f: Fleet): Promise<Map<number, number>> {
  const out = new Map<number, number>();
  for (let url: string | null = `${f.nb.url}/api/extras/journal-entries/?assigned_object_type=dcim.device&limit=1000`; url; ) {
    const r = await fetch(url, { headers: { authorization: f.nb.authorization, accept: "application/json" } });
    const page = (await r.json()) as { next: string | null; results: { assigned_object_id: number }[] };
    for (const e of page.results) out.set(e.assigned_object_id, (out.get(e.assigned_object_id) ?? 0) + 1);
    url = page.next;
  }
  return out;
}

const r1 = (x: number) => Math.round(x * 10) / 10;
/** The bench server's session lifetime (testAttestationService: the tests' 5 min). */
const SESSION_TTL_MS = 5 * 60_000;

/** "N× why" for the retries of `runs`, most frequent first. */
function retried(runs: AttestationRun[]): string {
  const m = new Map<string, number>();
  for (const r of runs) for (const why of r.retryReasons) m.set(why, (m.get(why) ?? 0) + 1);
  return m.size ? ` (${[...m].sort((a, b) => b[1] - a[1]).map(([w, c]) => `${c}× ${w}`).join("; ")})` : "";
}

interface Side {
  label: string;
  start(dir: string): Promise<Child>;
  /** machine name → the device ID its server knows it by */
  ids: Map<string, number>;
  netboxLog?: string;
  journal?: () => Promise<Map<number, number>>;
}

/** 32 machines at once, `rounds` attestations each after a warm-up round. */
async function concurrent(side: Side, dir: string, machines: SoftMachine[], rounds: number): Promise<BenchRow[]> {
  const child = await side.start(dir);
  try {
    const t = httpTransport(child.url);
    const run = async (round: number): Promise<AttestationRun[]> =>
      Promise.all(machines.map((m) => attestSoft(m, m.sessions[round] as never, t, Date.now() + 300_000)));
    const warm = await run(0);
    const refusedWarm = warm.filter((r) => r.outcome !== "attested");
    if (refusedWarm.length) throw new Error(`warm-up: ${refusedWarm.length} refused, e.g. ${refusedWarm[0]?.reason}`);
    const before = side.netboxLog ? await settled(side.netboxLog, 1500) : 0;
    const cpu0 = (await child.stats()).cpu;
    const sign0 = (await child.stats()).sign;
    const t0 = performance.now();
    const runs: AttestationRun[] = [];
    await Promise.all(
      machines.map(async (m) => {
        for (let r = 1; r <= rounds; r++) runs.push(await attestSoft(m, m.sessions[r] as never, t, Date.now() + 300_000));
      }),
    );
    const wall = (performance.now() - t0) / 1000;
    const s1 = await child.stats();
    await child.drain();
    const requests = side.netboxLog ? (await settled(side.netboxLog, 1500)) - before : NaN;
    if (side.netboxLog) {
      // which requests, per attestation (the same access log lines the count is made of)
      const which = new Map<string, number>();
      for (const l of netboxRequestLines(side.netboxLog).slice(before)) {
        const k = l.slice(1).replace(/\/\d+\//g, "/{id}/");
        which.set(k, (which.get(k) ?? 0) + 1);
      }
      console.log(`# ${side.label}, ${machines.length} concurrent × ${rounds}: NetBox requests per attestation: ${[...which].sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${Math.round((100 * v) / (machines.length * rounds)) / 100}`).join(", ")}`);
    }
    const ok = runs.filter((r) => r.outcome === "attested");
    const refused = runs.filter((r) => r.outcome !== "attested");
    const ms = ok.map((r) => r.serverMs);
    const cpuMs = (s1.cpu.userMs + s1.cpu.systemMs - cpu0.userMs - cpu0.systemMs) / runs.length;
    const signInside = s1.sign.insideMs - sign0.insideMs;
    const n = machines.length;
    console.log(
      `# ${side.label}, ${n} concurrent × ${rounds}: ${ok.length} attested, ${refused.length} refused${refused.length ? ` (${refused[0]?.reason})` : ""}, ${runs.reduce((a, r) => a + r.retries, 0)} requests retried${retried(runs)}; ` +
        `server CPU ${r1(cpuMs)} ms/attestation; signing queue: ${s1.sign.count - sign0.count} signatures, at most ${s1.sign.maxInside} inside the token at once, the queue held ${r1((100 * signInside) / (wall * 1000))}% of the wall time (${r1(signInside / (s1.sign.count - sign0.count || 1))} ms a signature: the token call and the wait for the event loop to take its answer); server RSS ${r1(child.rssReady / 2 ** 20)} MiB when ready, peak ${r1(child.rss().peak / 2 ** 20)} MiB`,
    );
    const rows: BenchRow[] = [
      { name: `${side.label}: ${n} concurrent, sustained`, value: ok.length / wall, unit: "attestations/s", floor: 5, floorName: "issue 12's target ≥ 5/s", ratio: ok.length / wall / 5 },
      { name: `${side.label}: ${n} concurrent, server time per attestation p50`, value: r1(pct(ms, 50)), unit: "ms", floor: 300, floorName: "issue 12's target ≤ 300 ms", ratio: pct(ms, 50) / 300 },
      { name: `${side.label}: ${n} concurrent, server time per attestation p95`, value: r1(pct(ms, 95)), unit: "ms" },
      { name: `${side.label}: ${n} concurrent, server CPU per attestation`, value: r1(cpuMs), unit: "ms" },
    ];
    if (side.netboxLog) rows.push({ name: `${side.label}: ${n} concurrent, NetBox requests per attestation (access log)`, value: requests / runs.length, unit: "requests", floor: 4, floorName: "issue 12's target ≤ 4", ratio: requests / runs.length / 4 });
    return rows;
  } finally {
    await child.stop();
  }
}

/** `machines` power on within `spreadMs` and attest once each; then the audit. */
async function storm(side: Side, dir: string, machines: SoftMachine[], spreadMs: number): Promise<BenchRow[]> {
  const child = await side.start(dir);
  try {
    const t = httpTransport(child.url);
    const journalBefore = side.journal ? await side.journal() : new Map<number, number>();
    // the server's memory, sampled while the storm lasts (the largest V8 heap and external memory seen)
    const mem = { heapTotal: 0, heapUsed: 0, external: 0 };
    let storming = true;
    const sampler = (async () => {
      while (storming) {
        const h = (await child.stats()).heap;
        mem.heapTotal = Math.max(mem.heapTotal, h.total);
        mem.heapUsed = Math.max(mem.heapUsed, h.used);
        mem.external = Math.max(mem.external, h.external);
        await sleep(250);
      }
    })();
    const t0 = performance.now();
    const runs = await Promise.all(
      machines.map(async (m, i) => {
        await sleep((spreadMs * i) / machines.length);
        // the real client's budget for 503s (tink-action: its timeout); the storm must not need it
        return attestSoft(m, m.sessions[0] as never, t, Date.now() + 600_000);
      }),
    );
    const total = (performance.now() - t0) / 1000;
    storming = false;
    await sampler;
    await child.drain();
    const rss = child.rss();
    const ids = machines.map((m) => side.ids.get(m.name) as number);
    const audit = await child.audit(ids);
    const journalAfter = side.journal ? await side.journal() : undefined;
    const attested = runs.filter((r) => r.outcome === "attested").length;
    const reasons = new Map<string, number>();
    for (const r of runs) if (r.outcome !== "attested") reasons.set(r.reason ?? "?", (reasons.get(r.reason ?? "?") ?? 0) + 1);
    // refused for load: a 503 past the client's budget, a 429, or a session that expired while the machine waited
    // for answers (the bench server's session TTL is the tests' 5 min: "already used or has expired")
    const expired = (r: AttestationRun) => r.totalMs > SESSION_TTL_MS && /(nonce\.reused|confirm\.replayed|session\.)/.test(r.reason ?? "");
    const byLoad = runs.filter((r) => r.outcome !== "attested" && (/ (503|429) /.test(r.reason ?? "") || expired(r))).length;
    // certificates: exactly one LDevID and one LAK per attested device; a refused one after accepted evidence holds
    // what the evidence step issued (counted apart)
    const certsWrong = machines.filter((m, i) => {
      const a = audit[ids[i] as number];
      return runs[i]?.outcome === "attested" && (!a || a.ldevid !== 1 || a.lak !== 1);
    }).length;
    const refusedHolding = machines.filter((m, i) => {
      const a = audit[ids[i] as number];
      return runs[i]?.outcome !== "attested" && a && (a.ldevid > 0 || a.lak > 0);
    }).length;
    // journal: the same number of new entries on every attested device
    const journal = ids.map((id, i) => (runs[i]?.outcome !== "attested" ? -1 : journalAfter ? (journalAfter.get(id) ?? 0) - (journalBefore.get(id) ?? 0) : (audit[id]?.journal ?? 0))).filter((c) => c >= 0);
    const hist = new Map<number, number>();
    for (const c of journal) hist.set(c, (hist.get(c) ?? 0) + 1);
    const retries = runs.reduce((a, r) => a + r.retries, 0);
    const per = runs.map((r) => r.totalMs);
    console.log(
      `# storm, ${side.label}: ${machines.length} machines challenged within ${spreadMs} ms; ${attested} attested, ${machines.length - attested} refused` +
        `${reasons.size ? ` (${[...reasons].map(([w, c]) => `${c}× ${w}`).join("; ")})` : ""}, ${byLoad} refused for load, ${retries} requests retried${retried(runs)}; ` +
        `certificates: ${certsWrong} attested devices without exactly one LDevID and one LAK, ${refusedHolding} refused devices holding the evidence step's certificates; journal entries per attested device: ${[...hist].map(([c, k]) => `${c} on ${k}`).join(", ")}; ` +
        `server RSS (NODE_OPTIONS="${imageNodeOptions()}" as its image sets) ${r1(child.rssReady / 2 ** 20)} MiB when ready, peak ${r1(rss.peak / 2 ** 20)} MiB, ${r1(rss.now / 2 ** 20)} MiB after (largest seen during the storm: V8 heap ${r1(mem.heapTotal / 2 ** 20)} MiB of which used ${r1(mem.heapUsed / 2 ** 20)} MiB, external ${r1(mem.external / 2 ** 20)} MiB)`,
    );
    const label = `storm, ${side.label}, ${machines.length} machines`;
    return [
      { name: `${label}: total time`, value: r1(total), unit: "s" },
      { name: `${label}: per machine p50`, value: r1(pct(per, 50)), unit: "ms" },
      { name: `${label}: per machine p95`, value: r1(pct(per, 95)), unit: "ms" },
      { name: `${label}: per machine p99`, value: r1(pct(per, 99)), unit: "ms" },
      { name: `${label}: attested`, value: attested, unit: `of ${machines.length}` },
      { name: `${label}: refused for load (503 past the budget, 429, session expired waiting)`, value: byLoad, unit: "machines" },
      { name: `${label}: attested devices without exactly one LDevID + one LAK`, value: certsWrong, unit: "devices" },
      { name: `${label}: devices whose journal count differs from the rest`, value: journal.length - Math.max(0, ...hist.values()), unit: "devices" },
      { name: `${label}: server RSS peak (VmHWM)`, value: r1(rss.peak / 2 ** 20), unit: "MiB", floor: 256, floorName: "issue 12's limit 256 MB", ratio: rss.peak / 2 ** 20 / 256 },
    ];
  } finally {
    await child.stop();
  }
}

export async function benchConcurrency(): Promise<BenchRow[]> {
  const n = env("FLEETD_BENCH_CONCURRENT_MACHINES", 32);
  const rounds = Math.max(1, env("FLEETD_BENCH_CONCURRENT_ROUNDS", 3));
  const stormMem = env("FLEETD_BENCH_STORM_MACHINES", 1000);
  const withNetbox = process.env["FLEETD_BENCH_NETBOX"] !== "0";
  const stormNb = withNetbox ? env("FLEETD_BENCH_STORM_NETBOX_MACHINES", 50) : 0;
  const workers = benchNetboxWorkers();
  const spread = env("FLEETD_BENCH_STORM_SPREAD_MS", 3000);
  const dir = mkdtempSync(join(tmpdir(), "fleetd-bench-storm-"));
  let fleet: Fleet | undefined;
  try {
    const keys = await makeLabKeys();
    const siteAuthoritiesDir = writeSiteAuthorities(join(dir, "site"), keys);
    const maker = softwareManufacturer("fleetd bench EK CA");
    const tk = performance.now();
    const machines = await makeMachines(Math.max(n, stormMem, stormNb), rounds + 1, maker, bootScenario("hookos", keys));
    console.log(`# ${machines.length} software TPMs (RSA-2048 + P-256 EKs, ${rounds + 1} P-256 AK/LDevID/LAK sets each) made in ${r1((performance.now() - tk) / 1000)} s, before any clock`);
    const base = { talosVersion: TALOS_VERSION, ekCaDer: Buffer.from(maker.der).toString("hex"), siteAuthoritiesDir };

    // real NetBox under gunicorn, with the bench's nodes applied by fleetd as an operator does
    const onNetbox = withNetbox ? Math.max(n, stormNb) : 0;
    const sides: Side[] = [];
    if (onNetbox > 0) {
      const f = await startFleet({ server: "gunicorn", workers });
      fleet = f;
      const nodes = parseYaml(readFileSync(EXAMPLE_NODES, "utf8")) as { nodes: Record<string, Record<string, unknown>> };
      const w1 = nodes.nodes["worker-1"] as Record<string, unknown>;
      nodes.nodes = Object.fromEntries(machines.slice(0, onNetbox).map((m) => [m.name, nodesFileNode(m, w1)]));
      const nodesFile = join(dir, "nodes.yaml");
      writeFileSync(nodesFile, stringify(nodes));
      const ta = performance.now();
      for (const args of [["netbox", "setup", "--config", f.configFile(f.nb.authorization.replace(/^Bearer /, ""))], ["inventory", "apply", nodesFile, "--config", f.configFile(f.apply.token)]]) {
        const r = fleetd(args, {}, 120_000 + 2_000 * onNetbox);
        if (r.code !== 0) throw new Error(`fleetd ${args.join(" ")}: ${r.stderr}`);
      }
      console.log(`# NetBox ${f.nb.version} under gunicorn (${workers} workers, contrib/gunicorn.py); ${onNetbox} nodes applied in ${r1((performance.now() - ta) / 1000)} s`);
      await sleep(3000); // NetBox's worker drains the apply's search-index jobs
      const ids = await deviceIds(f);
      sides.push({
        label: `NetBox (gunicorn ×${workers})`,
        ids,
        netboxLog: join(f.nb.runDir, "netbox.log"),
        journal: () => journalCounts(f),
        start: (d) => startChild(d, { ...base, mode: "netbox", netbox: { url: f.nb.url, token: f.handler.token, applyAccount: f.apply.username, attestationAccount: f.handler.username } }),
      });
    }
    const memIds = new Map(machines.map((m, i) => [m.name, i + 1] as const));
    sides.push({
      label: "in-memory inventory",
      ids: memIds,
      start: (d) => startChild(d, { ...base, mode: "memory", nodes: machines.map((m, i) => memoryNode(m, i + 1)) }),
    });

    const rows: BenchRow[] = [];
    if (n > 0) for (const [i, s] of sides.entries()) rows.push(...(await concurrent(s, join(dir, `concurrent-${i}`), machines.slice(0, n), rounds)));
    for (const [i, s] of sides.entries()) {
      const count = s.netboxLog ? stormNb : stormMem;
      if (count > 0) rows.push(...(await storm(s, join(dir, `storm-${i}`), machines.slice(0, count), spread)));
    }
    return rows;
  } finally {
    await fleet?.nb.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { printRows } = await import("./measure.js");
  printRows("Attestation server under concurrency and a power-on storm (software TPM machines; SoftHSM2)", await benchConcurrency());
}
