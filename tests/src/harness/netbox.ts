/**
 * A real NetBox on loopback for tests and the lab.
 *
 * `tests/scripts/netbox/install.sh` installs (once, cached under ~/.cache/fleetd/netbox/<version>-py<python>/)
 * PostgreSQL + Redis from Debian, NetBox from PyPI in a venv, and a migrated template data directory with an
 * admin user and a v2 API token. `startNetBox()` copies that template into a run directory of its own and
 * starts PostgreSQL, Redis, NetBox (`runserver --noreload`, one process; or gunicorn with workers, as production
 * runs it: `server: "gunicorn"`, the benchmark's choice) and one RQ worker (so webhooks are
 * really delivered), each on a free loopback port. `stop()` ends them and removes the run directory.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { ManagedProcess } from "./managedProcess.js";
import { ZYGOTE_ENV, zygoteFork, type NetBoxProcess } from "./netboxZygote.js";
import { freePort, portOpen, waitFor } from "./ports.js";

const repoRoot = resolve(fileURLToPath(import.meta.url), "../../../..");
export const NETBOX_SCRIPTS = join(repoRoot, "tests/scripts/netbox");
export const NETBOX_VERSION = process.env["NETBOX_VERSION"] ?? "4.7.3";

const Secrets = z.object({
  netboxVersion: z.string(),
  pgBin: z.string(),
  dbPassword: z.string().min(16),
  adminUser: z.string(),
  adminPassword: z.string(),
  tokenKey: z.string().length(12),
  tokenPlaintext: z.string().length(40),
  pepper: z.string().min(50),
  secretKey: z.string().min(50),
});

export interface NetBoxInstance {
  /** Base URL without trailing slash, e.g. http://127.0.0.1:41234 */
  url: string;
  /** The admin's v2 token as an Authorization header value: `Bearer nbt_<key>.<token>`. */
  authorization: string;
  adminUser: string;
  adminPassword: string;
  version: string;
  runDir: string;
  /** NetBox's Redis (its RQ queues), on 127.0.0.1: e.g. for a benchmark reading RQ's own job timestamps. */
  redis: { port: number; password: string };
  /** Stop and start only the RQ worker (webhook delivery), e.g. to let deliveries pile up. */
  stopWorker(): Promise<void>;
  startWorker(): Promise<void>;
  /**
   * Stop and start only NetBox's web server (same port; PostgreSQL and Redis keep running): an outage of the
   * API as fleetd sees it. `startWeb` returns once `/api/status/` answers 200 again.
   */
  stopWeb(): Promise<void>;
  startWeb(): Promise<void>;
  /** Runs `netbox <args>` (a management command) against this instance; returns stdout. */
  manage(args: string[]): string;
  stop(): Promise<void>;
}

export interface StartTimings {
  installMs: number;
  startMs: number;
}

/** Runs the installer (a no-op when the cache is complete) and returns the cache directory. */
export function installNetBox(): string {
  const res = spawnSync("bash", [join(NETBOX_SCRIPTS, "install.sh")], {
    env: { ...process.env, NETBOX_VERSION },
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
    maxBuffer: 64 * 1024 * 1024,
  });
  if (res.status !== 0) {
    throw new Error(`tests/scripts/netbox/install.sh failed (${res.status ?? res.signal}):\n${(res.stderr ?? "").slice(-4000)}`);
  }
  const dir = res.stdout.trim().split("\n").pop() ?? "";
  if (!dir) throw new Error("install.sh printed no cache directory");
  return dir;
}

function postgresIds(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim());
  const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim());
  return { uid, gid };
}

export let lastStartTimings: StartTimings | undefined;

/** How NetBox's web server runs: Django's `runserver` (tests; forked by the zygote when there is one) or gunicorn. */
export interface NetBoxServerOptions {
  /**
   * "runserver" (default): `netbox runserver --noreload`, one process, as the tests run it. "gunicorn": as
   * production runs it — gunicorn with NetBox's contrib/gunicorn.py (3 threads per worker, its timeouts) and
   * `workers` worker processes, always spawned (never forked by the zygote). Both write one line per request to
   * `<runDir>/netbox.log` with the request line in double quotes (`"GET /api/... HTTP/1.1"`), which is what the
   * benchmark's request counter reads; gunicorn's access log line is written once the answer is sent.
   */
  server?: "runserver" | "gunicorn";
  /** gunicorn's worker processes (default 2). */
  workers?: number;
}

export async function startNetBox(opts: { logLevel?: string } & NetBoxServerOptions = {}): Promise<NetBoxInstance> {
  const t0 = Date.now();
  const cache = installNetBox();
  const t1 = Date.now();
  const secrets = Secrets.parse(JSON.parse(readFileSync(join(cache, "template/secrets.json"), "utf8")));
  const runDir = mkdtempSync("/tmp/fleetd-netbox-");
  chmodSync(runDir, 0o755);
  const procs: NetBoxProcess[] = [];
  try {
    // PostgreSQL from a copy of the migrated template (cp -a keeps the postgres owner).
    execFileSync("cp", ["-a", join(cache, "template/pgdata"), join(runDir, "pgdata")]);
    const pgIds = postgresIds();
    const sock = join(runDir, "pgsock");
    mkdirSync(sock);
    if (pgIds) execFileSync("chown", [`${pgIds.uid}:${pgIds.gid}`, sock]);
    const [pgPort, redisPort, httpPort] = [await freePort(), await freePort(), await freePort()];
    const pg = new ManagedProcess("postgres", join(runDir, "postgres.log"), join(secrets.pgBin, "postgres"), [
      "-D", join(runDir, "pgdata"), "-p", String(pgPort), "-c", "listen_addresses=127.0.0.1",
      "-c", `unix_socket_directories=${sock}`, "-c", "fsync=off", "-c", "synchronous_commit=off",
      "-c", "full_page_writes=off", "-c", "max_connections=50",
    ], { ...(pgIds ?? {}), cwd: runDir });
    procs.push(pg);
    const redisPassword = redisPasswordOf(secrets);
    const redis = new ManagedProcess("redis", join(runDir, "redis.log"), "redis-server", [
      "--port", String(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
      "--dir", runDir, "--requirepass", redisPassword,
    ], { cwd: runDir });
    procs.push(redis);
    await waitFor("PostgreSQL", 30_000, async () => {
      const r = spawnSync(join(secrets.pgBin, "pg_isready"), ["-q", "-h", "127.0.0.1", "-p", String(pgPort)]);
      return r.status === 0;
    }, () => pg.deadReason());
    await waitFor("Redis", 15_000, () => portOpen(redisPort), () => redis.deadReason());

    const root = join(runDir, "root");
    for (const d of ["media", "reports", "scripts", "static"]) mkdirSync(join(root, d), { recursive: true });
    const venvBin = join(cache, "venv/bin");
    const env = netboxEnv(cache, secrets, { root, dbPort: pgPort, redisPort, logLevel: opts.logLevel ?? "WARNING" });
    const netboxBin = join(venvBin, "netbox");
    // `netbox <args>`: forked by the suite's NetBox zygote when there is one (netboxZygote.ts), else spawned
    const zygote = process.env[ZYGOTE_ENV];
    const command = async (name: string, log: string, args: string[]): Promise<NetBoxProcess> => {
      if (zygote) {
        try {
          return await zygoteFork(zygote, name, log, args, env, runDir);
        } catch (e) {
          process.stderr.write(`# NetBox zygote: ${(e as Error).message}; spawning ${name}\n`);
        }
      }
      return new ManagedProcess(name, log, netboxBin, args, { env, cwd: runDir });
    };
    const newWeb = async (): Promise<NetBoxProcess> => {
      const p =
        opts.server === "gunicorn"
          ? gunicorn(cache, env, runDir, httpPort, opts.workers ?? 2)
          : await command("netbox", join(runDir, "netbox.log"), ["runserver", `127.0.0.1:${httpPort}`, "--noreload", "--insecure", "--skip-checks"]);
      procs.push(p);
      return p;
    };
    let web = await newWeb();
    let worker: NetBoxProcess | undefined;
    const startWorker = async (): Promise<void> => {
      if (worker && !worker.exit) return;
      // rq's SimpleWorker runs each job in the worker process itself instead of forking a work horse per job:
      // webhooks are delivered the same way, one job at a time, with the same timeout, for about a third of
      // the CPU (measured: 30 object changes, 1.1 s of worker CPU forking, 0.33 s not), which on this 2-core
      // machine is time every other test file gets back.
      worker = await command("rqworker", join(runDir, "rqworker.log"), ["rqworker", "high", "default", "low", "--worker-class", "rq.worker.SimpleWorker"]);
      procs.push(worker);
    };
    await startWorker();
    const url = `http://127.0.0.1:${httpPort}`;
    const authorization = `Bearer nbt_${secrets.tokenKey}.${secrets.tokenPlaintext}`;
    let version = "";
    const webUp = () => waitFor("NetBox /api/status/", 120_000, async () => {
      const r = await fetch(`${url}/api/status/`, { headers: { authorization, accept: "application/json" } });
      if (r.status !== 200) return false;
      const body = z.object({ "netbox-version": z.string() }).parse(await r.json());
      version = body["netbox-version"];
      return true;
    }, () => web.deadReason());
    await webUp();
    lastStartTimings = { installMs: t1 - t0, startMs: Date.now() - t1 };
    writeFileSync(join(runDir, "instance.json"), JSON.stringify({ url, authorization, pid: process.pid }, null, 2));
    let stopped = false;
    return {
      redis: { port: redisPort, password: redisPassword },
      url, authorization, version, runDir,
      adminUser: secrets.adminUser,
      adminPassword: secrets.adminPassword,
      startWorker,
      async stopWorker() {
        if (worker) await worker.stop("SIGTERM", 15_000);
      },
      async stopWeb() {
        await web.stop("SIGTERM", 15_000);
      },
      async startWeb() {
        if (!web.exit) return;
        web = await newWeb();
        await webUp();
      },
      manage(args: string[]): string {
        return execFileSync(netboxBin, args, { env, cwd: runDir, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
      },
      async stop() {
        if (stopped) return;
        stopped = true;
        await stopAll(procs);
        if (!process.env["FLEETD_KEEP_NETBOX"]) rmSync(runDir, { recursive: true, force: true });
      },
    };
  } catch (e) {
    const logs = procs.map((p) => `--- ${p.name} ---\n${p.tail(15)}`).join("\n");
    await stopAll(procs);
    if (!process.env["FLEETD_KEEP_NETBOX"]) rmSync(runDir, { recursive: true, force: true });
    throw new Error(`${(e as Error).message}\n${logs}`);
  }
}

/**
 * NetBox under gunicorn as its documentation deploys it: `gunicorn --config contrib/gunicorn.py netbox.wsgi`
 * (the contrib file's threads, timeout and max_requests), bound to loopback with `workers` workers, and an
 * access log of one line per request: `<pid> "<request line>" <status> <µs>`. Static files are not served
 * (the API does not need them). Idle keep-alive connections are kept 75 s, as the reverse proxy production puts in
 * front of gunicorn keeps them (nginx's default): gunicorn's own 2 s is shorter than the 4 s Node's fetch reuses
 * an idle connection for, so a request sent just as gunicorn closes one fails (`fetch failed` — seen once here,
 * in `fleetd inventory apply`, before this setting). fleetd's NetBox client now sends a read that failed so once
 * more (shared/platform/src/netbox/client.ts); a write it cannot, so the setting stays.
 */
function gunicorn(cache: string, env: NodeJS.ProcessEnv, runDir: string, port: number, workers: number): NetBoxProcess {
  if (!Number.isInteger(workers) || workers < 1 || workers > 16) throw new Error(`gunicorn workers: ${workers} (1..16)`);
  const venv = join(cache, "venv");
  const site = readdirSync(join(venv, "lib")).find((d) => d.startsWith("python"));
  if (!site) throw new Error(`no python site-packages in ${venv}/lib`);
  const contrib = join(venv, "lib", site, "site-packages/netbox/_data/contrib/gunicorn.py");
  if (!existsSync(contrib)) throw new Error(`NetBox's ${contrib} is missing`);
  return new ManagedProcess("netbox", join(runDir, "gunicorn.log"), join(venv, "bin/gunicorn"), [
    "--config", contrib, "--bind", `127.0.0.1:${port}`, "--workers", String(workers), "--keep-alive", "75",
    "--access-logfile", join(runDir, "netbox.log"), "--access-logformat", '%(p)s "%(r)s" %(s)s %(D)s',
    "netbox.wsgi",
  ], { env: { ...env, DJANGO_SETTINGS_MODULE: "netbox.settings" }, cwd: runDir });
}

async function stopAll(procs: NetBoxProcess[]): Promise<void> {
  // Reverse order: worker and web first, then Redis, then PostgreSQL (SIGINT = fast shutdown). The run
  // directory is deleted next, so nothing needs the worker's warm shutdown, which waits out its ~5 s
  // dequeue poll: it is killed.
  for (const p of [...procs].reverse()) await p.stop(p.name === "postgres" ? "SIGINT" : p.name === "rqworker" ? "SIGKILL" : "SIGTERM");
}

export interface Postgres {
  port: number;
  /** The superuser the template was made with. */
  user: string;
  password: string;
  /** A libpq connection string for `database` (SPIRE's postgres datastore takes this form). */
  connectionString(database: string): string;
  /** CREATE DATABASE `name` (a database of its own per user of this server). */
  createDatabase(name: string): void;
  stop(): Promise<void>;
}

/**
 * The PostgreSQL of the NetBox harness alone (the same binaries and migrated template, the same settings), for
 * other programs that need one (SPIRE's postgres datastore in the benchmark): each gets a database of its own.
 */
export async function startPostgres(): Promise<Postgres> {
  const cache = installNetBox();
  const secrets = Secrets.parse(JSON.parse(readFileSync(join(cache, "template/secrets.json"), "utf8")));
  const runDir = mkdtempSync("/tmp/fleetd-postgres-");
  chmodSync(runDir, 0o755);
  execFileSync("cp", ["-a", join(cache, "template/pgdata"), join(runDir, "pgdata")]);
  const pgIds = postgresIds();
  const sock = join(runDir, "pgsock");
  mkdirSync(sock);
  if (pgIds) execFileSync("chown", [`${pgIds.uid}:${pgIds.gid}`, sock]);
  const port = await freePort();
  const pg = new ManagedProcess("postgres", join(runDir, "postgres.log"), join(secrets.pgBin, "postgres"), [
    "-D", join(runDir, "pgdata"), "-p", String(port), "-c", "listen_addresses=127.0.0.1",
    "-c", `unix_socket_directories=${sock}`, "-c", "fsync=off", "-c", "synchronous_commit=off",
    "-c", "full_page_writes=off", "-c", "max_connections=50",
  ], { ...(pgIds ?? {}), cwd: runDir });
  const stop = async () => {
    await pg.stop("SIGINT");
    rmSync(runDir, { recursive: true, force: true });
  };
  try {
    await waitFor("PostgreSQL", 30_000, async () => spawnSync(join(secrets.pgBin, "pg_isready"), ["-q", "-h", "127.0.0.1", "-p", String(port)]).status === 0, () => pg.deadReason());
  } catch (e) {
    await stop();
    throw e;
  }
  const user = "netbox";
  const password = secrets.dbPassword;
  return {
    port, user, password,
    connectionString: (database) => `dbname=${database} user=${user} password=${password} host=127.0.0.1 port=${port} sslmode=disable`,
    createDatabase(name) {
      if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`database name ${name}`);
      const r = spawnSync(join(secrets.pgBin, "psql"), ["-h", "127.0.0.1", "-p", String(port), "-U", user, "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c", `CREATE DATABASE ${name}`], {
        env: { ...process.env, PGPASSWORD: password }, encoding: "utf8",
      });
      if (r.status !== 0) throw new Error(`CREATE DATABASE ${name}: ${r.stderr}`);
    },
    stop,
  };
}

/** Redis's password for every test instance: derived from the template's database password (loopback only). */
function redisPasswordOf(secrets: z.infer<typeof Secrets>): string {
  return secrets.dbPassword.split("").reverse().join("");
}

/** The environment NetBox's configuration (fleetd_configuration.py) reads, for one instance. */
function netboxEnv(cache: string, secrets: z.infer<typeof Secrets>, o: { root: string; dbPort: number; redisPort: number; logLevel: string }): NodeJS.ProcessEnv {
  const venvBin = join(cache, "venv/bin");
  return {
    PATH: `${venvBin}:${process.env["PATH"] ?? "/usr/bin:/bin"}`,
    HOME: process.env["HOME"] ?? o.root,
    LANG: "C.UTF-8",
    NETBOX_ROOT: o.root,
    NETBOX_CONFIGURATION: "fleetd_configuration",
    PYTHONPATH: NETBOX_SCRIPTS,
    PYTHONUNBUFFERED: "1",
    FLEETD_NB_DB_PORT: String(o.dbPort),
    FLEETD_NB_DB_PASSWORD: secrets.dbPassword,
    FLEETD_NB_REDIS_PORT: String(o.redisPort),
    FLEETD_NB_REDIS_PASSWORD: redisPasswordOf(secrets),
    FLEETD_NB_SECRET_KEY: secrets.secretKey,
    FLEETD_NB_PEPPER: secrets.pepper,
    FLEETD_NB_LOG_LEVEL: o.logLevel,
  };
}

export interface NetBoxZygote {
  /** The socket to name in FLEETD_NETBOX_ZYGOTE. */
  socketPath: string;
  /** Wall time from the call until it was ready to fork (its one import of NetBox). */
  readyMs: number;
  stop(): Promise<void>;
}

/**
 * The suite's NetBox fork server (tests/scripts/netbox/zygote.py), ready once it has imported NetBox. Its
 * per-instance settings are placeholders: each fork points them at its own instance.
 */
export async function startNetBoxZygote(): Promise<NetBoxZygote> {
  const t0 = Date.now();
  const cache = installNetBox();
  const secrets = Secrets.parse(JSON.parse(readFileSync(join(cache, "template/secrets.json"), "utf8")));
  const dir = mkdtempSync("/tmp/fleetd-netbox-zygote-");
  const root = join(dir, "root");
  for (const d of ["media", "reports", "scripts", "static"]) mkdirSync(join(root, d), { recursive: true });
  const socketPath = join(dir, "zygote.sock");
  // placeholder ports: nothing connects before a fork points the settings at its instance
  const env = netboxEnv(cache, secrets, { root, dbPort: 1, redisPort: 1, logLevel: "WARNING" });
  const p = new ManagedProcess("netbox-zygote", join(dir, "zygote.log"), join(cache, "venv/bin/python3"), [join(NETBOX_SCRIPTS, "zygote.py"), socketPath], { env, cwd: dir });
  const stop = async () => {
    await p.stop("SIGTERM", 5000);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitFor("the NetBox zygote", 120_000, async () => p.tail(5).includes("netbox zygote ready"), () => p.deadReason());
  } catch (e) {
    await stop();
    throw e;
  }
  return { socketPath, readyMs: Date.now() - t0, stop };
}
