/**
 * The workspace's import rules (tests/src/tools/importCheck.ts) hold on this checkout, and the check finds each kind
 * of violation when one is planted in a copy of the shared packages.
 */
import { strict as assert } from "node:assert";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { checkImports } from "../tools/importCheck.js";

const importing = (spec: string) => `import { TPMT_PUBLIC } from "${spec}";\nexport const planted = TPMT_PUBLIC;\n`;
const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");

test("this checkout: no folder cycle, no deep import across packages, @fleetd/verify pure", () => {
  assert.deepEqual(checkImports(repo), []);
});

test("planted violations are each found: a folder cycle, a deep import, an I/O import and a native dependency in @fleetd/verify", (t) => {
  const root = mkdtempSync(join(tmpdir(), "fleetd-imports-"));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  writeFileSync(join(root, "pnpm-workspace.yaml"), "packages:\n  - shared/verify\n  - shared/platform\n  - shared/cli\n  - shared/testkit\n");
  for (const p of ["verify", "platform", "cli", "testkit"]) {
    cpSync(join(repo, "shared", p), join(root, "shared", p), { recursive: true, filter: (src) => !["node_modules", "dist"].includes(basename(src)) });
  }
  assert.deepEqual(checkImports(root), [], "the unplanted copy is clean");

  // codec is below tpm (tpm reads its structures with the codec); codec importing tpm closes a cycle.
  writeFileSync(join(root, "shared/verify/src/codec/planted.ts"), importing("../tpm/structures.js"));
  writeFileSync(join(root, "shared/platform/src/fleet/planted.ts"), importing("@fleetd/verify/tpm/structures"));
  writeFileSync(join(root, "shared/verify/src/text/plantedIo.ts"), 'import { readFileSync } from "node:fs";\nexport const read = (p: string) => readFileSync(p);\n');
  const pj = JSON.parse(readFileSync(join(root, "shared/verify/package.json"), "utf8")) as { dependencies: Record<string, string> };
  pj.dependencies["better-sqlite3"] = "12.9.0";
  writeFileSync(join(root, "shared/verify/package.json"), JSON.stringify(pj));

  const found = checkImports(root).map((v) => `${v.kind} ${v.where}: ${v.detail}`);
  const expect = [
    /^folder-cycle @fleetd\/verify: folders codec, tpm import each other: .*shared\/verify\/src\/codec\/planted\.ts imports \.\.\/tpm\/structures\.js/,
    /^deep-import shared\/platform\/src\/fleet\/planted\.ts: @fleetd\/verify\/tpm\/structures is not an entry point of @fleetd\/verify/,
    /^impure-verify shared\/verify\/src\/text\/plantedIo\.ts: imports node:fs/,
    /^impure-verify @fleetd\/verify: package.json depends on better-sqlite3$/,
  ];
  for (const re of expect) assert.ok(found.some((f) => re.test(f)), `expected ${re} among:\n${found.join("\n")}`);
  assert.equal(found.length, expect.length, found.join("\n"));
});
