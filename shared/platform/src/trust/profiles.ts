/** Loads a class profile by name (from the `policy/` package, or FLEETD_POLICY_DIR) or from a file. */
import { existsSync, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { type Profile, ProfileError, parseProfile } from "@fleetd/verify/policy";

/** The `policy/` package directory of this checkout (shared/platform/dist/trust → ../../../../policy). */
export function defaultPolicyDir(): string {
  const env = process.env["FLEETD_POLICY_DIR"];
  if (env) return env;
  return resolve(fileURLToPath(import.meta.url), "../../../../../policy");
}

/** The file a profile spec names: `name` (a profile in the policy directory) or a path. */
function profilePath(spec: string, policyDir: string): string {
  if (/^[a-z0-9][a-z0-9-]*$/.test(spec)) {
    const path = [".yaml", ".yml", ".json"].map((ext) => join(policyDir, spec + ext)).find((p) => existsSync(p));
    if (path) return path;
    if (!existsSync(spec)) throw new ProfileError("not-found", `no profile "${spec}" in ${policyDir}`);
  }
  return spec;
}

function readProfile(path: string): Profile {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new ProfileError("not-found", `cannot read profile ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  return parseProfile(text, path);
}

/** `name` (a profile in the policy directory) or a path to a .yaml/.yml/.json file. */
export function loadProfile(spec: string, policyDir = defaultPolicyDir()): Profile {
  return readProfile(profilePath(spec, policyDir));
}

/**
 * A file's identity and version for caches: device, inode, size and modification time (ns). A file replaced
 * (new inode), rewritten (mtime) or truncated (size) gets another stamp; undefined when there is no such file.
 */
export function fileStamp(path: string): string | undefined {
  const st = statSync(path, { bigint: true, throwIfNoEntry: false });
  return st ? `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}` : undefined;
}

function deepFreeze<T>(v: T): T {
  if (v !== null && typeof v === "object" && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const x of Object.values(v)) deepFreeze(x);
  }
  return v;
}

/**
 * Profiles for a server that judges evidence again and again: each file is read and parsed once, and again only
 * when its stamp (fileStamp) changes, so an edited or replaced profile takes effect on the next evaluation.
 * Returned profiles are frozen (shared between evaluations).
 */
export class ProfileCache {
  private readonly entries = new Map<string, { stamp: string; profile: Profile }>();
  constructor(
    private readonly policyDir: string = defaultPolicyDir(),
    private readonly max = 256,
  ) {}

  load(spec: string): Profile {
    const path = profilePath(spec, this.policyDir);
    const stamp = fileStamp(path);
    const hit = this.entries.get(path);
    if (hit && stamp !== undefined && hit.stamp === stamp) return hit.profile;
    const profile = deepFreeze(readProfile(path));
    if (stamp !== undefined) {
      if (this.entries.size >= this.max) this.entries.clear();
      this.entries.set(path, { stamp, profile });
    }
    return profile;
  }
}
