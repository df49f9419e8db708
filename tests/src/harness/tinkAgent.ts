/**
 * The REAL Tinkerbell agent (`tink-agent`, cmd/agent of the pinned github.com/tinkerbell/tinkerbell module, built
 * with the `tinkerbell` program by tests/go/tinkerbell-bin/build.sh, which .ci/setup runs) as a process: it asks
 * tink-server for its Workflow's actions over plaintext gRPC, runs each one as a container through its `docker`
 * runtime (any Docker-API socket: podman's `podman system service` in the lab) and reports the outcome. Nothing of
 * the protocol is spoken here; the harness starts it, keeps its whole log (JSON lines), finds what it did in that
 * log, and stops it.
 *
 * Container output: the docker runtime attaches to the container (no TTY) and logs every read of the attach
 * stream as one log line's `msg`, so the text carries Docker's stream framing (8-byte headers: stream 1/2, three
 * zero bytes, a 4-byte length) and is cut at arbitrary 4 KiB boundaries. `actionOutput()` joins a container's
 * chunks and strips the headers.
 *
 * The agent creates every action container privileged (all host devices visible): what a Template lets an
 * action write is the test's business (tests/src/harness/loopDisk.ts).
 *
 * For the scripted protocol client that decides action outcomes itself (unit-style tests of tink-server's
 * behaviour), see ./tinkAgentClient.ts.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { registerCleanup, sleep } from "./process.js";
import { tinkerbellBinDir } from "./tinkerbell.js";

/** The tink-agent binary .ci/setup built (build.sh is a cache hit then; it only prints the directory). */
export async function tinkAgentPath(): Promise<string> {
  const p = join(await tinkerbellBinDir(), "tink-agent");
  if (!existsSync(p)) throw new Error(`${p} is missing: run bash tests/go/tinkerbell-bin/build.sh (or .ci/setup)`);
  return p;
}

/** One line of the agent's log (slog JSON): the fields tests read; everything else is kept in `raw`. */
export const AgentLogLine = z.looseObject({
  time: z.string().optional(),
  level: z.union([z.number(), z.string()]).optional(),
  msg: z.string(),
  agentID: z.string().optional(),
  container_name: z.string().optional(),
  error: z.string().optional(),
  version: z.string().optional(),
  runtime: z.string().optional(),
  transport: z.string().optional(),
});
export type AgentLogLine = z.infer<typeof AgentLogLine>;

export type AgentRuntime =
  /** Any Docker-API socket (Docker, or podman's `podman system service`). */
  | { kind: "docker"; socket: string };

export interface TinkAgentOptions {
  /** The agent ID: the machine's boot MAC, lowercase (Hardware `spec.interfaces[].dhcp.mac`, the Workflow's device_1). */
  id: string;
  /** tink-server's gRPC address, host:port (plaintext). */
  grpcServer: string;
  runtime: AgentRuntime;
  /** Hardware attribute detection (ghw, read-only /sys and /proc); upstream's default is on. */
  attributeDetection?: boolean;
  /** The retry backoff's ceiling (upstream 5s); default 1s so a test sees a new Workflow quickly. */
  backoffMaxInterval?: string;
  /** slog level: 0 info (default); higher is more verbose. */
  logLevel?: number;
}

export interface TinkAgent {
  readonly pid: number;
  /** The exact arguments it runs with. */
  readonly args: readonly string[];
  /** The version the agent logged at start ("starting Agent" … version), e.g. v0.25.0. */
  readonly version: string;
  /** The whole log so far (stdout + stderr; the agent logs JSON to stdout). */
  log(): string;
  /** The parseable JSON lines of the log. */
  lines(): AgentLogLine[];
  /** Each action container's output, Docker stream headers stripped, by container name (tinkerbell_<action>_<id>). */
  actionOutput(): Map<string, string>;
  /** Resolves with the first log line matching `pred` (already logged or later); rejects on timeout or exit. */
  waitForLine(what: string, pred: (l: AgentLogLine) => boolean, timeoutMs?: number): Promise<AgentLogLine>;
  hasExited(): boolean;
  /** SIGTERM (the agent stops its loop and logs "stopped Agent"), SIGKILL after `graceMs`. Idempotent. */
  stop(graceMs?: number): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Variables the agent reads as configuration (ff's AGENT_ prefix, its legacy names, the Docker client's own). */
const AGENT_ENV = /^(AGENT_|DOCKER_|OTEL_)|^(REGISTRY_USERNAME|REGISTRY_PASSWORD|DOCKER_REGISTRY|TINKERBELL_GRPC_AUTHORITY|TINKERBELL_TLS|TINKERBELL_INSECURE_TLS|ID|WORKER_ID)$/;

function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!AGENT_ENV.test(k)) env[k] = v;
  return env;
}

export function tinkAgentArgs(o: TinkAgentOptions): string[] {
  if (!/^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/.test(o.id)) throw new Error(`tink-agent --id: expected a lowercase MAC (got ${JSON.stringify(o.id)})`);
  if (!/^[^\s/]+:\d{1,5}$/.test(o.grpcServer)) throw new Error(`tink-agent --grpc-server: expected host:port (got ${JSON.stringify(o.grpcServer)})`);
  return [
    "--id", o.id,
    "--transport", "grpc", "--grpc-server", o.grpcServer,
    "--runtime", o.runtime.kind, "--docker-socket", o.runtime.socket,
    `--attribute-detection=${o.attributeDetection ?? true}`,
    "--backoff-max-interval", o.backoffMaxInterval ?? "1s",
    "--log-level", String(o.logLevel ?? 0),
  ];
}

/** Parse a log into its JSON lines (non-JSON lines, e.g. a Go panic, are skipped; `log()` keeps them). */
export function parseAgentLog(text: string): AgentLogLine[] {
  const out: AgentLogLine[] = [];
  for (const line of text.split("\n")) {
    if (!line.startsWith("{")) continue;
    let v: unknown;
    try {
      v = JSON.parse(line);
    } catch {
      continue;
    }
    const r = AgentLogLine.safeParse(v);
    if (r.success) out.push(r.data);
  }
  return out;
}

/**
 * Strip Docker's multiplexed-stream headers from text read off an attach stream: 8 bytes, [stream 0-2, 0, 0, 0,
 * length 4 bytes big-endian]. The agent's slog JSON turns each byte that is not valid UTF-8 into U+FFFD, so a
 * length byte ≥ 0x80 arrives as one U+FFFD character: a header is always eight characters here, unless a length
 * byte started a valid multi-byte sequence with the payload's first byte (a non-ASCII first character), which this
 * cannot tell apart. Good enough to present output; never used to decide an outcome.
 */
export function stripDockerStreamHeaders(s: string): string {
  let out = "";
  let i = 0;
  while (i < s.length) {
    const c = s.charCodeAt(i);
    if (c <= 2 && s.charCodeAt(i + 1) === 0 && s.charCodeAt(i + 2) === 0 && s.charCodeAt(i + 3) === 0 && i + 8 <= s.length) {
      i += 8;
      continue;
    }
    out += s[i];
    i++;
  }
  return out;
}

/** Join each container's output chunks (log lines with container_name and no error) and strip the stream headers. */
export function actionOutputOf(lines: readonly AgentLogLine[]): Map<string, string> {
  const raw = new Map<string, string>();
  for (const l of lines) {
    if (!l.container_name || l.error !== undefined) continue;
    if (/^(Couldn't remove container|Failed to gracefully stop container|error reading container output)/.test(l.msg)) continue;
    raw.set(l.container_name, (raw.get(l.container_name) ?? "") + l.msg);
  }
  return new Map([...raw].map(([k, v]) => [k, stripDockerStreamHeaders(v)]));
}

const MAX_LOG = 8 << 20;

/**
 * Start tink-agent and wait for its "starting Agent" line (it does not need tink-server to be up: it retries
 * GetAction with backoff). Killed with this process even by SIGKILL (setpriv --pdeathsig).
 */
export async function startTinkAgent(o: TinkAgentOptions): Promise<TinkAgent> {
  const bin = await tinkAgentPath();
  const args = tinkAgentArgs(o);
  const SETPRIV = "/usr/bin/setpriv";
  const [file, argv] = existsSync(SETPRIV) ? [SETPRIV, ["--pdeathsig", "KILL", "--", bin, ...args]] : [bin, args];
  const child: ChildProcess = spawn(file, argv, { env: cleanEnv(), stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  let truncated = false;
  const keep = (b: Buffer) => {
    if (log.length > MAX_LOG) {
      truncated = true;
      return;
    }
    log += b.toString("utf8");
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  let done = false;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((res) => {
    child.on("error", (e) => {
      log += `cannot start ${bin}: ${e.message}\n`;
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
    if (!done && pid > 0) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
  });
  void exited.then(unregister);

  const lines = () => parseAgentLog(log);
  const waitForLine = async (what: string, pred: (l: AgentLogLine) => boolean, timeoutMs = 60_000): Promise<AgentLogLine> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const hit = lines().find(pred);
      if (hit) return hit;
      if (done) throw new Error(`tink-agent exited before ${what}:\n${log.slice(-4000)}`);
      if (Date.now() > deadline) throw new Error(`tink-agent: no ${what} after ${timeoutMs} ms${truncated ? " (log truncated)" : ""}:\n${log.slice(-4000)}`);
      await sleep(100);
    }
  };
  const stop = async (graceMs = 10_000) => {
    if (!done) {
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
      await exited;
      clearTimeout(timer);
    }
    return exited;
  };

  let version: string;
  try {
    const started = await waitForLine("\"starting Agent\" line", (l) => l.msg === "starting Agent", 30_000);
    if (!started.version) throw new Error(`tink-agent's "starting Agent" line names no version: ${JSON.stringify(started)}`);
    version = started.version;
  } catch (e) {
    await stop(2000);
    throw e;
  }
  return {
    pid,
    args,
    version,
    log: () => log,
    lines,
    actionOutput: () => actionOutputOf(lines()),
    waitForLine,
    hasExited: () => done,
    stop,
  };
}
