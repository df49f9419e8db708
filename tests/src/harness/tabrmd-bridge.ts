/**
 * The real tpm2-abrmd resource manager in front of a raw swtpm, reachable by fleetd's own client: a private
 * dbus-daemon (socket in the swtpm's temp dir, no system bus), `tpm2-abrmd --session` on it, and
 * tabrmd-bridge.py, which turns each connection to a Unix socket into one abrmd connection (abrmd passes
 * connections as file descriptors over D-Bus, which Node cannot receive). Closing a client connection closes
 * its abrmd connection, and abrmd flushes that connection's transient objects, like /dev/tpmrm0.
 * tpm2-tools reach the same abrmd with `tcti` and `env`.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { RawSwtpm } from "./swtpm-raw.js";

export interface TabrmdBridge {
  /** Unix socket: each connection is a fresh abrmd connection. */
  readonly path: string;
  /** tpm2-tools TCTI for the same abrmd. */
  readonly tcti: string;
  readonly env: Record<string, string>;
  stop(): Promise<void>;
}

const BRIDGE = fileURLToPath(new URL("../../src/harness/tabrmd-bridge.py", import.meta.url));

function busConfig(socket: string): string {
  return `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=${socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy>
</busconfig>
`;
}

async function until(what: string, ok: () => boolean, child: () => string | undefined, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ok()) {
    const dead = child();
    if (dead) throw new Error(`${what}: ${dead}`);
    if (Date.now() > deadline) throw new Error(`${what}: not ready within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function startTabrmdBridge(swtpm: RawSwtpm): Promise<TabrmdBridge> {
  if (!swtpm.tcti) throw new Error("tpm2-abrmd needs the swtpm's TCP channels");
  const dir = swtpm.dir;
  const busSocket = join(dir, "bus.sock");
  const config = join(dir, "bus.conf");
  writeFileSync(config, busConfig(busSocket));
  const children: ChildProcess[] = [];
  const outputs = new Map<ChildProcess, string>();
  const start = (cmd: string, args: string[], env?: NodeJS.ProcessEnv) => {
    const c = spawn(cmd, args, { env: env ?? process.env, stdio: ["ignore", "pipe", "pipe"] });
    outputs.set(c, "");
    const add = (d: Buffer) => outputs.set(c, (outputs.get(c) ?? "") + d.toString());
    c.stdout?.on("data", add);
    c.stderr?.on("data", add);
    children.push(c);
    return c;
  };
  const exitedWith = (c: ChildProcess) => () => (c.exitCode !== null || c.signalCode !== null ? `exited: ${outputs.get(c) ?? ""}` : undefined);
  const stop = async () => {
    for (const c of children.reverse()) {
      if (c.exitCode === null && c.signalCode === null) {
        const gone = new Promise((r) => c.once("exit", r));
        c.kill("SIGTERM");
        await gone;
      }
    }
  };
  try {
    const bus = start("dbus-daemon", ["--config-file", config, "--nofork", "--nopidfile"]);
    await until("dbus-daemon", () => existsSync(busSocket), exitedWith(bus));
    const busAddress = `unix:path=${busSocket}`;
    const env = { DBUS_SESSION_BUS_ADDRESS: busAddress };
    const busName = "com.intel.tss2.Tabrmd";
    const args = ["--session", `--dbus-name=${busName}`, `--tcti=${swtpm.tcti}`, "--flush-all", ...(process.getuid?.() === 0 ? ["--allow-root"] : [])];
    const abrmd = start("tpm2-abrmd", args, { ...process.env, ...env });
    const path = join(dir, "abrmd.sock");
    const tcti = `tabrmd:bus_name=${busName},bus_type=session`;
    // abrmd is ready when tpm2-tools get an answer through it.
    for (let attempt = 0; ; attempt++) {
      const probe = spawn("tpm2_getcap", ["properties-fixed"], { env: { ...process.env, ...env, TPM2TOOLS_TCTI: tcti }, stdio: "ignore" });
      const code = await new Promise<number | null>((r) => probe.once("exit", r));
      if (code === 0) break;
      const dead = exitedWith(abrmd)();
      if (dead || attempt > 200) throw new Error(`tpm2-abrmd did not answer: ${dead ?? outputs.get(abrmd) ?? ""}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const bridge = start("python3", [BRIDGE, busAddress, busName, path], { ...process.env, ...env });
    await until("tabrmd bridge", () => (outputs.get(bridge) ?? "").includes("READY"), exitedWith(bridge));
    return { path, tcti, env, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}
