/**
 * Making spire-agent load the renewed LDevID. Its tpm_devid plugin reads `devid_cert_path` and the key blobs when
 * spire-agent starts (SPIRE v1.13.3: the plugin's Configure), so "re-read" means "restart". The restart does not
 * attest by itself: a spire-agent that finds a valid agent SVID in its data_dir loads it and SPIRE keeps the old
 * CN's selectors; it attests with the loaded renewed LDevID when spire-plugin's sync, having moved the node entry to
 * the new CN, deletes the agent (spire-plugin/README.md, "Re-attestation after a renewal"). The mechanism is
 * configuration (`FLEETD_SPIRE_SIGNAL`):
 *   none               nothing is signalled; the renewed files are used at spire-agent's next start
 *   process:<name>     every process whose /proc/<pid>/comm is <name> gets the signal — for the shipped DaemonSet,
 *                      where the renew agent is a container in spire-agent's pod with `shareProcessNamespace: true`
 *                      (so it sees only the pod's processes) and the kubelet restarts the spire-agent container
 *                      after it exits (restartPolicy Always)
 *   pidfile:<path>     the process whose PID the file holds (a spire-agent run by systemd or a supervisor that
 *                      writes one; the lab and the tests)
 * with `:SIGNAL` appended to send another signal than SIGTERM (e.g. `process:spire-agent:SIGINT`).
 */
import { readdirSync, readFileSync } from "node:fs";
import { isAbsolute, join } from "node:path";

const SIGNALS = ["SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"] as const;
export type SpireSignalName = (typeof SIGNALS)[number];

export type SignalSpec =
  | { kind: "none" }
  | { kind: "process"; name: string; signal: SpireSignalName }
  | { kind: "pidfile"; path: string; signal: SpireSignalName };

/** Parses `none`, `process:<name>[:SIG]`, `pidfile:<path>[:SIG]`; throws an Error saying what is wrong. */
export function parseSignalSpec(s: string): SignalSpec {
  if (s === "none") return { kind: "none" };
  const m = /^(process|pidfile):(.+?)(?::(SIG[A-Z0-9]+))?$/.exec(s);
  if (!m) throw new Error(`expected none, process:<name>[:SIGNAL] or pidfile:<path>[:SIGNAL] (got ${JSON.stringify(s)})`);
  const signal = (m[3] ?? "SIGTERM") as SpireSignalName;
  if (!SIGNALS.includes(signal)) throw new Error(`signal ${m[3]} is not one of ${SIGNALS.join(", ")}`);
  const arg = m[2] as string;
  if (m[1] === "process") {
    // /proc/<pid>/comm holds at most 15 characters
    if (!/^[A-Za-z0-9._-]{1,15}$/.test(arg)) throw new Error(`process name ${JSON.stringify(arg)}: 1 to 15 of A-Z a-z 0-9 . _ - (as /proc/<pid>/comm shows it)`);
    return { kind: "process", name: arg, signal };
  }
  if (!isAbsolute(arg)) throw new Error(`pidfile ${JSON.stringify(arg)} must be an absolute path`);
  return { kind: "pidfile", path: arg, signal };
}

export interface SignalResult {
  /** The PIDs signalled (empty: none found, or `none`). */
  pids: number[];
  /** Why nothing was signalled, when nothing was. */
  note?: string;
}

export interface SignalDeps {
  kill: (pid: number, signal: SpireSignalName) => void;
  procRoot: string;
  selfPid: number;
}

const defaultDeps: SignalDeps = { kill: (pid, sig) => process.kill(pid, sig), procRoot: "/proc", selfPid: process.pid };

/** Sends the configured signal; a process that is gone already is not an error (it reads the files when it starts). */
export function signalSpireAgent(spec: SignalSpec, deps: SignalDeps = defaultDeps): SignalResult {
  if (spec.kind === "none") return { pids: [], note: "FLEETD_SPIRE_SIGNAL=none: spire-agent uses the renewed files at its next start" };
  let pids: number[];
  if (spec.kind === "pidfile") {
    let text: string;
    try {
      text = readFileSync(spec.path, "utf8");
    } catch (e) {
      return { pids: [], note: `cannot read ${spec.path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}` };
    }
    const pid = /^\s*(\d{1,10})\s*$/.exec(text)?.[1];
    if (!pid || Number(pid) <= 1) return { pids: [], note: `${spec.path} does not hold a process ID` };
    pids = [Number(pid)];
  } else {
    pids = [];
    for (const e of readdirSync(deps.procRoot)) {
      if (!/^\d+$/.test(e) || Number(e) === deps.selfPid) continue;
      let comm: string;
      try {
        comm = readFileSync(join(deps.procRoot, e, "comm"), "utf8").trim();
      } catch {
        continue; // exited meanwhile
      }
      if (comm === spec.name) pids.push(Number(e));
    }
    if (pids.length === 0) return { pids: [], note: `no process named ${spec.name} (is shareProcessNamespace on in the pod?)` };
  }
  const done: number[] = [];
  for (const pid of pids) {
    try {
      deps.kill(pid, spec.signal);
      done.push(pid);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ESRCH") throw e;
    }
  }
  return done.length ? { pids: done } : { pids: [], note: "the process exited before it was signalled" };
}
