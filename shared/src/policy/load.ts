/**
 * Load a class profile by name (from the `policy/` package, or FLEETD_POLICY_DIR) or from a file.
 * YAML and JSON are both read with the `yaml` package (JSON is YAML); duplicate keys are errors.
 */
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parse as parseYaml } from "yaml";
import type { z } from "zod";
import { type Profile, ProfileSchema } from "./schema.js";

export class ProfileError extends Error {
  override readonly name = "ProfileError";
  constructor(
    readonly code: "not-found" | "syntax" | "invalid",
    message: string,
  ) {
    super(message);
  }
}

/** The `policy/` package directory of this checkout (shared/dist/policy → ../../../policy). */
export function defaultPolicyDir(): string {
  const env = process.env["FLEETD_POLICY_DIR"];
  if (env) return env;
  return resolve(fileURLToPath(import.meta.url), "../../../../policy");
}

function formatIssues(issues: z.core.$ZodIssue[]): string {
  return issues.map((i) => `${i.path.length ? i.path.join(".") : "<root>"}: ${i.message}`).join("; ");
}

export function parseProfile(text: string, what: string): Profile {
  let raw: unknown;
  try {
    raw = parseYaml(text, { uniqueKeys: true, strict: true });
  } catch (e) {
    throw new ProfileError("syntax", `${what}: ${(e as Error).message.split("\n")[0]}`);
  }
  const r = ProfileSchema.safeParse(raw);
  if (!r.success) throw new ProfileError("invalid", `${what}: ${formatIssues(r.error.issues)}`);
  return r.data;
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
