/**
 * A resource manager in front of an swtpm, behaving like the kernel's /dev/tpmrm0: transient objects a
 * client loaded are flushed when its connection closes. Debian's tpm2-abrmd 3.0 needs D-Bus; the harness runs
 * a private bus (`dbus-daemon` with its own config, socket in a temp dir; no systemd, no system bus) and a
 * private `tpm2-abrmd --session` on it. Clients use TCTI `tabrmd:bus_name=…,bus_type=session` with
 * DBUS_SESSION_BUS_ADDRESS from `env`.
 *
 * Sessions differ from the kernel RM: tabrmd keeps a client's saved sessions usable by later connections
 * (tpm2-tools' `tpm2_startauthsession -S file` then `-P session:file` in another process works); the kernel
 * flushes them when the file is closed.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { registerCleanup, startDaemon, waitFor, type Daemon } from "./process.js";
import { runTpm2, type Swtpm, type Tpm2Result, type Tpm2RunOptions, type Tpm2Runner } from "./swtpm.js";

export interface AbrmdOptions {
  /** D-Bus name the daemon owns; default com.intel.tss2.Tabrmd (the bus is private anyway). */
  busName?: string;
  /** tpm2-abrmd --max-transients (per client); default is the daemon's (27). */
  maxTransients?: number;
  startupTimeoutMs?: number;
}

export interface Abrmd extends Tpm2Runner {
  readonly busAddress: string;
  readonly busName: string;
  readonly pid: number;
  readonly busPid: number;
  /** Its temp dir (bus socket and config), removed by stop(). */
  readonly dir: string;
  stop(): Promise<void>;
}

const BUS_CONFIG = (socket: string) => `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=${socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`;

/** Start a private D-Bus and tpm2-abrmd in front of `swtpm`; stopped by its own stop() or by swtpm.stop(). */
export async function startAbrmd(swtpm: Swtpm, opts: AbrmdOptions = {}): Promise<Abrmd> {
  const timeoutMs = opts.startupTimeoutMs ?? 30_000;
  const dir = mkdtempSync(join(tmpdir(), "fleetd-abrmd-"));
  const unregisterDir = registerCleanup(() => rmSync(dir, { recursive: true, force: true }));
  const daemons: Daemon[] = [];
  const stopAll = async () => {
    for (const d of daemons.reverse()) await d.stop();
    rmSync(dir, { recursive: true, force: true });
    unregisterDir();
  };
  try {
    const socket = join(dir, "bus.sock");
    const config = join(dir, "bus.conf");
    writeFileSync(config, BUS_CONFIG(socket));
    const bus = startDaemon("dbus-daemon", "dbus-daemon", ["--config-file", config, "--nofork", "--nopidfile"]);
    daemons.push(bus);
    const busAddress = `unix:path=${socket}`;
    const env = { DBUS_SESSION_BUS_ADDRESS: busAddress };
    await waitFor(
      "private dbus-daemon did not start",
      async () => existsSync(socket),
      { timeoutMs, abort: () => (bus.hasExited() ? `dbus-daemon exited: ${bus.output().trim()}` : undefined) },
    );

    const busName = opts.busName ?? "com.intel.tss2.Tabrmd";
    const args = [
      "--session",
      `--dbus-name=${busName}`,
      `--tcti=${swtpm.tcti}`,
      "--flush-all",
      "--logger=stdout",
      ...(opts.maxTransients !== undefined ? [`--max-transients=${opts.maxTransients}`] : []),
      // tpm2-abrmd refuses to run as root unless told to; the harness runs as whoever runs the tests.
      ...(process.getuid?.() === 0 ? ["--allow-root"] : []),
    ];
    const abrmd = startDaemon("tpm2-abrmd", "tpm2-abrmd", args, { env: { ...process.env, ...env } });
    daemons.push(abrmd);
    const tcti = `tabrmd:bus_name=${busName},bus_type=session`;
    await waitFor(
      "tpm2-abrmd did not answer",
      async () => {
        await runTpm2(tcti, env, "getcap", ["properties-fixed"], { cwd: dir, timeoutMs: 10_000 });
        return true;
      },
      { timeoutMs, abort: () => (abrmd.hasExited() ? `tpm2-abrmd exited: ${abrmd.output().trim()}` : undefined) },
    );

    let stopping: Promise<void> | undefined;
    const handle: Abrmd = {
      tcti,
      env: { ...env, TPM2TOOLS_TCTI: tcti },
      busAddress,
      busName,
      pid: abrmd.pid,
      busPid: bus.pid,
      dir,
      tpm2(tool: string, toolArgs: readonly string[], o: Tpm2RunOptions = {}): Promise<Tpm2Result> {
        if (stopping) return Promise.reject(new Error(`tpm2-abrmd ${tcti} is stopped`));
        return runTpm2(tcti, env, tool, toolArgs, { ...o, cwd: o.cwd ?? swtpm.workDir });
      },
      stop() {
        stopping ??= stopAll();
        return stopping;
      },
    };
    swtpm.attach(handle);
    return handle;
  } catch (e) {
    await stopAll();
    throw e;
  }
}
