/**
 * `pnpm -s openapi`: writes talos-config-server's API documents (openapi.yaml, openapi-internal.yaml) from the zod
 * schemas and the route table in openapi.ts. With `--check`, writes nothing and exits 1 when a file differs.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { INTERNAL_OPENAPI_FILE, internalOpenApiYaml, OPENAPI_FILE, publicOpenApiYaml } from "./openapi.js";

/** The repository root (this file runs from talos-config-server/dist/). */
const ROOT = new URL("../../", import.meta.url);

export const OPENAPI_DOCUMENTS: readonly { file: string; render: () => string }[] = [
  { file: OPENAPI_FILE, render: publicOpenApiYaml },
  { file: INTERNAL_OPENAPI_FILE, render: internalOpenApiYaml },
];

export const documentPath = (file: string): string => fileURLToPath(new URL(file, ROOT));

function main(check: boolean): number {
  let stale = 0;
  for (const { file, render } of OPENAPI_DOCUMENTS) {
    const text = render();
    const path = documentPath(file);
    let now: string | undefined;
    try {
      now = readFileSync(path, "utf8");
    } catch {
      now = undefined;
    }
    if (now === text) continue;
    stale++;
    if (check) console.error(`${file} differs from what the zod schemas generate: run pnpm -s openapi`);
    else {
      writeFileSync(path, text);
      console.log(`wrote ${file}`);
    }
  }
  return check && stale > 0 ? 1 : 0;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) process.exitCode = main(process.argv.includes("--check"));
