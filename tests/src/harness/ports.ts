/** Loopback helpers for real-platform harnesses: free ports, waiting for a port or an HTTP endpoint. */
import { createServer, connect } from "node:net";
import { mkdirSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/**
 * Loopback ports for the harnesses' servers, reserved across every test process of the machine.
 *
 * Why not "bind port 0 and close": that hands out ports from the kernel's ephemeral range, which every
 * outgoing connection of every process also draws from, and it forgets the port at once. When a harness stops a
 * server to restart it on the same port (NetBox's web server in the outage tests is down for half a minute), a
 * test file running beside it — or any client socket — could take that port meanwhile, and the restarted server
 * then fails to bind or, worse, the test talks to another file's server. So ports come from below the kernel's
 * ephemeral range (never handed out to client sockets), and each is reserved for the life of the process that
 * took it: a file `<dir>/<port>` created exclusively, holding the owner's pid and start time (a reservation of a
 * process that is gone is taken over). `FLEETD_PORT_DIR` overrides the directory.
 */
const PORT_DIR = process.env["FLEETD_PORT_DIR"] ?? "/tmp/fleetd-ports";
const reserved = new Set<number>();
process.on("exit", () => {
  for (const p of reserved) {
    try {
      unlinkSync(join(PORT_DIR, String(p)));
    } catch {
      /* already gone */
    }
  }
});

/** [lo, hi] below the kernel's ephemeral port range (net.ipv4.ip_local_port_range). */
function portRange(): [number, number] {
  let ephemeralLow = 32768;
  try {
    ephemeralLow = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]) || ephemeralLow;
  } catch {
    /* not Linux: the usual default */
  }
  const hi = Math.min(ephemeralLow - 1, 32767);
  return [Math.max(1025, Math.min(20000, hi - 4000)), hi];
}

/** This process's identity as the kernel sees it (pid + start time, so a reused pid is not mistaken for us). */
function ownerId(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return `${pid} ${stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]}`;
  } catch {
    return undefined;
  }
}
const SELF = ownerId(process.pid) ?? `${process.pid} ?`;

/** Reserve one port for this process; false when another live process holds it. */
function reserve(port: number): boolean {
  mkdirSync(PORT_DIR, { recursive: true, mode: 0o1777 });
  const path = join(PORT_DIR, String(port));
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(path, SELF, { flag: "wx" });
      reserved.add(port);
      return true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    }
    let holder = "";
    try {
      holder = readFileSync(path, "utf8");
    } catch {
      continue; // released meanwhile: try again
    }
    const pid = Number(holder.split(" ")[0]);
    if (Number.isInteger(pid) && pid > 0 && ownerId(pid) === holder) return false; // its owner is alive
    try {
      unlinkSync(path); // its owner is gone
    } catch {
      /* another process took it over first */
    }
  }
  return false;
}

function release(port: number): void {
  if (!reserved.delete(port)) return;
  try {
    unlinkSync(join(PORT_DIR, String(port)));
  } catch {
    /* already gone */
  }
}

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.once("error", () => resolve(false));
    srv.listen({ host: "127.0.0.1", port, exclusive: true }, () => srv.close(() => resolve(true)));
  });
}

/**
 * `n` consecutive loopback TCP ports (consecutive because the TSS swtpm TCTI looks for the control channel at
 * port + 1), reserved for this process until it exits, and free when checked.
 */
export async function reservePorts(n: number): Promise<number[]> {
  const [lo, hi] = portRange();
  for (let attempt = 0; attempt < 200; attempt++) {
    const base = lo + Math.floor(Math.random() * (hi - lo - n + 2));
    const ports = Array.from({ length: n }, (_, i) => base + i);
    const taken: number[] = [];
    for (const p of ports) {
      if (!reserve(p)) break;
      taken.push(p);
    }
    if (taken.length === n && (await Promise.all(ports.map(bindable))).every(Boolean)) return ports;
    taken.forEach(release);
  }
  throw new Error(`no ${n} consecutive free loopback ports in ${lo}-${hi} (reservations in ${PORT_DIR})`);
}

/** A TCP port on 127.0.0.1, free and reserved for this process (reservePorts). */
export async function freePort(): Promise<number> {
  return (await reservePorts(1))[0] as number;
}

export function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: "127.0.0.1", port });
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `probe` until it returns true; throws `what` (with the last error) after `timeoutMs`. */
export async function waitFor(what: string, timeoutMs: number, probe: () => Promise<boolean>, isDead?: () => string | undefined): Promise<void> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < end) {
    const dead = isDead?.();
    if (dead) throw new Error(`${what}: ${dead}`);
    try {
      if (await probe()) return;
    } catch (e) {
      last = e;
    }
    await sleep(200);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (last error: ${String(last)})` : ""}`);
}

/**
 * Polls `probe` until it returns a value (not undefined); a throw counts as "not yet". After `timeoutMs` it
 * throws `what` with the last error and, if given, `context()` (e.g. the processes' recent logs).
 */
export async function pollValue<T>(what: string, probe: () => Promise<T | undefined>, opts: { timeoutMs?: number; intervalMs?: number; context?: () => string } = {}): Promise<T> {
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const deadline = Date.now() + timeoutMs;
  let last = "";
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (e) {
      last = (e as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms${last ? ` (last error: ${last.slice(0, 500)})` : ""}${opts.context ? `\n${opts.context()}` : ""}`);
    await sleep(opts.intervalMs ?? 250);
  }
}
