/**
 * NetBox's web server and RQ worker forked from one process that imported NetBox once
 * (tests/scripts/netbox/zygote.py: why, and what the child changes). run-tests.ts starts the zygote for a suite
 * run and names its socket in FLEETD_NETBOX_ZYGOTE; `startNetBox` then asks it for each instance's web server and
 * worker instead of spawning `netbox runserver` / `netbox rqworker` (the same commands, the same settings but the
 * instance's ports and directories). Without the variable, or when the zygote does not answer, they are spawned.
 *
 * A forked process is not this process's child: `ZygoteProcess` follows it by its pid (and the exit code the child
 * writes next to its log), signals its process group like ManagedProcess does, and the child ends itself when this
 * process is gone.
 */
import { existsSync, readFileSync } from "node:fs";
import { connect } from "node:net";
import { tailOf } from "./managedProcess.js";
import { sleep } from "./ports.js";

/** What netbox.ts needs of a NetBox process, spawned (ManagedProcess) or forked (ZygoteProcess). */
export interface NetBoxProcess {
  readonly name: string;
  readonly exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  deadReason(): string | undefined;
  tail(lines?: number): string;
  stop(sig?: NodeJS.Signals, graceMs?: number): Promise<void>;
}

export const ZYGOTE_ENV = "FLEETD_NETBOX_ZYGOTE";

export class ZygoteProcess implements NetBoxProcess {
  exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  private readonly exited: Promise<void>;
  private stopping = false;

  constructor(
    readonly name: string,
    readonly logFile: string,
    readonly pid: number,
  ) {
    this.exited = (async () => {
      for (;;) {
        try {
          process.kill(pid, 0);
        } catch {
          break; // gone (the zygote reaps its children at once)
        }
        await sleep(this.stopping ? 50 : 250);
      }
      let code: number | null = null;
      try {
        const text = readFileSync(`${logFile}.exit`, "utf8").trim();
        code = /^-?\d+$/.test(text) ? Number(text) : null;
      } catch {
        /* killed before it could write one */
      }
      this.exit = { code, signal: code === null ? "SIGKILL" : null };
    })();
  }

  deadReason(): string | undefined {
    if (!this.exit) return undefined;
    return `${this.name} (forked by the NetBox zygote) exited (${this.exit.code === null ? "killed" : `code ${this.exit.code}`}); log ${this.logFile}:\n${this.tail()}`;
  }

  tail(lines = 30): string {
    return tailOf(this.logFile, lines);
  }

  private signalGroup(sig: NodeJS.Signals): void {
    if (this.exit) return;
    try {
      process.kill(-this.pid, sig);
    } catch {
      /* already gone */
    }
  }

  async stop(sig: NodeJS.Signals = "SIGTERM", graceMs = 10_000): Promise<void> {
    if (this.exit) return;
    this.stopping = true;
    this.signalGroup(sig);
    const timer = sleep(graceMs).then(() => "timeout" as const);
    if ((await Promise.race([this.exited.then(() => "done" as const), timer])) === "timeout") {
      this.signalGroup("SIGKILL");
      await this.exited;
    }
  }
}

/**
 * Ask the zygote (socket `socketPath`) to run `netbox <argv>` with `env` in `cwd`, output to `logFile`. Rejects when
 * the zygote does not answer or refuses (the caller then spawns the command itself).
 */
export function zygoteFork(socketPath: string, name: string, logFile: string, argv: readonly string[], env: NodeJS.ProcessEnv, cwd: string): Promise<ZygoteProcess> {
  return new Promise((resolve, reject) => {
    if (!existsSync(socketPath)) {
      reject(new Error(`no NetBox zygote at ${socketPath}`));
      return;
    }
    const s = connect(socketPath);
    let data = "";
    const timer = setTimeout(() => {
      s.destroy();
      reject(new Error("the NetBox zygote did not answer within 10 s"));
    }, 10_000);
    s.on("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    s.on("data", (b) => {
      data += b.toString("utf8");
      if (!data.endsWith("\n")) return;
      clearTimeout(timer);
      s.end();
      try {
        const r = JSON.parse(data) as { pid?: unknown; error?: unknown };
        if (typeof r.pid === "number" && Number.isInteger(r.pid) && r.pid > 1) resolve(new ZygoteProcess(name, logFile, r.pid));
        else reject(new Error(`the NetBox zygote refused: ${String(r.error ?? data.trim())}`));
      } catch (e) {
        reject(e as Error);
      }
    });
    s.write(JSON.stringify({ argv, env, cwd, log: logFile, owner: process.pid }) + "\n");
  });
}
