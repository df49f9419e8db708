/** Loads a class profile by name (from the `policy/` package, or FLEETD_POLICY_DIR) or from a file. */
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { type Profile, ProfileError, parseProfile } from "@fleetd/verify/policy";

/** The `policy/` package directory of this checkout (shared/platform/dist/trust → ../../../../policy). */
export function defaultPolicyDir(): string {
  const env = process.env["FLEETD_POLICY_DIR"];
  if (env) return env;
  return resolve(fileURLToPath(import.meta.url), "../../../../../policy");
}

/** `name` (a profile in the policy directory) or a path to a .yaml/.yml/.json file. */
export function loadProfile(spec: string, policyDir = defaultPolicyDir()): Profile {
  let path: string | undefined;
  if (/^[a-z0-9][a-z0-9-]*$/.test(spec)) {
    path = [".yaml", ".yml", ".json"].map((ext) => join(policyDir, spec + ext)).find((p) => existsSync(p));
    if (!path && !existsSync(spec)) throw new ProfileError("not-found", `no profile "${spec}" in ${policyDir}`);
  }
  path ??= spec;
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new ProfileError("not-found", `cannot read profile ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  return parseProfile(text, path);
}
