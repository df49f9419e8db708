/**
 * podman as this project runs it (measured facts: shared/research/lab-machines.md, "Containers"): runc at
 * /usr/sbin/runc (crun refuses this kernel's hybrid cgroups), the cgroupfs manager, ulimits at or below the
 * sandbox's hard limits, k8s-file logs and a file events log — written once into a containers.conf that every
 * podman this project starts reads (CONTAINERS_CONF), so `podman run`, `podman build` and the Docker-compatible
 * service (whose containers ignore CLI flags) all get them. Image storage lives under the fleetd cache
 * (`$FLEETD_CACHE/podman`, default ~/.cache/fleetd/podman): a cold cache rebuilds every image.
 *
 * Used by the image build (tests/src/images/build.ts, `pnpm -s images`) and the tests: the one place these
 * settings are written. Helpers: run a container, start `podman system service` (the Docker API the Tinkerbell
 * agent's `docker` runtime speaks), start a local registry on loopback (Debian's docker-registry) and push to it.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync, readFileSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { request } from "node:http";
import { ManagedProcess } from "./managedProcess.js";
import { freePort, waitFor } from "./ports.js";
import { runProcess, type RunResult } from "./process.js";

/** The fleetd cache (`$FLEETD_CACHE`, default ~/.cache/fleetd), as the build scripts under tests/ pick it. */
export function fleetdCache(): string {
  return process.env["FLEETD_CACHE"] || join(process.env["HOME"] || homedir(), ".cache", "fleetd");
}

export const RUNC = "/usr/sbin/runc";

/** The containers.conf every podman of this project reads (see the file comment). */
export function containersConf(): string {
  return `# written by tests/src/harness/podman.ts
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"

[engine.runtimes]
runc = ["${RUNC}"]
`;
}

/** registries.conf: no search registries (a short name never reaches out), the given loopback registries insecure (plain HTTP). */
export function registriesConf(insecure: readonly string[]): string {
  return ['# written by tests/src/harness/podman.ts', "unqualified-search-registries = []", ...insecure.map((r) => `\n[[registry]]\nlocation = "${r}"\ninsecure = true`), ""].join("\n");
}

/** storage.conf: the image store under the fleetd cache (overlay; root runs native overlayfs here). */
export function storageConf(root: string): string {
  return `# written by tests/src/harness/podman.ts\n[storage]\ndriver = "overlay"\ngraphroot = "${join(root, "storage")}"\nrunroot = "${join(root, "run")}"\n`;
}

export interface Podman {
  /** `$FLEETD_CACHE/podman`. */
  readonly root: string;
  /** The environment podman runs with (CONTAINERS_CONF, CONTAINERS_REGISTRIES_CONF, CONTAINERS_STORAGE_CONF). */
  readonly env: NodeJS.ProcessEnv;
  /** `podman ARGS…` to completion (never throws for a non-zero exit). */
  run(args: readonly string[], opts?: { timeoutMs?: number; input?: Uint8Array }): Promise<RunResult>;
  /** `podman ARGS…`; throws with podman's stderr unless it exits 0; stdout as text. */
  must(args: readonly string[], opts?: { timeoutMs?: number }): Promise<string>;
}

/**
 * A podman over the project's configuration. `insecureRegistries`: loopback registries (`127.0.0.1:PORT`) it may
 * push to and pull from over plain HTTP. Each call writes its own configuration directory (a registry's port is
 * only known when it starts); the storage is shared, podman locks it. `storageRoot`: another image store (e.g. an
 * empty one, so a pull really transfers).
 */
export function podman(opts: { insecureRegistries?: readonly string[]; storageRoot?: string } = {}): Podman {
  const root = join(fleetdCache(), "podman");
  mkdirSync(join(root, "conf"), { recursive: true });
  const confDir = mkdtempSync(join(root, "conf", "c-"));
  writeFileSync(join(confDir, "containers.conf"), containersConf());
  writeFileSync(join(confDir, "registries.conf"), registriesConf(opts.insecureRegistries ?? []));
  writeFileSync(join(confDir, "storage.conf"), storageConf(opts.storageRoot ?? root));
  process.once("exit", () => rmSync(confDir, { recursive: true, force: true }));
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    CONTAINERS_CONF: join(confDir, "containers.conf"),
    CONTAINERS_REGISTRIES_CONF: join(confDir, "registries.conf"),
    CONTAINERS_STORAGE_CONF: join(confDir, "storage.conf"),
    // build contexts and layer blobs are staged here (podman's default, /var/tmp, may be small)
    TMPDIR: join(root, "tmp"),
  };
  mkdirSync(join(root, "tmp"), { recursive: true });
  const run = (args: readonly string[], o: { timeoutMs?: number; input?: Uint8Array } = {}) =>
    runProcess("podman", args, { env, timeoutMs: o.timeoutMs ?? 120_000, ...(o.input ? { input: o.input } : {}) });
  return {
    root,
    env,
    run,
    async must(args, o = {}) {
      const r = await run(args, o);
      if (r.code !== 0) throw new Error(`podman ${args.slice(0, 2).join(" ")} failed (${r.timedOut ? "timed out" : `exit ${r.code}`}): ${r.stderr.toString().trim().slice(-2000)}`);
      return r.stdout.toString();
    },
  };
}

export interface RunContainerOptions {
  /** `host` (the default: loopback servers of the test are reachable) or `none`. */
  network?: "host" | "none";
  env?: Record<string, string>;
  /** `HOST:CONTAINER[:ro]` bind mounts. */
  volumes?: string[];
  user?: string;
  entrypoint?: string;
  /** `--cap-drop` / `--cap-add` (e.g. `["ALL"]`, then exactly what a part needs). */
  capDrop?: string[];
  capAdd?: string[];
  /** `--device` (host device paths, same path inside). */
  devices?: string[];
  /** `--security-opt` (e.g. `unmask=/sys/dev/block`). */
  securityOpts?: string[];
  timeoutMs?: number;
}

function runArgs(image: string, args: readonly string[], o: RunContainerOptions): string[] {
  return [
    "run", "--rm", `--network=${o.network ?? "host"}`,
    ...Object.entries(o.env ?? {}).flatMap(([k, v]) => ["--env", `${k}=${v}`]),
    ...(o.volumes ?? []).flatMap((v) => ["--volume", v]),
    ...(o.user ? ["--user", o.user] : []),
    ...(o.capDrop ?? []).flatMap((c) => ["--cap-drop", c]),
    ...(o.capAdd ?? []).flatMap((c) => ["--cap-add", c]),
    ...(o.devices ?? []).flatMap((d) => ["--device", d]),
    ...(o.securityOpts ?? []).flatMap((d) => ["--security-opt", d]),
    ...(o.entrypoint ? ["--entrypoint", o.entrypoint] : []),
    image, ...args,
  ];
}

/** Runs `image ARGS…` to completion (`podman run --rm`); the exit code is the container's. */
export function runContainer(p: Podman, image: string, args: readonly string[], o: RunContainerOptions = {}): Promise<RunResult> {
  return p.run(runArgs(image, args, o), { timeoutMs: o.timeoutMs ?? 120_000 });
}

/** A container started in the background (a server): its podman process is managed (killed with the test). */
export interface BackgroundContainer {
  readonly name: string;
  readonly proc: ManagedProcess;
  logs(): string;
  stop(): Promise<void>;
}

export function startContainer(p: Podman, name: string, logFile: string, image: string, args: readonly string[], o: RunContainerOptions = {}): BackgroundContainer {
  const [, ...rest] = runArgs(image, args, o);
  // attached `podman run`: the container lives as long as this process, whose group the harness kills
  const proc = new ManagedProcess(name, logFile, "podman", ["run", "--name", name, "--replace", "--stop-timeout", "5", ...rest], { env: p.env });
  return {
    name,
    proc,
    logs: () => proc.tail(60),
    async stop() {
      await p.run(["stop", "--time", "5", name], { timeoutMs: 30_000 });
      await proc.stop("SIGTERM", 10_000);
      await p.run(["rm", "--force", "--ignore", name], { timeoutMs: 30_000 });
    },
  };
}

/** A GET over a Unix socket (the Docker API) or TCP: status and body. */
function httpGet(target: { socketPath: string; path: string } | { url: string }): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = "url" in target ? request(target.url) : request({ socketPath: target.socketPath, path: target.path });
    req.on("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.setTimeout(5000, () => req.destroy(new Error("timeout")));
    req.end();
  });
}

export interface PodmanService {
  /** Path of the Docker-compatible API's socket (`unix://` + this for DOCKER_HOST). */
  readonly socketPath: string;
  readonly proc: ManagedProcess;
  stop(): Promise<void>;
}

/**
 * `podman system service --time=0 unix://SOCK`: the Docker-compatible API (1.41) over this podman's configuration
 * (the containers it creates get runc, cgroupfs and the ulimits from containers.conf; pulls read the
 * registries.conf, so a loopback registry passed to `podman()` is insecure for it too). Waits for `/_ping`.
 */
export async function startPodmanService(p: Podman, dir: string): Promise<PodmanService> {
  mkdirSync(dir, { recursive: true });
  const socketPath = join(dir, "podman.sock");
  const proc = new ManagedProcess("podman-service", join(dir, "podman-service.log"), "podman", ["system", "service", "--time=0", `unix://${socketPath}`], { env: p.env });
  await waitFor("podman system service /_ping", 60_000, async () => (await httpGet({ socketPath, path: "/_ping" })).body === "OK", () => proc.deadReason());
  return { socketPath, proc, stop: () => proc.stop() };
}

export interface LocalRegistry {
  /** `127.0.0.1:PORT` (the reference prefix; plain HTTP). */
  readonly host: string;
  readonly proc: ManagedProcess;
  stop(): Promise<void>;
}

/** Debian's `docker-registry serve config.yml` (distribution 2.8) on 127.0.0.1, a free port, storage in `dir`. */
export async function startRegistry(dir: string): Promise<LocalRegistry> {
  mkdirSync(join(dir, "data"), { recursive: true });
  const port = await freePort();
  const config = join(dir, "config.yml");
  writeFileSync(
    config,
    [
      "version: 0.1",
      "log: { level: info, accesslog: { disabled: true } }",
      `storage: { filesystem: { rootdirectory: ${join(dir, "data")} }, delete: { enabled: true } }`,
      `http: { addr: "127.0.0.1:${port}", headers: { X-Content-Type-Options: [nosniff] } }`,
      "",
    ].join("\n"),
  );
  const proc = new ManagedProcess("docker-registry", join(dir, "registry.log"), "docker-registry", ["serve", config], {});
  await waitFor("docker-registry /v2/", 30_000, async () => (await httpGet({ url: `http://127.0.0.1:${port}/v2/` })).status === 200, () => proc.deadReason());
  return { host: `127.0.0.1:${port}`, proc, stop: () => proc.stop() };
}

/**
 * Pushes a local image to `ref` (in a registry this podman treats as insecure) and returns the manifest digest
 * the registry holds (`podman push --digestfile`).
 */
export async function pushImage(p: Podman, image: string, ref: string): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-push-"));
  try {
    const file = join(dir, "digest");
    await p.must(["push", "--quiet", "--digestfile", file, image, ref], { timeoutMs: 300_000 });
    return readFileSync(file, "utf8").trim();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
