/**
 * The project's setup scripts (Go builds under tests/go, Python venvs under tests/scripts) as the harnesses call
 * them: each runs once per test process, prints its result (a directory) as its last stdout line, and may be
 * long when cold — `progress` echoes its stderr with a prefix so a waiting test shows why.
 */
import { spawn } from "node:child_process";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repoRoot = resolve(fileURLToPath(import.meta.url), "../../../..");
const runs = new Map<string, Promise<string>>();

export interface SetupScriptOptions {
  /** Prefix for echoing the script's stderr (progress of a cold build); silent without it. */
  progress?: string;
  /** Appended to a failure message (what the script needs). */
  needs?: string;
}

/** Run `relPath` (from the repository root) once; resolves with the last line of its stdout. */
export function runSetupScript(relPath: string, opts: SetupScriptOptions = {}): Promise<string> {
  let p = runs.get(relPath);
  if (!p) {
    p = new Promise<string>((res, rej) => {
      const script = join(repoRoot, relPath);
      const child = spawn("bash", [script], { stdio: ["ignore", "pipe", "pipe"] });
      let out = "";
      let err = "";
      child.stdout.on("data", (b: Buffer) => (out += b.toString("utf8")));
      child.stderr.on("data", (b: Buffer) => {
        const s = b.toString("utf8");
        err = (err + s).slice(-4000);
        if (opts.progress) process.stderr.write(s.replace(/^(?=.)/gm, opts.progress));
      });
      child.on("error", (e) => rej(new Error(`cannot run ${script}: ${e.message}`)));
      child.on("close", (code) => {
        const line = out.trim().split("\n").pop();
        if (code !== 0 || !line) rej(new Error(`${relPath} failed (exit ${code}): ${err.trim()}${opts.needs ? `\n(needs ${opts.needs})` : ""}`));
        else res(line);
      });
    });
    runs.set(relPath, p);
  }
  return p;
}
