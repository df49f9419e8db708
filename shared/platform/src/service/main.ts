/**
 * How every fleetd binary starts and stops: `--help` (with the exit-code table, `cmd/exit.ts`), options parsed strictly, and a graceful
 * stop on SIGTERM/SIGINT (stop accepting, let requests in flight finish, close stores and sessions, then exit).
 */
import type { Server } from "node:http";
import { parseArgs, type ParseArgsConfig } from "node:util";
import { EXIT, EXIT_CODES_HELP, type ExitCode } from "../cmd/index.js";

export interface Running {
  stop(): Promise<void>;
}

export type OptionValues = Record<string, string | boolean | (string | boolean)[] | undefined>;

export interface ServiceMain {
  /** The binary's name, for messages. */
  name: string;
  /** One paragraph: what it does and its options (printed by --help and after a usage error). */
  usage: string;
  options: NonNullable<ParseArgsConfig["options"]>;
  start(values: OptionValues): Promise<Running>;
  /** Where a stop failure is reported (default: stderr). */
  onStopError?: (e: unknown) => void;
  /** Default: process.argv.slice(2). */
  argv?: string[];
  /** Default: process.exit. */
  exit?: (code: ExitCode) => never;
}

export async function runService(m: ServiceMain): Promise<Running | undefined> {
  const exit = m.exit ?? ((code: ExitCode) => process.exit(code));
  const argv = m.argv ?? process.argv.slice(2);
  if (argv.includes("--help") || argv.includes("-h")) {
    process.stdout.write(`${m.usage.trim()}\n\n${EXIT_CODES_HELP}\n`);
    exit(EXIT.ok);
  }
  let values: OptionValues;
  try {
    values = parseArgs({ args: argv, options: m.options, strict: true, allowPositionals: false }).values;
  } catch (e) {
    process.stderr.write(`${m.name}: ${(e as Error).message}\n${m.usage.trim()}\n`);
    return exit(EXIT.usage);
  }
  let running: Running;
  try {
    running = await m.start(values);
  } catch (e) {
    process.stderr.write(`${m.name}: ${e instanceof Error ? `${e.name === "Error" ? "" : `${e.name}: `}${e.message}` : String(e)}\n`);
    return exit(EXIT.usage);
  }
  let signalled = false;
  const stop = (): void => {
    if (signalled) return;
    signalled = true;
    running.stop().then(
      () => exit(EXIT.ok),
      (e: unknown) => {
        (m.onStopError ?? ((err: unknown) => process.stderr.write(`${m.name}: stopping failed: ${(err as Error).stack ?? String(err)}\n`)))(e);
        exit(EXIT.internal);
      },
    );
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  return running;
}

/**
 * Stops `servers` accepting, closes their idle keep-alive connections at once, lets requests in flight finish for
 * up to `drainMs`, then closes whatever is still open. Resolves when every server has closed.
 */
export async function drainServers(servers: readonly Server[], drainMs: number): Promise<void> {
  const closed = Promise.all(servers.map((s) => (s.listening ? new Promise<void>((resolve) => s.close(() => resolve())) : Promise.resolve())));
  for (const s of servers) s.closeIdleConnections();
  const force = setTimeout(() => {
    for (const s of servers) s.closeAllConnections();
  }, drainMs);
  try {
    await closed;
  } finally {
    clearTimeout(force);
  }
}
