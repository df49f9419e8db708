/** Shared plumbing for CLI commands: argument parsing, file reading, output. */
import { readFileSync } from "node:fs";
import { parseArgs, type ParseArgsConfig } from "node:util";
import { ParseError } from "@fleetd/verify/codec";
import type { ExitCode } from "./exit.js";

export interface CliCommand {
  /** Options synopsis printed after the command name. */
  usage: string;
  /** Returns the process exit code, from the one table (`EXIT`, exit.ts). */
  run(args: string[]): Promise<ExitCode>;
}

export class CliUsageError extends Error {
  override readonly name = "CliUsageError";
}

type Options = NonNullable<ParseArgsConfig["options"]>;

/** Parse options strictly; unknown options and missing required ones are usage errors. */
export function parseOptions<O extends Options>(
  args: string[],
  options: O,
  required: (keyof O & string)[] = [],
  positionals = 0,
): { values: Record<string, string | boolean | undefined>; positionals: string[] } {
  let parsed;
  try {
    parsed = parseArgs({ args, options, strict: true, allowPositionals: positionals > 0 });
  } catch (e) {
    throw new CliUsageError((e as Error).message);
  }
  const values = parsed.values as Record<string, string | boolean | undefined>;
  for (const r of required) {
    if (values[r] === undefined) throw new CliUsageError(`--${r} is required`);
  }
  if (parsed.positionals.length > positionals) throw new CliUsageError(`unexpected argument ${parsed.positionals[positionals]}`);
  return { values, positionals: parsed.positionals };
}

export function str(values: Record<string, string | boolean | undefined>, key: string): string {
  const v = values[key];
  if (typeof v !== "string") throw new CliUsageError(`--${key} needs a value`);
  return v;
}

/** Read an input file; a missing or unreadable file is a usage error naming the option. */
export function readInput(path: string, what: string): Uint8Array {
  try {
    return new Uint8Array(readFileSync(path));
  } catch (e) {
    throw new CliUsageError(`cannot read ${what} ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
}

/** Print what went wrong on stderr; `withStack` (an unexpected failure, exit 4) adds the error's stack. */
export function printError(e: unknown, withStack = false): void {
  if (e instanceof ParseError) {
    process.stderr.write(`error: malformed input (${e.code}): ${e.message}\n`);
  } else if (e instanceof Error && withStack && e.stack) {
    process.stderr.write(`error: ${e.stack}\n`);
  } else if (e instanceof Error) {
    process.stderr.write(`error: ${e.name === "Error" ? "" : e.name + ": "}${e.message}\n`);
  } else {
    process.stderr.write(`error: ${String(e)}\n`);
  }
}

export function printJson(v: unknown): void {
  process.stdout.write(JSON.stringify(v, jsonReplacer, 2) + "\n");
}

/** JSON for fleetd's data: bytes as lowercase hex, bigints as decimal strings. */
export function jsonReplacer(_k: string, v: unknown): unknown {
  if (v instanceof Uint8Array) return Buffer.from(v).toString("hex");
  if (typeof v === "bigint") return v.toString();
  if (v && typeof v === "object" && (v as { type?: string }).type === "Buffer" && Array.isArray((v as { data?: unknown }).data)) {
    return Buffer.from((v as { data: number[] }).data).toString("hex");
  }
  return v;
}
