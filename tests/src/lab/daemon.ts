/**
 * The running lab (`pnpm -s fleetd lab up`): this process owns the lab's world (./world.ts) until SIGTERM
 * (`fleetd lab down`). It switches every lab machine on (they netboot into intake; the good ones go on through
 * admission, provision and their installed OS), keeps `consoles/<node>.log` linked to each machine's current
 * console, and writes `state.json` — the endpoints — once the world is up. Its log is `daemon.log` (the CLI prints
 * its lines as progress). Everything lives in the lab directory (./labDir.ts).
 */
import { mkdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { startLabWorld, type LabWorld } from "./world.js";
import { labDir, LabState, STATE_FILE } from "./labDir.js";

const dir = labDir();
const consoles = join(dir, "consoles");
mkdirSync(consoles, { recursive: true });
const t0 = Date.now();
const log = (line: string) => process.stdout.write(`${new Date().toISOString()} ${line}\n`);
let world: LabWorld | undefined;
let stopping = false;

const stop = async (why: string) => {
  if (stopping) return;
  stopping = true;
  log(`stopping (${why})`);
  rmSync(join(dir, STATE_FILE), { force: true });
  await world?.stop().catch((e: unknown) => log(`stopping the world: ${(e as Error).message}`));
  log("stopped");
  process.exit(0);
};
process.on("SIGTERM", () => void stop("SIGTERM"));
process.on("SIGINT", () => void stop("SIGINT"));

/** consoles/<node>.log → the console file of the machine's current (or last) boot. */
function linkConsoles(w: LabWorld): void {
  for (const m of Object.values(w.machines)) {
    const current = (m.bmc?.follower.current()?.machine ?? m.bmc?.follower.boots().at(-1)?.machine ?? m.boots.at(-1))?.consoleFile;
    if (!current) continue;
    const link = join(consoles, `${m.node}.log`);
    const tmp = `${link}.tmp`;
    rmSync(tmp, { force: true });
    symlinkSync(current, tmp);
    renameSync(tmp, link);
  }
}

try {
  log(`starting the lab in ${dir}`);
  // `fleetd lab up --nodes N`: N machines that go all the way (worker-1 … worker-N), each behind its BMC
  const n = Number(process.env["FLEETD_LAB_NODES"] ?? "1");
  if (!Number.isInteger(n) || n < 1 || n > 8) throw new Error(`FLEETD_LAB_NODES=${process.env["FLEETD_LAB_NODES"] ?? ""}: 1 to 8 machines`);
  world = await startLabWorld({ progress: log, machines: Object.fromEntries(Array.from({ length: n }, (_, i) => [`worker-${i + 1}`, "good" as const])) });
  const w = world;
  for (const node of Object.keys(w.machines)) {
    await w.powerOn(node);
    log(`${node} switched on`);
  }
  linkConsoles(w);
  setInterval(() => {
    try {
      linkConsoles(w);
    } catch (e) {
      log(`linking consoles: ${(e as Error).message}`);
    }
  }, 1000).unref();
  const state: LabState = { pid: process.pid, readyInSeconds: Math.round((Date.now() - t0) / 1000), startedAt: new Date(t0).toISOString(), dir, consoles, endpoints: LabState.shape.endpoints.parse(w.endpoints()) };
  writeFileSync(join(dir, `${STATE_FILE}.tmp`), JSON.stringify(state, null, 2));
  renameSync(join(dir, `${STATE_FILE}.tmp`), join(dir, STATE_FILE));
  log(`ready in ${state.readyInSeconds} s`);
} catch (e) {
  log(`the lab did not start: ${(e as Error).stack ?? String(e)}`);
  await stop("start failed");
}
