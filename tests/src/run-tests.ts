/**
 * Runs every compiled test file of the workspace with node's test runner.
 *   node tests/dist/run-tests.js [--only SUBSTRING] [--exclude SUBSTRING]
 * Test files are `*.test.js` under each package's dist/. Slow real-platform suites are files named
 * `*.it.test.js`; they run in the same pass (they start their platforms on loopback themselves).
 */
import { spawnSync } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(fileURLToPath(import.meta.url), "../../..");
const packages = ["shared", "policy", "netbox-script", "tink-action", "spire-plugin", "talos-config-server", "tests"];

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

const files: string[] = [];
for (const pkg of packages) walk(join(root, pkg, "dist"), files);
const selected = files
  .filter((f) => (only ? f.includes(only) : true))
  .filter((f) => (exclude ? !f.includes(exclude) : true))
  .sort();
if (selected.length === 0) {
  console.error("no test files found (did the build run?)");
  process.exit(1);
}
console.log(`running ${selected.length} test files:\n  ${selected.map((f) => relative(root, f)).join("\n  ")}`);
const res = spawnSync(process.execPath, ["--test", "--test-reporter=spec", "--test-concurrency=2", ...selected], {
  stdio: "inherit",
  cwd: root,
});
process.exit(res.status ?? 1);
