/**
 * Runs every compiled test file of the workspace with node's test runner.
 *   node tests/dist/run-tests.js [--only SUBSTRING] [--exclude SUBSTRING]
 * Test files are `*.test.js` under each package's dist/. Slow real-platform suites are files named
 * `*.it.test.js`; they run in the same pass (they start their platforms on loopback themselves).
 *
 * A hang must fail with a name, never run into CI's limit: each test has a timeout (FLEETD_TEST_TIMEOUT_MIN,
 * default 20), every 5 minutes the files still running are printed with their age, a file running longer than
 * FLEETD_FILE_BUDGET_MIN (default 25) is stopped (the runner reports it failed), and past FLEETD_SUITE_BUDGET_MIN
 * (default 75) the whole run stops and fails.
 */
import { spawn } from "node:child_process";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { startNetBoxZygote, type NetBoxZygote } from "./harness/netbox.js";
import { ZYGOTE_ENV } from "./harness/netboxZygote.js";

const root = resolve(fileURLToPath(import.meta.url), "../../..");
const packages = ["shared/verify", "shared/platform", "shared/cli", "shared/testkit", "policy", "netbox-script", "tink-action", "spire-plugin", "talos-config-server", "tests"];

function walk(dir: string, out: string[]): void {
  let entries: string[];
  try {
    entries = readdirSync(dir);
  } catch {
    return;
  }
  for (const e of entries) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) walk(p, out);
    else if (e.endsWith(".test.js")) out.push(p);
  }
}

const args = process.argv.slice(2);
const only = args.includes("--only") ? args[args.indexOf("--only") + 1] : undefined;
const exclude = args.includes("--exclude") ? args[args.indexOf("--exclude") + 1] : undefined;
const minutes = (name: string, dflt: number) => {
  const v = Number(process.env[name] ?? dflt);
  return (Number.isFinite(v) && v > 0 ? v : dflt) * 60_000;
};
const testTimeoutMs = minutes("FLEETD_TEST_TIMEOUT_MIN", 20);
const fileBudgetMs = minutes("FLEETD_FILE_BUDGET_MIN", 25);
/**
 * Files allowed longer than FLEETD_FILE_BUDGET_MIN (minutes; scaled by the same factor when that is set): the lab's
 * machines' story boots five QEMU/TCG machines one after another on two cores beside the rest of the suite.
 */
const LONGER_FILES: Record<string, number> = { "tests/dist/lab/lab.it.": 40 };
const budgetOf = (file: string) => {
  const k = Object.keys(LONGER_FILES).find((x) => file.includes(x));
  return k ? ((LONGER_FILES[k] as number) / 25) * fileBudgetMs : fileBudgetMs;
};
const suiteBudgetMs = minutes("FLEETD_SUITE_BUDGET_MIN", 75);
/** Test files run at a time (FLEETD_TEST_CONCURRENCY, default 2: one per core here). */
const concurrency = (() => {
  const v = Number(process.env.FLEETD_TEST_CONCURRENCY ?? 2);
  return Number.isInteger(v) && v >= 1 && v <= 8 ? v : 2;
})();

/**
 * runFiles.js starts files in the order given, two at a time: a long file started last leaves one core idle
 * while it finishes alone. So the files measured slowest (the runner's "slowest files" report of a full run,
 * in this order) start first; the rest follow alphabetically. An entry is a substring of the compiled path;
 * one that matches nothing only costs nothing.
 */
const SLOW_FIRST = [
  "tests/dist/lab/lab.it.",
  "tests/dist/attestation/outage.it.",
  "tests/dist/tinkerbell/realAgent.it.",
  "tests/dist/tinkerbell/handlerRestart.it.",
  "tests/dist/netbox/handler.it.",
  "tests/dist/netbox/inventory.it.",
  "tests/dist/attestation/renew.it.",
  "tests/dist/attestation/refusals.it.",
  "tests/dist/attestation/restart.it.",
  "tests/dist/ha/replicas.it.",
  "tests/dist/attestation/provision.it.",
  "tests/dist/images/images.it.",
  "tests/dist/retire/retire.it.",
  "tests/dist/attestation/tpm12.it.",
  "tests/dist/spire/quarantine.it.",
  "tests/dist/spire/renewAgent.it.",
  "tests/dist/spire/spire.it.",
  "tests/dist/attestation/identity.it.",
  "tests/dist/attestation/action.it.",
  "tests/dist/attestation/banks.it.",
  "tests/dist/attestation/bootstrapTokens.it.",
  "tests/dist/spire/sync.it.",
  "tests/dist/tinkerbell/workflow.it.",
];
function slowRank(f: string): number {
  const i = SLOW_FIRST.findIndex((s) => f.includes(s));
  return i < 0 ? SLOW_FIRST.length : i;
}
function bySlowFirst(a: string, b: string): number {
  return slowRank(a) - slowRank(b) || (a < b ? -1 : a > b ? 1 : 0);
}

const files: string[] = [];
for (const pkg of packages) walk(join(root, pkg, "dist"), files);
const selected = files
  .filter((f) => (only ? f.includes(only) : true))
  .filter((f) => (exclude ? !f.includes(exclude) : true))
  .sort(bySlowFirst);
if (selected.length === 0) {
  console.error("no test files found (did the build run?)");
  process.exit(1);
}
console.log(`running ${selected.length} test files:\n  ${selected.map((f) => relative(root, f)).join("\n  ")}`);
// One NetBox import for the whole run (tests/scripts/netbox/zygote.py): each test file's NetBox web server and worker
// are forked from it. FLEETD_NETBOX_ZYGOTE=off spawns them instead.
let zygote: NetBoxZygote | undefined;
if (process.env[ZYGOTE_ENV] !== "off" && selected.some((f) => f.includes(".it.test."))) {
  try {
    zygote = await startNetBoxZygote();
    process.env[ZYGOTE_ENV] = zygote.socketPath;
    console.log(`[run-tests] NetBox zygote ready in ${(zygote.readyMs / 1000).toFixed(1)} s (${zygote.socketPath})`);
  } catch (e) {
    console.error(`[run-tests] no NetBox zygote (each NetBox is spawned): ${(e as Error).message.split("\n")[0]}`);
  }
} else if (process.env[ZYGOTE_ENV] === "off") {
  delete process.env[ZYGOTE_ENV];
}
const started = Date.now();
const runner = spawn(process.execPath, [join(root, "tests/dist/runFiles.js"), String(testTimeoutMs), String(concurrency), ...selected], {
  stdio: "inherit",
  cwd: root,
});

/** The test files node's runner is executing now: its child processes whose command line names a test file. */
function runningFiles(): { pid: number; file: string }[] {
  const out: { pid: number; file: string }[] = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid !== runner.pid) continue;
      const file = readFileSync(`/proc/${d}/cmdline`, "utf8").split("\0").find((a) => a.endsWith(".test.js"));
      if (file) out.push({ pid: Number(d), file });
    } catch {
      /* gone meanwhile */
    }
  }
  return out;
}

const firstSeen = new Map<number, number>();
/** Per test file: when it was first and last seen running (sampled every 15 s: durations are ±15 s). */
const spans = new Map<string, { from: number; to: number }>();
const stopped = new Set<number>();
const mins = (ms: number) => `${(ms / 60_000).toFixed(1)} min`;
const watchdog = setInterval(() => {
  const now = Date.now();
  const running = runningFiles();
  for (const r of running) if (!firstSeen.has(r.pid)) firstSeen.set(r.pid, now);
  for (const r of running) {
    const f = relative(root, r.file);
    spans.set(f, { from: spans.get(f)?.from ?? now, to: now });
  }
  for (const r of running) {
    const age = now - (firstSeen.get(r.pid) ?? now);
    const budget = budgetOf(r.file);
    if (age > budget && !stopped.has(r.pid)) {
      stopped.add(r.pid);
      console.error(`[run-tests] ${relative(root, r.file)} has run ${mins(age)} (budget ${mins(budget)}): stopping it; it fails`);
      try {
        process.kill(r.pid, "SIGTERM");
      } catch {
        /* gone */
      }
    }
  }
  if (now - started > suiteBudgetMs) {
    console.error(`[run-tests] the suite has run ${mins(now - started)} (budget ${mins(suiteBudgetMs)}); still running: ${running.map((r) => relative(root, r.file)).join(", ") || "(no test file: the runner itself)"}; stopping`);
    runner.kill("SIGKILL");
    for (const r of running) {
      try {
        process.kill(r.pid, "SIGKILL");
      } catch {
        /* gone */
      }
    }
    process.exit(1);
  }
}, 15_000);
const heartbeat = setInterval(() => {
  const now = Date.now();
  const list = runningFiles().map((r) => `${relative(root, r.file)} (${mins(now - (firstSeen.get(r.pid) ?? now))})`);
  console.error(`[run-tests] ${mins(now - started)}: running ${list.join(", ") || "(none)"}`);
}, 5 * 60_000);
runner.on("exit", (code, signal) => {
  clearInterval(watchdog);
  clearInterval(heartbeat);
  const slowest = [...spans].map(([f, s]) => ({ f, ms: s.to - s.from })).sort((a, b) => b.ms - a.ms).slice(0, 15);
  console.error(`[run-tests] the slowest files (sampled every 15 s):\n${slowest.map((x) => `  ${mins(x.ms).padStart(9)}  ${x.f}`).join("\n")}`);
  console.error(`[run-tests] done in ${mins(Date.now() - started)}`);
  void (zygote?.stop() ?? Promise.resolve()).finally(() => process.exit(code ?? (signal ? 1 : 0)));
});
