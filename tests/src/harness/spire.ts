/**
 * The real SPIRE (v1.13.3, built by tests/go/spire/build.sh) for tests and the lab, on loopback:
 *  - spire-server from exactly the shipped `spire-plugin/examples/server.conf`, with only its paths, ports and
 *    listen address replaced (`renderSpireConf`; tests/src/spire/conf.test.ts proves nothing else changes):
 *    tpm_devid with fleetd's CA bundle and the TPM manufacturer's issuing CA, SQLite, the admin API on a Unix
 *    socket in the server's temp dir, agents' port on 127.0.0.1;
 *  - spire-agent from exactly the shipped `spire-plugin/examples/agent.conf`, likewise, attesting with
 *    tpm_devid against a TPM behind a Unix socket (a swtpm; see tpmUnixSocket.ts for the world's TCP ones) and
 *    serving the Workload API on its own socket.
 * Each process runs in its own process group with its log in its directory (managedProcess.ts); the server can
 * be stopped and started again on the same data, port and socket (outage tests).
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { SpireServerClient, type SpireServerClientOptions } from "@fleetd/platform/spire";
import { ManagedProcess } from "./managedProcess.js";
import { freePort, portOpen } from "./ports.js";
import { runProcess, waitFor } from "./process.js";
import { runSetupScript } from "./setupScript.js";

const repoRoot = resolve(fileURLToPath(import.meta.url), "../../../..");
export const SHIPPED_SERVER_CONF = join(repoRoot, "spire-plugin/examples/server.conf");
export const SHIPPED_AGENT_CONF = join(repoRoot, "spire-plugin/examples/agent.conf");

/** The keys of server.conf the harness may replace: paths, ports, the listen address. Nothing else. */
export const SERVER_CONF_SUBSTITUTABLE = ["bind_address", "bind_port", "socket_path", "data_dir", "connection_string", "keys_path", "devid_ca_path", "endorsement_ca_path"] as const;
/** The keys of agent.conf the harness may replace: paths, the server's address and port. Nothing else. */
export const AGENT_CONF_SUBSTITUTABLE = [
  "data_dir",
  "server_address",
  "server_port",
  "socket_path",
  "trust_bundle_path",
  "tpm_device_path",
  "devid_cert_path",
  "devid_priv_path",
  "devid_pub_path",
  "directory",
] as const;

/**
 * `text` with the quoted values of `values`' keys replaced. Each key must be in `allowed`, appear exactly once
 * as a line `key = "value"`, and get a value without quotes, backslashes or newlines. Every other byte stays.
 */
export function renderSpireConf(text: string, values: Readonly<Record<string, string>>, allowed: readonly string[]): string {
  let out = text;
  for (const [key, value] of Object.entries(values)) {
    if (!allowed.includes(key)) throw new Error(`renderSpireConf: ${key} is not a path, port or address the harness may replace`);
    if (/["\\\n]/.test(value)) throw new Error(`renderSpireConf: the value of ${key} has a quote, backslash or newline`);
    const re = new RegExp(`^(\\s*${key}\\s*=\\s*")([^"\\n]*)("\\s*)$`, "gm");
    const hits = [...out.matchAll(re)].length;
    if (hits !== 1) throw new Error(`renderSpireConf: ${key} = "…" appears ${hits} times in the file, must be once`);
    out = out.replace(re, (_m, a: string, _old: string, b: string) => `${a}${value}${b}`);
  }
  return out;
}

/** The quoted value of `key` in a SPIRE config (the first line `key = "…"`). */
export function confValue(text: string, key: string): string {
  const m = new RegExp(`^\\s*${key}\\s*=\\s*"([^"\\n]*)"`, "m").exec(text);
  if (!m) throw new Error(`no ${key} = "…" in the config`);
  return m[1] as string;
}

/** The directory holding spire-server and spire-agent (a no-op when .ci/setup has built them). */
export function spireBinDir(): Promise<string> {
  return runSetupScript("tests/go/spire/build.sh", { progress: "# [spire build] ", needs: "Go >= 1.26, gcc and the Go module proxy" });
}

export interface SpireServerOptions {
  /** PEM file: the CA(s) LDevID certificates must chain to (fleetd's CA bundle). */
  devidCaPath: string;
  /** PEM file: the direct issuers of the TPMs' EK certificates (swtpm: its local CA's `issuercert.pem`). */
  endorsementCaPath: string;
  /** Readiness timeout per start; default 60 s. */
  timeoutMs?: number;
  /**
   * Another datastore than the shipped SQLite (the benchmark: PostgreSQL). Then `database_type` is replaced too —
   * the one site choice besides paths the harness makes, and only when asked.
   */
  datastore?: { type: "postgres"; connectionString: string };
}

export interface SpireServer {
  readonly trustDomain: string;
  /** The admin API socket. */
  readonly socketPath: string;
  /** Agents' port on 127.0.0.1. */
  readonly port: number;
  readonly dir: string;
  /** The config file it runs and its text. */
  readonly configFile: string;
  readonly configText: string;
  /** The current process (a new one after `start()`). */
  process(): ManagedProcess;
  /** A client of the admin API (the caller closes it). */
  client(opts?: Omit<SpireServerClientOptions, "socketPath">): SpireServerClient;
  /** `spire-server <args> -socketPath <admin socket>`. */
  cli(...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }>;
  /** The trust bundle agents start from (PEM). */
  bundlePem(): Promise<string>;
  /** Stop the process (SIGTERM), keep its data. */
  halt(): Promise<void>;
  /** Start it again on the same data, port and socket (after `halt()`). */
  start(): Promise<void>;
  /** Stop and remove everything. */
  stop(): Promise<void>;
}

export async function startSpireServer(opts: SpireServerOptions): Promise<SpireServer> {
  const bin = await spireBinDir();
  const shipped = readFileSync(SHIPPED_SERVER_CONF, "utf8");
  const dir = mkdtempSync(join(tmpdir(), "fleetd-spire-"));
  const data = join(dir, "data");
  mkdirSync(data);
  const socketPath = join(dir, "private", "api.sock");
  const configFile = join(dir, "server.conf");
  const timeoutMs = opts.timeoutMs ?? 60_000;
  let proc: ManagedProcess | undefined;
  let port = 0;
  let configText = "";

  const launch = async (): Promise<void> => {
    const p = new ManagedProcess("spire-server", join(dir, "server.log"), join(bin, "spire-server"), ["run", "-config", configFile], { cwd: dir, env: cleanEnv() });
    proc = p;
    const client = new SpireServerClient({ socketPath, timeoutMs: 5000 });
    try {
      await waitFor("spire-server healthy on its admin socket and listening for agents", async () => (await client.health()) === "SERVING" && (await portOpen(port)), {
        timeoutMs,
        intervalMs: 200,
        abort: () => p.deadReason(),
      });
    } catch (e) {
      const died = p.exit !== undefined; // then the message has the log's tail already
      await p.stop();
      if (!died) (e as Error).message += `\n${p.tail()}`;
      throw e;
    } finally {
      client.close();
    }
  };

  try {
    for (let attempt = 1; ; attempt++) {
      port = await freePort();
      configText = renderSpireConf(
        shipped,
        {
          bind_address: "127.0.0.1",
          bind_port: String(port),
          socket_path: socketPath,
          data_dir: data,
          connection_string: opts.datastore?.connectionString ?? join(data, "datastore.sqlite3"),
          ...(opts.datastore ? { database_type: opts.datastore.type } : {}),
          keys_path: join(data, "keys.json"),
          devid_ca_path: opts.devidCaPath,
          endorsement_ca_path: opts.endorsementCaPath,
        },
        opts.datastore ? [...SERVER_CONF_SUBSTITUTABLE, "database_type"] : SERVER_CONF_SUBSTITUTABLE,
      );
      writeFileSync(configFile, configText);
      try {
        await launch();
        break;
      } catch (e) {
        // The port picked as free may have been taken in between: another port, a fresh start.
        if (attempt >= 3 || !/address already in use/.test(`${(e as Error).message}\n${proc?.tail() ?? ""}`)) throw e;
      }
    }
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }

  const trustDomain = confValue(configText, "trust_domain");
  const cli = async (...args: string[]) => {
    const r = await runProcess(join(bin, "spire-server"), [...args, "-socketPath", socketPath], { env: cleanEnv(), timeoutMs: 60_000 });
    return { code: r.code, stdout: r.stdout.toString("utf8"), stderr: r.stderr.toString("utf8") };
  };
  return {
    trustDomain,
    socketPath,
    port,
    dir,
    configFile,
    configText,
    process: () => proc as ManagedProcess,
    client: (o = {}) => new SpireServerClient({ socketPath, ...o }),
    cli,
    async bundlePem() {
      const r = await cli("bundle", "show", "-format", "pem");
      if (r.code !== 0 || !r.stdout.includes("BEGIN CERTIFICATE")) throw new Error(`spire-server bundle show: ${r.stderr || r.stdout}`);
      return r.stdout;
    },
    halt: async () => {
      await proc?.stop();
    },
    start: async () => {
      if (proc && !proc.exit) throw new Error("spire-server is running");
      await launch();
    },
    async stop() {
      await proc?.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The LDevID files the agent reads, as tink-action writes them (outputs.ts). */
export interface DevidFiles {
  /** PEM: the LDevID certificate, then the CA bundle. */
  cert: string;
  /** TPMT_PUBLIC of the LDevID key. */
  pub: string;
  /** Its TPM2B_PRIVATE payload. */
  priv: string;
}

export interface SpireAgentOptions {
  /** A Unix socket speaking the TPM command protocol (swtpm unixio, or tpmUnixSocket() in front of a TCP swtpm). */
  tpmSocketPath: string;
  devid: DevidFiles;
  timeoutMs?: number;
  /**
   * The agent's data_dir, kept across starts (not removed by stop) as a persistent volume would: a start that finds
   * a valid agent SVID there loads it and does not attest. Default: a fresh directory of this start.
   */
  dataDir?: string;
}

export interface SpireAgent {
  /** The Workload API socket. */
  readonly socketPath: string;
  readonly dir: string;
  readonly configFile: string;
  readonly configText: string;
  readonly process: ManagedProcess;
  stop(): Promise<void>;
}

/** Start spire-agent against `server`; resolves once it has attested and serves the Workload API. */
export async function startSpireAgent(server: SpireServer, opts: SpireAgentOptions): Promise<SpireAgent> {
  const bin = await spireBinDir();
  const shipped = readFileSync(SHIPPED_AGENT_CONF, "utf8");
  const dir = mkdtempSync(join(tmpdir(), "fleetd-spire-agent-"));
  const data = opts.dataDir ?? join(dir, "data");
  mkdirSync(data, { recursive: true });
  const bundle = join(dir, "bundle.pem");
  writeFileSync(bundle, await server.bundlePem());
  const socketPath = join(dir, "public", "api.sock");
  const configText = renderSpireConf(
    shipped,
    {
      data_dir: data,
      server_address: "127.0.0.1",
      server_port: String(server.port),
      socket_path: socketPath,
      trust_bundle_path: bundle,
      tpm_device_path: opts.tpmSocketPath,
      devid_cert_path: opts.devid.cert,
      devid_priv_path: opts.devid.priv,
      devid_pub_path: opts.devid.pub,
      directory: data,
    },
    AGENT_CONF_SUBSTITUTABLE,
  );
  if (confValue(configText, "trust_domain") !== server.trustDomain) throw new Error("agent.conf and server.conf name different trust domains");
  const configFile = join(dir, "agent.conf");
  writeFileSync(configFile, configText);
  const p = new ManagedProcess("spire-agent", join(dir, "agent.log"), join(bin, "spire-agent"), ["run", "-config", configFile], { cwd: dir, env: cleanEnv() });
  try {
    await waitFor(
      "spire-agent attested and serving the Workload API",
      async () => {
        if (!existsSync(socketPath)) return false;
        const r = await runProcess(join(bin, "spire-agent"), ["healthcheck", "-socketPath", socketPath], { env: cleanEnv(), timeoutMs: 10_000 });
        return r.code === 0;
      },
      { timeoutMs: opts.timeoutMs ?? 90_000, intervalMs: 300, abort: () => p.deadReason() },
    );
  } catch (e) {
    const died = p.exit !== undefined; // then the message has the log's tail already
    await p.stop();
    if (!died) (e as Error).message += `\n${p.tail()}`;
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  return {
    socketPath,
    dir,
    configFile,
    configText,
    process: p,
    async stop() {
      await p.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The inherited environment minus SPIRE's and gRPC's own knobs. */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (k.startsWith("SPIRE_") || k.startsWith("GRPC_") || k.startsWith("OTEL_")) continue;
    env[k] = v;
  }
  return env;
}
