/**
 * Talos's own Go code as test oracles (tests/go/talos): mkimage (go-blockdevice/v2 GPT, as Talos's
 * installer and imager), advwrite/advread (go-adv, Talos's META code), validate-config and gen-secrets
 * (pkg/machinery). .ci/setup builds them with tests/go/talos/build.sh into a cache keyed by go.mod/go.sum/
 * sources; a test process runs the script once to find that directory (a cache hit after setup).
 */
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = resolve(fileURLToPath(import.meta.url), "../../../..");

/** The Talos version tests/go/talos/go.mod pins (pkg/machinery): the tools are built at it, worlds render configs for it. */
export const TALOS_VERSION: string = (() => {
  const m = /github\.com\/siderolabs\/talos\/pkg\/machinery (v\d+\.\d+\.\d+)\b/.exec(readFileSync(join(repoRoot, "tests/go/talos/go.mod"), "utf8"));
  if (!m?.[1]) throw new Error("tests/go/talos/go.mod does not pin github.com/siderolabs/talos/pkg/machinery");
  return m[1];
})();

let binDir: string | undefined;

export function talosGoBinDir(): string {
  if (binDir) return binDir;
  const script = join(repoRoot, "tests/go/talos/build.sh");
  const r = spawnSync("bash", [script], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  if (r.status !== 0) {
    throw new Error(`tests/go/talos/build.sh failed (exit ${r.status}): ${r.stderr.trim().slice(-2000)}\n(needs Go >= 1.26.6 and the Go module proxy)`);
  }
  const dir = r.stdout.trim().split("\n").pop();
  if (!dir) throw new Error("tests/go/talos/build.sh printed no directory");
  binDir = dir;
  return dir;
}

export interface RunResult {
  status: number | null;
  stdout: string;
  stderr: string;
}

export function run(cmd: string, args: string[], opts: { input?: string } = {}): RunResult {
  const r = spawnSync(cmd, args, { encoding: "utf8", input: opts.input ?? "", maxBuffer: 64 << 20 });
  if (r.error) throw r.error;
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Run one of the Go helpers; a non-zero exit throws unless `allowFail`. */
export function talosGo(program: "advread" | "advwrite" | "gen-secrets" | "mkimage" | "validate-config", args: string[], allowFail = false): RunResult {
  const r = run(join(talosGoBinDir(), program), args);
  if (!allowFail && r.status !== 0) throw new Error(`${program} ${args.join(" ")} exited ${r.status}: ${r.stderr}`);
  return r;
}

export interface AdvReadOutput {
  meta: { sectorSize: number; index: number; offset: number; size: number };
  tags: Record<string, { hex: string; text?: string }>;
  readError?: string;
  copies: { valid: boolean; error?: string; tags?: Record<string, { hex: string; text?: string }> }[];
}

/** Talos's view of an image's META. */
export function advread(image: string, args: string[] = []): AdvReadOutput {
  return JSON.parse(talosGo("advread", [...args, image]).stdout) as AdvReadOutput;
}
