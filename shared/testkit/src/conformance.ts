/**
 * Locates the shared conformance data (`../shared/conformance/` beside the repository). Tests read it in
 * place; it is never copied into the repository. FLEETD_CONFORMANCE overrides the location.
 */
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repoRoot = resolve(fileURLToPath(import.meta.url), "../../../..");

export function conformanceRoot(): string {
  const env = process.env["FLEETD_CONFORMANCE"];
  const candidates = [env, join(repoRoot, "../shared/conformance"), "/work/shared/conformance"].filter(
    (p): p is string => typeof p === "string" && p.length > 0,
  );
  for (const c of candidates) if (existsSync(join(c, "SOURCES.md"))) return c;
  throw new Error(`conformance data not found (tried ${candidates.join(", ")}); set FLEETD_CONFORMANCE`);
}

export function conformance(rel: string): string {
  return join(conformanceRoot(), rel);
}
