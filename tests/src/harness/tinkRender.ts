/**
 * Render a Tinkerbell Template's spec.data as tink-controller v0.25.0 does (tests/go/tinkrender: Go
 * text/template, missingkey=error, Sprig's hermetic functions, 256 KiB cap). The one place tests call it.
 */
import { spawnSync } from "node:child_process";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repoRoot = resolve(fileURLToPath(import.meta.url), "../../../..");

export type Rendered = { ok: true; text: string } | { ok: false; error: string };

export function renderTemplate(template: string, data: unknown): Rendered {
  const r = spawnSync("go", ["run", "."], { cwd: join(repoRoot, "tests/go/tinkrender"), input: JSON.stringify({ template, data }), encoding: "utf8", timeout: 300_000 });
  if (r.error) throw r.error;
  return r.status === 0 ? { ok: true, text: r.stdout } : { ok: false, error: r.stderr };
}
