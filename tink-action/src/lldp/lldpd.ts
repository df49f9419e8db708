/**
 * Reading LLDP on the boot interface. Node has no AF_PACKET sockets without a native addon, so the image ships
 * Debian's lldpd: it is started here in receive-only mode (`-r`, it sends nothing) on that one interface, with
 * its own control socket, and `lldpctl -f json0` is polled until a neighbour shows up or the wait is over (a
 * switch sends LLDP every 30 s by default). lldpd is stopped afterwards. No lldpd, no neighbour, or an
 * ambiguous answer: the claim is null (see json0.ts).
 *
 * lldpcli is setuid `_lldpd` on Debian, so the socket's directory must be searchable by that user (0755).
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { IFNAME } from "./ifname.js";
import { lldpFromLldpctlOutput, type LldpReading } from "./json0.js";

export interface LldpOptions {
  iface: string;
  waitMs: number;
  lldpd?: string;
  lldpcli?: string;
  pollMs?: number;
  /** Progress lines (no secrets here: LLDP is what the switch tells everyone). */
  onProgress?: (msg: string) => void;
}

function run(file: string, args: string[], timeoutMs = 5000): Promise<{ ok: boolean; stdout: string; stderr: string; missing: boolean }> {
  return new Promise((res) => {
    execFile(file, args, { timeout: timeoutMs, maxBuffer: 4 << 20, encoding: "utf8" }, (err, stdout, stderr) => {
      const code = (err as NodeJS.ErrnoException | null)?.code;
      res({ ok: !err, stdout, stderr, missing: code === "ENOENT" });
    });
  });
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export async function readLldp(opts: LldpOptions): Promise<LldpReading> {
  if (!IFNAME.test(opts.iface)) return { lldp: null, reason: `not an interface name: ${JSON.stringify(opts.iface)}` };
  const lldpd = opts.lldpd ?? "lldpd";
  const lldpcli = opts.lldpcli ?? "lldpcli";
  const dir = mkdtempSync(join(tmpdir(), "fleetd-lldp-"));
  chmodSync(dir, 0o755);
  const socket = join(dir, "lldpd.socket");
  const conf = join(dir, "lldpd.conf");
  writeFileSync(conf, "");
  let child: ChildProcess | undefined;
  let exited: { code: number | null; error?: string } | undefined;
  let tail = "";
  try {
    // -d foreground, -r receive-only, -I only the boot interface, -u our socket, -O our (empty) configuration.
    child = spawn(lldpd, ["-d", "-r", "-I", opts.iface, "-u", socket, "-O", conf], { stdio: ["ignore", "pipe", "pipe"] });
    const keep = (b: Buffer) => void (tail = (tail + b.toString("utf8")).slice(-2000));
    child.stdout?.on("data", keep);
    child.stderr?.on("data", keep);
    child.once("error", (e) => {
      exited = { code: null, error: (e as NodeJS.ErrnoException).code === "ENOENT" ? `${lldpd} is not installed` : e.message };
    });
    child.once("exit", (code) => {
      exited ??= { code };
    });
    const started = Date.now();
    const deadline = started + opts.waitMs;
    let told = started;
    let resumed = false;
    let last: LldpReading = { lldp: null, reason: `no LLDP neighbour on ${opts.iface} within ${Math.round(opts.waitMs / 1000)} s` };
    for (;;) {
      if (exited) {
        return { lldp: null, reason: exited.error ?? `lldpd exited (${exited.code}) before a neighbour was seen: ${tail.trim().split("\n").slice(-3).join(" | ") || "no output"}` };
      }
      if (existsSync(socket)) {
        // lldpd starts paused until its configuration has been applied; resuming twice is harmless.
        if (!resumed) {
          const r = await run(lldpcli, ["-u", socket, "resume"]);
          if (r.missing) return { lldp: null, reason: `${lldpcli} is not installed` };
          resumed = r.ok;
        }
        const r = await run(lldpcli, ["-u", socket, "-f", "json0", "show", "neighbors", "ports", opts.iface]);
        if (r.ok) {
          const reading = lldpFromLldpctlOutput(r.stdout, opts.iface);
          if (reading.lldp || /different LLDP neighbours/.test(reading.reason)) return reading;
          if (!/^no LLDP neighbour/.test(reading.reason)) last = reading;
        }
      }
      if (Date.now() >= deadline) return last;
      await sleep(Math.min(opts.pollMs ?? 500, Math.max(0, deadline - Date.now())));
      if (Date.now() - told >= 5000) {
        told = Date.now();
        opts.onProgress?.(`waiting for LLDP on ${opts.iface} (${Math.round((told - started) / 1000)} s of ${Math.round(opts.waitMs / 1000)} s)`);
      }
    }
  } finally {
    if (child && !exited && child.exitCode === null && child.signalCode === null) {
      const gone = new Promise<void>((res) => child?.once("exit", () => res()));
      child.kill("SIGTERM");
      const t = setTimeout(() => child?.kill("SIGKILL"), 2000);
      await gone;
      clearTimeout(t);
    }
    rmSync(dir, { recursive: true, force: true });
  }
}
