/**
 * Running the fleetd CLI from differential tests. FLEETD_CLI selects the CLI under test (a `.js`/`.mjs` file
 * is run with this Node, anything else is executed directly); default `<repo>/shared/cli/dist/main.js`.
 * Exit codes (shared/cli/src/main.ts): 0 ok, 1 a check failed, 2 usage or input error.
 */
import { strict as assert } from "node:assert";
import { randomBytes } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { runProcess } from "../harness/process.js";

const repoRoot = resolve(fileURLToPath(import.meta.url), "../../../..");

export function fleetdCliPath(): string {
  const env = process.env["FLEETD_CLI"];
  return env && env.length > 0 ? resolve(env) : resolve(repoRoot, "shared/cli/dist/main.js");
}

export interface CliResult {
  status: number | null;
  stdout: string;
  stderr: string;
  /** The command line, for assertion messages. */
  line: string;
}

export async function fleetd(args: readonly string[], opts: { cwd?: string } = {}): Promise<CliResult> {
  const cli = fleetdCliPath();
  const [cmd, argv] = /\.m?js$/.test(cli) ? [process.execPath, [cli, ...args]] : [cli, [...args]];
  const res = await runProcess(cmd, argv, { ...(opts.cwd ? { cwd: opts.cwd } : {}), timeoutMs: 60_000 });
  return {
    status: res.code,
    stdout: res.stdout.toString("utf8"),
    stderr: res.stderr.toString("utf8"),
    line: `fleetd ${args.join(" ")}`,
  };
}

/** Fail early, with one clear message, when the CLI under test does not have `command` (e.g. "verify quote"). */
export async function requireCommand(command: string): Promise<void> {
  const r = await fleetd([...command.split(" "), "--help"]);
  if (r.status !== 0) {
    throw new Error(
      `the fleetd CLI at ${fleetdCliPath()} does not implement "${command}" (exit ${r.status}): ${(r.stderr || r.stdout).trim().split("\n")[0] ?? ""}` +
        " — build it, or point FLEETD_CLI at a CLI that has it",
    );
  }
}

/** `--json` output: a verdict as data (shared/design/style.md). Parsed strictly enough to be a contract. */
const Verdict = z.looseObject({
  verdict: z.enum(["pass", "fail"]),
  reasons: z.array(z.looseObject({ check: z.string().min(1), detail: z.string().optional() })),
});
export type Verdict = z.infer<typeof Verdict>;

export function parseVerdict(r: CliResult): Verdict {
  let json: unknown;
  try {
    json = JSON.parse(r.stdout);
  } catch {
    assert.fail(`${r.line}: --json output is not JSON:\n${r.stdout}\n${r.stderr}`);
  }
  const parsed = Verdict.safeParse(json);
  if (!parsed.success) assert.fail(`${r.line}: --json output is not a verdict {verdict, reasons:[{check, detail}]}: ${parsed.error.message}\n${r.stdout}`);
  return parsed.data;
}

function describe(r: CliResult): string {
  return `${r.line}\nexit ${r.status}\nstdout: ${r.stdout.trim()}\nstderr: ${r.stderr.trim()}`;
}

export function assertOk(r: CliResult): void {
  assert.equal(r.status, 0, `expected exit 0:\n${describe(r)}`);
}

/** Exit 0, and with --json the verdict is "pass". */
export function assertPass(r: CliResult, json: boolean): void {
  assertOk(r);
  if (json) assert.equal(parseVerdict(r).verdict, "pass", describe(r));
}

/**
 * Exit 1 (a check failed, not a usage/input error), and the failed check is named: with --json a reason's
 * `check` or `detail` matches `check`; without, the printed output does.
 */
export function assertFails(r: CliResult, json: boolean, check: RegExp): void {
  assert.equal(r.status, 1, `expected exit 1 (a failed check):\n${describe(r)}`);
  if (json) {
    const v = parseVerdict(r);
    assert.equal(v.verdict, "fail", describe(r));
    assert.ok(
      v.reasons.some((x) => check.test(x.check) || check.test(x.detail ?? "")),
      `expected a failed check matching ${check}:\n${describe(r)}`,
    );
  } else {
    assert.match(r.stdout + r.stderr, check, `expected the failed check (${check}) to be printed:\n${describe(r)}`);
  }
}

export const randomHex = (n: number) => randomBytes(n).toString("hex");

/** Write a copy of `src` with the byte at `offset` (negative: from the end) inverted; returns the copy's path. */
export function withFlippedByte(src: string, offset: number, dst = `${src}.flipped${offset}`): string {
  const b = Buffer.from(readFileSync(src));
  const i = offset < 0 ? b.length + offset : offset;
  assert.ok(i >= 0 && i < b.length, `offset ${offset} outside ${src} (${b.length} bytes)`);
  b[i] = (b[i] ?? 0) ^ 0xff;
  writeFileSync(dst, b);
  return dst;
}
