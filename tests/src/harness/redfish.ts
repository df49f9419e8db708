/**
 * A real Redfish BMC on loopback for tests and the lab: OpenStack's sushy-tools `sushy-emulator` (installed
 * by tests/scripts/sushy/install.sh, cached) with its fake systems driver (no libvirt: the emulated machine
 * lives in the emulator's state file). HTTPS with a fresh self-signed certificate (openssl CLI), HTTP basic
 * auth from an htpasswd file (bcrypt, the one format sushy accepts), one emulated system. Power changes take
 * effect 1–11 s after the request, as the fake driver simulates hardware.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { freeLoopbackPorts, registerCleanup, runProcess, startDaemon, waitFor, type Daemon } from "./process.js";
import { runSetupScript } from "./setupScript.js";


/** The sushy-tools venv; installs it on first use (tens of seconds, then cached). */
export function sushyVenv(): Promise<string> {
  return runSetupScript("tests/scripts/sushy/install.sh");
}

const SystemJson = z.object({
  Id: z.string(),
  PowerState: z.string(),
  Boot: z.object({
    BootSourceOverrideTarget: z.string().optional(),
    BootSourceOverrideMode: z.string().optional(),
    BootSourceOverrideEnabled: z.string().optional(),
  }).passthrough(),
}).passthrough();
export type RedfishSystem = z.infer<typeof SystemJson>;

export interface RedfishEmulator {
  /** https://<host>:<port> */
  readonly url: string;
  /** A loopback address (127.0.0.1 unless asked for another: several BMCs on one port, as a site's BMCs are). */
  readonly host: string;
  readonly port: number;
  readonly username: string;
  readonly password: string;
  /** The emulated system's Redfish Id (a UUID): /redfish/v1/Systems/<systemId>. */
  readonly systemId: string;
  /** The MAC of the emulated system's one NIC. */
  readonly mac: string;
  /** The self-signed certificate the emulator serves (PEM). */
  readonly certPem: string;
  /** GET the system resource (authenticated, certificate pinned). */
  system(): Promise<RedfishSystem>;
  /** Its PowerState: "On" or "Off". */
  powerState(): Promise<string>;
  /** Its boot override: target ("Pxe", "Hdd", "Cd", ...), mode ("UEFI" or "Legacy") and enabled. */
  bootSource(): Promise<{ target: string | undefined; mode: string | undefined; enabled: string | undefined }>;
  /** An authenticated request to the emulator; resolves with the status and body. */
  request(method: string, path: string, body?: unknown, auth?: { username: string; password: string } | null): Promise<{ status: number; body: string }>;
  /** The last output of the emulator. */
  logs(): string;
  stop(): Promise<void>;
}

export interface RedfishOptions {
  /** The emulated system's initial power state; default "Off". */
  powerState?: "On" | "Off";
  /** The NIC's MAC; default a random locally administered one. */
  mac?: string;
  /** Listen on this loopback address (127.x.y.z; default 127.0.0.1) and, with `port`, on that port. */
  host?: string;
  port?: number;
  timeoutMs?: number;
}

function randomMac(): string {
  const b = randomBytes(6);
  b[0] = ((b[0] ?? 0) & 0xfc) | 0x02; // locally administered, unicast
  return [...b].map((x) => x.toString(16).padStart(2, "0")).join(":");
}

/** Start sushy-emulator on a free loopback port (retried if the port is taken first). */
export async function startRedfishEmulator(opts: RedfishOptions = {}): Promise<RedfishEmulator> {
  const venv = await sushyVenv();
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(venv, opts);
    } catch (e) {
      if (attempt >= 3 || !/address already in use/i.test((e as Error).message)) throw e;
    }
  }
}

async function startOnce(venv: string, opts: RedfishOptions): Promise<RedfishEmulator> {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-redfish-"));
  const unregisterDir = registerCleanup(() => rmSync(dir, { recursive: true, force: true }));
  let daemon: Daemon | undefined;
  const stop = async () => {
    await daemon?.stop(5000);
    rmSync(dir, { recursive: true, force: true });
    unregisterDir();
  };
  try {
    const host = opts.host ?? "127.0.0.1";
    if (!/^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host)) throw new Error(`a BMC emulator listens on loopback only, not ${host}`);
    const port = opts.port ?? ((await freeLoopbackPorts(1)) as [number])[0];
    const username = "fleetd-bmc";
    const password = randomBytes(12).toString("base64url");
    const systemId = randomUUID();
    const mac = opts.mac ?? randomMac();

    const cert = await runProcess("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
      "-keyout", "bmc.key", "-out", "bmc.crt", "-days", "2", "-subj", "/CN=fleetd-test-bmc",
      "-addext", `subjectAltName=IP:${host}`, "-addext", "basicConstraints=critical,CA:FALSE"], { cwd: dir, timeoutMs: 30_000 });
    if (cert.code !== 0) throw new Error(`openssl req failed: ${cert.stderr.toString("utf8")}`);

    // bcrypt hash with the venv's own bcrypt (the library sushy checks it with); the password goes via stdin.
    const hash = await runProcess(join(venv, "bin/python"), ["-c",
      "import sys, bcrypt; print(bcrypt.hashpw(sys.stdin.buffer.read(), bcrypt.gensalt(rounds=4)).decode())"],
    { input: Buffer.from(password), timeoutMs: 30_000 });
    if (hash.code !== 0) throw new Error(`bcrypt hash failed: ${hash.stderr.toString("utf8")}`);
    writeFileSync(join(dir, "htpasswd"), `${username}:${hash.stdout.toString("utf8").trim()}\n`, { mode: 0o600 });

    const py = (v: unknown) => JSON.stringify(v); // a JSON string or list literal is a Python literal too
    writeFileSync(join(dir, "emulator.conf"), [
      `SUSHY_EMULATOR_LISTEN_IP = ${py(host)}`,
      `SUSHY_EMULATOR_LISTEN_PORT = ${port}`,
      `SUSHY_EMULATOR_SSL_CERT = ${py(join(dir, "bmc.crt"))}`,
      `SUSHY_EMULATOR_SSL_KEY = ${py(join(dir, "bmc.key"))}`,
      `SUSHY_EMULATOR_AUTH_FILE = ${py(join(dir, "htpasswd"))}`,
      `SUSHY_EMULATOR_STATE_DIR = ${py(join(dir, "state"))}`,
      "SUSHY_EMULATOR_FAKE_DRIVER = True",
      `SUSHY_EMULATOR_FAKE_SYSTEMS = [{"uuid": ${py(systemId)}, "name": "fleetd-test-node", "power_state": ${py(opts.powerState ?? "Off")}, "external_notifier": False, "nics": [{"mac": ${py(mac)}, "ip": "192.0.2.10"}]}]`,
      "",
    ].join("\n"));

    daemon = startDaemon("sushy-emulator", join(venv, "bin/sushy-emulator"), ["--config", join(dir, "emulator.conf")], {
      env: { ...process.env, PYTHONUNBUFFERED: "1" },
    });
    const d = daemon;
    const certPem = readFileSync(join(dir, "bmc.crt"), "utf8");
    const url = `https://${host}:${port}`;

    const req = (method: string, path: string, body?: unknown, auth: { username: string; password: string } | null = { username, password }) =>
      new Promise<{ status: number; body: string }>((res, rej) => {
        const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
        const headers: Record<string, string> = {};
        if (auth) headers.authorization = `Basic ${Buffer.from(`${auth.username}:${auth.password}`).toString("base64")}`;
        if (payload) headers["content-type"] = "application/json";
        const r = request({ host, port, path, method, ca: certPem, headers, timeout: 10_000 }, (resp) => {
          let text = "";
          resp.on("data", (b: Buffer) => (text += b.toString("utf8")));
          resp.on("end", () => res({ status: resp.statusCode ?? 0, body: text }));
        });
        r.on("timeout", () => r.destroy(new Error("timeout")));
        r.on("error", rej);
        r.end(payload);
      });

    await waitFor("sushy-emulator /redfish/v1/Systems", async () => (await req("GET", "/redfish/v1/Systems")).status === 200, {
      timeoutMs: opts.timeoutMs ?? 60_000, intervalMs: 200,
      abort: () => (d.hasExited() ? `sushy-emulator exited:\n${d.output().slice(-3000)}` : undefined),
    });

    const system = async () => {
      const r = await req("GET", `/redfish/v1/Systems/${systemId}`);
      if (r.status !== 200) throw new Error(`GET /redfish/v1/Systems/${systemId}: HTTP ${r.status}: ${r.body.slice(0, 500)}`);
      return SystemJson.parse(JSON.parse(r.body));
    };
    return {
      url, host, port, username, password, systemId, mac, certPem,
      system,
      powerState: async () => (await system()).PowerState,
      bootSource: async () => {
        const b = (await system()).Boot;
        return { target: b.BootSourceOverrideTarget, mode: b.BootSourceOverrideMode, enabled: b.BootSourceOverrideEnabled };
      },
      request: req,
      logs: () => d.output(),
      stop,
    };
  } catch (e) {
    const out = daemon?.output().slice(-2000) ?? "";
    await stop();
    throw new Error(`${(e as Error).message}${out ? `\n${out}` : ""}`);
  }
}
