/**
 * Child processes of real-platform harnesses: each in its own process group (so a forking server and its
 * children stop together), output to a log file, killed when the test process exits — also when it is killed
 * itself (SIGKILL, a runner's timeout): started through `setpriv --pdeathsig KILL`, so the kernel ends the
 * child with its parent and no NetBox or database outlives the test that started it.
 */
import { spawn, type ChildProcess, type SpawnOptions } from "node:child_process";
import { closeSync, existsSync, openSync, readFileSync } from "node:fs";
import { sleep } from "./ports.js";

const SETPRIV = "/usr/bin/setpriv";
const live = new Set<ManagedProcess>();
process.on("exit", () => {
  for (const p of live) p.killNow();
});

export class ManagedProcess {
  readonly child: ChildProcess;
  exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  private readonly exited: Promise<void>;

  constructor(
    readonly name: string,
    readonly logFile: string,
    cmd: string,
    args: string[],
    opts: SpawnOptions,
  ) {
    const fd = openSync(logFile, "a");
    try {
      const [file, argv] = existsSync(SETPRIV) ? [SETPRIV, ["--pdeathsig", "KILL", "--", cmd, ...args]] : [cmd, args];
      this.child = spawn(file, argv, { ...opts, detached: true, stdio: ["ignore", fd, fd] });
    } finally {
      closeSync(fd);
    }
    live.add(this);
    this.exited = new Promise((resolve) => {
      this.child.once("exit", (code, signal) => {
        this.exit = { code, signal };
        live.delete(this);
        resolve();
      });
      this.child.once("error", (e) => {
        this.exit = { code: -1, signal: null };
        live.delete(this);
        process.stderr.write(`${name}: ${e.message}\n`);
        resolve();
      });
    });
  }

  /** Resolves when the process has exited (on its own, killed, or stopped). */
  waitExit(): Promise<void> {
    return this.exited;
  }

  /** Undefined while running, else a sentence for error messages. */
  deadReason(): string | undefined {
    if (!this.exit) return undefined;
    return `${this.name} exited (${this.exit.signal ?? `code ${this.exit.code}`}); log ${this.logFile}:\n${this.tail()}`;
  }

  tail(lines = 30): string {
    return tailOf(this.logFile, lines);
  }

  private signalGroup(sig: NodeJS.Signals): void {
    const pid = this.child.pid;
    if (pid === undefined || this.exit) return;
    try {
      process.kill(-pid, sig);
    } catch {
      /* already gone */
    }
  }

  killNow(): void {
    this.signalGroup("SIGKILL");
  }

  /** SIGTERM (or `sig`) to the group, SIGKILL after `graceMs`. */
  async stop(sig: NodeJS.Signals = "SIGTERM", graceMs = 10_000): Promise<void> {
    if (this.exit) return;
    this.signalGroup(sig);
    const timer = sleep(graceMs).then(() => "timeout" as const);
    if ((await Promise.race([this.exited.then(() => "done" as const), timer])) === "timeout") {
      this.signalGroup("SIGKILL");
      await this.exited;
    }
  }
}

/** The last `lines` lines of a log file ("" when it cannot be read). */
export function tailOf(file: string, lines = 30): string {
  try {
    return readFileSync(file, "utf8").split("\n").slice(-lines).join("\n");
  } catch {
    return "";
  }
}
