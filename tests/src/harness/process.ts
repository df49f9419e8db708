/**
 * Process plumbing for the real-platform harnesses: run a tool to completion, keep a daemon running
 * (killed when this process dies, even by SIGKILL), pick free loopback ports, poll until ready, and
 * clean up on exit. Only loopback is ever used.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { reservePorts } from "./ports.js";

export interface RunOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** Bytes written to the child's stdin (stdin is closed either way). */
  input?: Uint8Array;
  /** Killed with SIGKILL after this long; default 60 s. */
  timeoutMs?: number;
}

export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  stdout: Buffer;
  stderr: Buffer;
}

/** Run a program to completion, collecting its output. Never throws for a non-zero exit (callers judge). */
export function runProcess(cmd: string, args: readonly string[], opts: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ["pipe", "pipe", "pipe"] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGKILL");
    }, opts.timeoutMs ?? 60_000);
    child.stdout.on("data", (b: Buffer) => out.push(b));
    child.stderr.on("data", (b: Buffer) => err.push(b));
    child.stdin.on("error", () => undefined); // the child may exit without reading its input
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ${cmd}: ${e.message}`));
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolvePromise({ code, signal, timedOut, stdout: Buffer.concat(out), stderr: Buffer.concat(err) });
    });
    child.stdin.end(opts.input ?? undefined);
  });
}

const SETPRIV = "/usr/bin/setpriv";

export interface Daemon {
  readonly pid: number;
  readonly name: string;
  /** Resolves when the process has exited (and has been reaped). */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  hasExited(): boolean;
  /** The last few KiB of its stdout and stderr, for error messages. */
  output(): string;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves once it is gone. Idempotent. */
  stop(graceMs?: number): Promise<void>;
}

/**
 * Start a long-running process. It is started through `setpriv --pdeathsig KILL` (util-linux, present on
 * every Debian) so the kernel kills it if this Node process dies without running its exit hooks.
 */
export function startDaemon(name: string, cmd: string, args: readonly string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Daemon {
  const [file, argv] = existsSync(SETPRIV) ? [SETPRIV, ["--pdeathsig", "KILL", "--", cmd, ...args]] : [cmd, [...args]];
  const child: ChildProcess = spawn(file, argv, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ["ignore", "pipe", "pipe"] });
  let tail = "";
  const keep = (b: Buffer) => {
    tail = (tail + b.toString("utf8")).slice(-8192);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  let done = false;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((res) => {
    child.on("error", (e) => {
      keep(Buffer.from(`cannot start ${cmd}: ${e.message}\n`));
      done = true;
      res({ code: null, signal: null });
    });
    child.on("close", (code, signal) => {
      done = true;
      res({ code, signal });
    });
  });
  const pid = child.pid ?? -1;
  const unregister = registerCleanup(() => {
    if (!done && pid > 0) killQuietly(pid, "SIGKILL");
  });
  void exited.then(unregister);
  return {
    pid,
    name,
    exited,
    hasExited: () => done,
    output: () => tail,
    async stop(graceMs = 3000) {
      if (done) return;
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

function killQuietly(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // already gone
  }
}

// ---- emergency cleanup: on exit and on SIGINT/SIGTERM/SIGHUP, run every registered hook synchronously ----

const hooks = new Set<() => void>();
let installed = false;

function runHooks(): void {
  for (const h of [...hooks]) {
    hooks.delete(h);
    try {
      h();
    } catch {
      // best effort while exiting
    }
  }
}

/** Register a synchronous cleanup run when the process exits or is interrupted; returns the unregister function. */
export function registerCleanup(fn: () => void): () => void {
  if (!installed) {
    installed = true;
    process.on("exit", runHooks);
    for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
      process.once(sig, () => {
        runHooks();
        // Keep the default behaviour (terminate) unless someone else handles the signal.
        if (process.listenerCount(sig) === 0) process.kill(process.pid, sig);
      });
    }
  }
  hooks.add(fn);
  return () => hooks.delete(fn);
}

/**
 * `n` consecutive loopback TCP ports, free and reserved for this process (ports.ts reservePorts).
 * (Consecutive because the TSS swtpm TCTI always looks for the control channel at port + 1.)
 */
export function freeLoopbackPorts(n: number): Promise<number[]> {
  return reservePorts(n);
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Poll `probe` until it returns true. `abort` may return a reason to stop early (e.g. the daemon died).
 * Throws after `timeoutMs` with `what` and the last probe error.
 */
export async function waitFor(
  what: string,
  probe: () => Promise<boolean>,
  opts: { timeoutMs: number; intervalMs?: number; abort?: () => string | undefined },
): Promise<void> {
  const deadline = Date.now() + opts.timeoutMs;
  let last = "";
  for (;;) {
    const reason = opts.abort?.();
    if (reason !== undefined) throw new Error(`${what}: ${reason}`);
    try {
      if (await probe()) return;
    } catch (e) {
      last = (e as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not ready after ${opts.timeoutMs} ms${last ? ` (last error: ${last})` : ""}`);
    await sleep(opts.intervalMs ?? 50);
  }
}
