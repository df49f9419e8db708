/**
 * A switch port that speaks LLDP, all on this machine: a network namespace holding one end of a veth pair and
 * Debian's lldpd configured as the switch (system name = the NetBox device, port ID = the NetBox interface,
 * one frame a second). The other end of the pair stays in this namespace; it is the machine's "boot
 * interface" for the action's own lldpd. No address is configured on either end: only LLDP frames cross it,
 * and nothing leaves the machine.
 *
 * Needs root (CAP_NET_ADMIN), iproute2 and lldpd (.ci/setup installs them).
 */
import { randomBytes } from "node:crypto";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { registerCleanup, runProcess, startDaemon, waitFor, type Daemon } from "./process.js";

export interface LldpSwitchPort {
  /** The machine-side interface (in this namespace). */
  iface: string;
  netns: string;
  /** The switch's control socket, to look at what it sends. */
  socket: string;
  stop(): Promise<void>;
}

async function ip(args: string[]): Promise<void> {
  const r = await runProcess("ip", args, { timeoutMs: 15_000 });
  if (r.code !== 0) throw new Error(`ip ${args.join(" ")} exited ${r.code}: ${r.stderr.toString().trim()}`);
}

/** `silent: true` leaves the far end without lldpd: a port whose switch sends no LLDP. */
export async function startLldpSwitchPort(opts: { device: string; port: string; txIntervalSeconds?: number; silent?: boolean }): Promise<LldpSwitchPort> {
  const id = randomBytes(3).toString("hex");
  const netns = `fleetd-sw-${id}`;
  const iface = `fl${id}m`;
  const dir = mkdtempSync(join(tmpdir(), "fleetd-lldp-switch-"));
  chmodSync(dir, 0o755); // lldpcli is setuid _lldpd: it must reach the socket
  const socket = join(dir, "lldpd.socket");
  const conf = join(dir, "lldpd.conf");
  writeFileSync(
    conf,
    [`configure system hostname ${opts.device}`, `configure lldp portidsubtype local ${opts.port}`, `configure lldp tx-interval ${opts.txIntervalSeconds ?? 1}`, ""].join("\n"),
  );
  let daemon: Daemon | undefined;
  const unregister = registerCleanup(() => {
    try {
      // best effort on abnormal exit: deleting the namespace removes both ends of the pair
      void runProcess("ip", ["netns", "del", netns]);
    } catch {
      // ignore
    }
  });
  const stop = async () => {
    await daemon?.stop();
    await runProcess("ip", ["netns", "del", netns], { timeoutMs: 15_000 });
    await runProcess("ip", ["link", "del", iface], { timeoutMs: 15_000 }); // normally gone with the namespace
    rmSync(dir, { recursive: true, force: true });
    unregister();
  };
  try {
    await ip(["netns", "add", netns]);
    await ip(["link", "add", iface, "type", "veth", "peer", "name", "swp1", "netns", netns]);
    await ip(["link", "set", iface, "up"]);
    await ip(["-n", netns, "link", "set", "swp1", "up"]);
    await ip(["-n", netns, "link", "set", "lo", "up"]);
    if (opts.silent) return { iface, netns, socket, stop };
    daemon = startDaemon("lldpd (switch)", "ip", ["netns", "exec", netns, "lldpd", "-d", "-u", socket, "-O", conf, "-I", "swp1"]);
    const d = daemon;
    await waitFor(
      "the switch's lldpd did not take its configuration",
      async () => {
        // lldpd applies -O at start, then resumes; until then it answers with its defaults.
        const r = await runProcess("lldpcli", ["-u", socket, "-f", "keyvalue", "show", "interfaces"], { timeoutMs: 5000 });
        const out = r.stdout.toString();
        return r.code === 0 && out.includes(`.chassis.name=${opts.device}`) && out.includes(`.port.local=${opts.port}`);
      },
      { timeoutMs: 20_000, abort: () => (d.hasExited() ? `lldpd exited: ${d.output()}` : undefined) },
    );
    return { iface, netns, socket, stop };
  } catch (e) {
    await stop().catch(() => undefined);
    throw e;
  }
}
