/**
 * The lab's netboot network, all on this machine: a network namespace the harness creates, holding a bridge (the
 * top-of-rack switch's boot VLAN, LAB_SEGMENT.0/24 — the same addresses in every lab: each lab has its own
 * namespace, so they never meet) with
 *  - dnsmasq on the bridge at LAB_SEGMENT.1: DHCP (no router, no DNS) and TFTP, each machine served from its own
 *    directory (`--tftp-unique-root=mac`): the image its firmware boots, then what its HookOS fetches (its job and
 *    the action bundle). A machine whose MAC has no directory gets nothing;
 *  - one switch port per machine: a tap QEMU opens, with an LLDP speaker (Debian's lldpd, as in
 *    tests/src/harness/lldp.ts) that says which switch and port NetBox cables the machine to;
 *  - services of the host (the attestation server, which also serves `/talos/config`) at LAB_SEGMENT.1:PORT:
 *    `expose()` starts an HTTP forwarder on a Unix socket in the host namespace and socat in the lab's namespace
 *    from that TCP port to the socket. There is no interface, address or route between the namespace and the
 *    host: a machine reaches exactly the forwarded ports and nothing beyond, and the addresses machines use are
 *    fixed (the lab OS image names its config URL: tests/scripts/vm/build.sh). `exposeTcp()` does the same for
 *    a plain TCP service (SPIRE's agent port: gRPC over TLS, end to end between the machine and the service)
 *    with a byte-for-byte relay that counts connections instead of the HTTP forwarder.
 *
 * Why dnsmasq and not Tinkerbell's Smee: the lab boots the firmware's own PXE client straight into the signed UKI.
 * Smee's TFTP serves its embedded iPXE builds (unsigned: a Secure Boot firmware refuses them unless the lab signs
 * one), its DHCP answers machines that have a Tinkerbell Hardware object (or every machine, with one static
 * script, in auto-proxy mode), and it hands HookOS its kernel command line (`worker_id=…`) through an iPXE script —
 * which a signed UKI ignores (its command line is part of what was signed), so the lab HookOS names itself by its
 * boot MAC, the agent ID's default. Chaining through a lab-signed iPXE also costs about 18 s per boot under TCG
 * (lab-machines.md: iPXE's own DHCP). The Smee path stays open: `serverAddress` is where a machine's DHCP and boot
 * file come from either way.
 *
 * Needs root (CAP_NET_ADMIN), iproute2, dnsmasq-base, socat and lldpd (.ci/setup installs them).
 */
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, request, type IncomingHttpHeaders, type Server } from "node:http";
import { connect, createServer as createNetServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { registerCleanup, runProcess, startDaemon, waitFor, type Daemon } from "../harness/process.js";

export interface SwitchPort {
  /** The tap's name inside the namespace (QEMU's `-netdev tap,ifname=`). */
  readonly tap: string;
  /** What the port's LLDP says (undefined: a port whose switch sends no LLDP). */
  readonly lldp: { device: string; port: string } | undefined;
  stop(): Promise<void>;
}

/** One request a machine made through a gateway, as forwarded. */
export interface GatewayRequest {
  method: string;
  path: string;
  status: number;
  requestBody: Buffer;
  responseBody: Buffer;
}

/** A plain TCP service of the host exposed to the machines (exposeTcp). */
export interface TcpGateway {
  /** host:port as machines reach it. */
  readonly address: string;
  /** Connections relayed so far (each to the service). */
  connections(): number;
  close(): Promise<void>;
}

/** The boot network's segment (a /24) in every lab: the boot server is .1, machines lease .100–.199. */
export const LAB_SEGMENT = "10.99.0";
/** The port machines reach the attestation server on (its API and `/talos/config`): http://10.99.0.1. */
export const LAB_API_PORT = 80;
/** Where machines reach the lab registry (plain HTTP; the HookOS's agent mode pulls action images there): 10.99.0.1:5000. */
export const LAB_REGISTRY_PORT = 5000;
/** Where machines reach tink-server's gRPC (plaintext; the HookOS's agent mode): 10.99.0.1:42113, upstream's port. */
export const LAB_TINK_GRPC_PORT = 42113;

export interface Gateway {
  /** The URL machines use (the boot server's address, the exposed port). */
  readonly url: string;
  /** Every request forwarded so far, in order. */
  readonly requests: readonly GatewayRequest[];
  close(): Promise<void>;
}

export interface BootNetwork {
  readonly netns: string;
  /** dnsmasq's address: DHCP server, TFTP server (the machines' "boot server"), and where exposed services are. */
  readonly serverAddress: string;
  readonly dir: string;
  /** Files (name → content, or a file to copy) TFTP serves to the machine with this MAC, and only to it. */
  serveTo(mac: string, files: Record<string, string | Uint8Array | { copyOf: string }>): void;
  /** Stops serving these files to the machine with this MAC (its boot file: its firmware's PXE then fails over to the disk). */
  unserve(mac: string, names: readonly string[]): void;
  /** Whether TFTP serves `name` to the machine with this MAC. */
  serves(mac: string, name: string): boolean;
  addPort(opts?: { lldp?: { device: string; port: string } }): Promise<SwitchPort>;
  /** `target` (http://127.0.0.1:PORT on the host) at serverAddress:`port` for the machines, recording what passes. */
  expose(target: string, port: number): Promise<Gateway>;
  /** The TCP service at `target` (127.0.0.1:PORT on the host) at serverAddress:`port`, relayed byte for byte. */
  exposeTcp(target: string, port: number): Promise<TcpGateway>;
  /** dnsmasq's log so far (DHCP and TFTP, for diagnostics). */
  log(): string;
  stop(): Promise<void>;
}

async function ip(args: string[]): Promise<void> {
  const r = await runProcess("ip", args, { timeoutMs: 15_000 });
  if (r.code !== 0) throw new Error(`ip ${args.join(" ")} exited ${r.code}: ${r.stderr.toString().trim()}`);
}

/** dnsmasq's per-MAC TFTP directory name: lowercase, zero-padded, dash-separated. */
export function tftpDirOf(mac: string): string {
  const m = mac.toLowerCase();
  if (!/^([0-9a-f]{2}:){5}[0-9a-f]{2}$/.test(m)) throw new Error(`not a MAC address: ${mac}`);
  return m.replaceAll(":", "-");
}

export async function startBootNetwork(opts: { bootFile?: string } = {}): Promise<BootNetwork> {
  const id = randomBytes(3).toString("hex");
  const netns = `fleetd-vm-${id}`;
  const dir = mkdtempSync(join(tmpdir(), "fleetd-bootnet-"));
  chmodSync(dir, 0o755); // dnsmasq serves TFTP as nobody; lldpcli is setuid _lldpd
  const tftpRoot = join(dir, "tftp");
  mkdirSync(tftpRoot, { mode: 0o755 });
  const prefix = LAB_SEGMENT;
  const serverAddress = `${prefix}.1`;
  const daemons: Daemon[] = [];
  const ports: SwitchPort[] = [];
  const gateways: { close(): Promise<void> }[] = [];
  const unregister = registerCleanup(() => {
    // best effort on abnormal exit: deleting the namespace removes the bridge and the taps
    void runProcess("ip", ["netns", "del", netns]);
    rmSync(dir, { recursive: true, force: true });
  });
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    for (const g of gateways) await g.close();
    for (const p of ports) await p.stop();
    for (const d of daemons) await d.stop();
    await runProcess("ip", ["netns", "del", netns], { timeoutMs: 15_000 });
    rmSync(dir, { recursive: true, force: true });
    unregister();
  };
  const dnsmasqLog = join(dir, "dnsmasq.log");
  try {
    await ip(["netns", "add", netns]);
    await ip(["-n", netns, "link", "set", "lo", "up"]);
    await ip(["-n", netns, "link", "add", "br0", "type", "bridge"]);
    await ip(["-n", netns, "addr", "add", `${serverAddress}/24`, "dev", "br0"]);
    await ip(["-n", netns, "link", "set", "br0", "up"]);

    const dnsmasq = startDaemon("dnsmasq (boot network)", "ip", [
      "netns",
      "exec",
      netns,
      "dnsmasq",
      "--keep-in-foreground",
      `--log-facility=${dnsmasqLog}`,
      "--log-dhcp",
      "--conf-file=/dev/null",
      "--no-resolv",
      "--no-hosts",
      "--port=0", // no DNS
      "--interface=br0",
      "--bind-interfaces",
      `--dhcp-range=${prefix}.100,${prefix}.199,255.255.255.0,1h`,
      "--dhcp-option=option:router", // empty: no router, nothing beyond the segment
      "--dhcp-option=option:dns-server",
      "--dhcp-authoritative",
      `--dhcp-leasefile=${join(dir, "leases")}`,
      `--pid-file=${join(dir, "dnsmasq.pid")}`,
      `--dhcp-boot=${opts.bootFile ?? "boot.efi"}`,
      "--enable-tftp",
      `--tftp-root=${tftpRoot}`,
      "--tftp-unique-root=mac",
    ]);
    daemons.push(dnsmasq);
    await waitFor(
      "dnsmasq did not start",
      async () => {
        try {
          return /started, version .*DHCP|DHCP, IP range/.test(readFileSync(dnsmasqLog, "utf8"));
        } catch {
          return false;
        }
      },
      { timeoutMs: 20_000, abort: () => (dnsmasq.hasExited() ? `dnsmasq exited: ${dnsmasq.output()}` : undefined) },
    );
  } catch (e) {
    await stop().catch(() => undefined);
    throw e;
  }

  /** socat in the namespace: TCP serverAddress:port → the host-side Unix socket `socket` (one child per connection). */
  const relayInto = async (socket: string, port: number): Promise<void> => {
    const relay = startDaemon(`socat (boot network :${port})`, "ip", [
      "netns",
      "exec",
      netns,
      "socat",
      `TCP-LISTEN:${port},bind=${serverAddress},reuseaddr,fork`,
      `UNIX-CONNECT:${socket}`,
    ]);
    daemons.push(relay);
    await waitFor(
      `socat did not listen on ${serverAddress}:${port}`,
      async () => (await runProcess("ip", ["netns", "exec", netns, "ss", "-Htln", `sport = :${port}`])).stdout.toString().includes(`${serverAddress}:${port}`),
      { timeoutMs: 20_000, abort: () => (relay.hasExited() ? `socat exited: ${relay.output()}` : undefined) },
    );
  };

  let portSeq = 0;
  return {
    netns,
    serverAddress,
    dir,
    serveTo(mac, files) {
      const d = join(tftpRoot, tftpDirOf(mac));
      mkdirSync(d, { recursive: true, mode: 0o755 });
      chmodSync(d, 0o755);
      for (const [name, content] of Object.entries(files)) {
        if (!/^[A-Za-z0-9._-]+$/.test(name)) throw new Error(`not a plain file name: ${name}`);
        const data = typeof content === "object" && "copyOf" in content ? readFileSync(content.copyOf) : content;
        writeFileSync(join(d, name), data, { mode: 0o644 });
      }
    },
    unserve(mac, names) {
      for (const name of names) {
        if (!/^[A-Za-z0-9._-]+$/.test(name)) throw new Error(`not a plain file name: ${name}`);
        rmSync(join(tftpRoot, tftpDirOf(mac), name), { force: true });
      }
    },
    serves: (mac, name) => /^[A-Za-z0-9._-]+$/.test(name) && existsSync(join(tftpRoot, tftpDirOf(mac), name)),
    async addPort(o = {}) {
      const tap = `tap${portSeq++}`;
      await ip(["-n", netns, "tuntap", "add", "dev", tap, "mode", "tap"]);
      await ip(["-n", netns, "link", "set", tap, "master", "br0"]);
      await ip(["-n", netns, "link", "set", tap, "up"]);
      let speaker: Daemon | undefined;
      if (o.lldp) {
        const pdir = join(dir, `lldp-${tap}`);
        mkdirSync(pdir, { mode: 0o755 });
        const socket = join(pdir, "lldpd.socket");
        const conf = join(pdir, "lldpd.conf");
        writeFileSync(conf, [`configure system hostname ${o.lldp.device}`, `configure lldp portidsubtype local ${o.lldp.port}`, "configure lldp tx-interval 1", ""].join("\n"));
        const d = startDaemon(`lldpd (switch port ${o.lldp.port})`, "ip", ["netns", "exec", netns, "lldpd", "-d", "-u", socket, "-O", conf, "-I", tap]);
        speaker = d;
        const want = o.lldp;
        await waitFor(
          "the switch port's lldpd did not take its configuration",
          async () => {
            const r = await runProcess("lldpcli", ["-u", socket, "-f", "keyvalue", "show", "configuration"], { timeoutMs: 5000 });
            return r.code === 0 && r.stdout.toString().includes(want.device);
          },
          { timeoutMs: 20_000, abort: () => (d.hasExited() ? `lldpd exited: ${d.output()}` : undefined) },
        );
      }
      const port: SwitchPort = {
        tap,
        lldp: o.lldp,
        async stop() {
          await speaker?.stop();
          await runProcess("ip", ["-n", netns, "link", "del", tap], { timeoutMs: 15_000 });
        },
      };
      ports.push(port);
      return port;
    },
    async expose(target, port) {
      const socket = join(dir, `gateway-${port}.sock`);
      const g = await startGateway(socket, target);
      await relayInto(socket, port);
      const exposed: Gateway = { url: `http://${serverAddress}${port === 80 ? "" : `:${port}`}`, requests: g.requests, close: g.close };
      gateways.push(exposed);
      return exposed;
    },
    async exposeTcp(target, port) {
      const socket = join(dir, `gateway-${port}.sock`);
      const g = await startTcpRelay(socket, target);
      await relayInto(socket, port);
      const exposed: TcpGateway = { address: `${serverAddress}:${port}`, connections: g.connections, close: g.close };
      gateways.push(exposed);
      return exposed;
    },
    log: () => {
      try {
        return readFileSync(dnsmasqLog, "utf8");
      } catch {
        return "";
      }
    },
    stop,
  };
}

/** Hop-by-hop headers a forwarder must not pass on (RFC 9110 §7.6.1). */
const HOP = new Set(["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer", "host"]);

function forwardable(h: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined && !HOP.has(k)) out[k] = v;
  return out;
}

/** An HTTP forwarder on the Unix socket `socket` to `target` (a loopback http:// service). */
async function startGateway(socket: string, target: string): Promise<Pick<Gateway, "requests" | "close">> {
  const to = new URL(target);
  if (to.protocol !== "http:" || !["127.0.0.1", "localhost"].includes(to.hostname)) throw new Error(`a gateway forwards to a loopback http:// service, not ${target}`);
  const requests: GatewayRequest[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const requestBody = Buffer.concat(chunks);
      const up = request(
        { host: to.hostname, port: to.port, method: req.method, path: req.url, headers: { ...forwardable(req.headers), "content-length": String(requestBody.length) } },
        (upRes) => {
          const back: Buffer[] = [];
          upRes.on("data", (c: Buffer) => back.push(c));
          upRes.on("end", () => {
            const responseBody = Buffer.concat(back);
            requests.push({ method: req.method ?? "", path: req.url ?? "", status: upRes.statusCode ?? 0, requestBody, responseBody });
            res.writeHead(upRes.statusCode ?? 502, { ...forwardable(upRes.headers), "content-length": String(responseBody.length) });
            res.end(responseBody);
          });
        },
      );
      up.on("error", (e) => {
        requests.push({ method: req.method ?? "", path: req.url ?? "", status: 502, requestBody, responseBody: Buffer.from(e.message) });
        res.writeHead(502, { "content-type": "text/plain" });
        res.end(`gateway: ${e.message}`);
      });
      up.end(requestBody);
    });
  });
  await listenOn(server, socket);
  return {
    requests,
    close: () =>
      new Promise<void>((res) => {
        server.closeAllConnections();
        server.close(() => res());
      }),
  };
}

/** `server` listening on the Unix socket `socket` (a stale socket file from an earlier run removed first). */
async function listenOn(server: { once(e: "error", f: (e: Error) => void): unknown; listen(path: string, f: () => void): unknown }, socket: string): Promise<void> {
  if (existsSync(socket)) rmSync(socket);
  await new Promise<void>((res, rej) => {
    server.once("error", rej);
    server.listen(socket, () => res());
  });
}

/** A byte-for-byte relay on the Unix socket `socket` to `target` (a loopback host:port), counting connections. */
async function startTcpRelay(socket: string, target: string): Promise<Pick<TcpGateway, "connections" | "close">> {
  const m = /^(127\.0\.0\.1|localhost):(\d{1,5})$/.exec(target);
  if (!m) throw new Error(`a TCP gateway relays to a loopback host:port, not ${target}`);
  const [host, port] = [m[1] as string, Number(m[2])];
  let count = 0;
  const open = new Set<Socket>();
  const server = createNetServer((down) => {
    count++;
    const up = connect({ host, port });
    for (const s of [down, up]) {
      open.add(s);
      s.on("close", () => open.delete(s));
      s.on("error", () => {
        down.destroy();
        up.destroy();
      });
    }
    down.pipe(up);
    up.pipe(down);
  });
  await listenOn(server, socket);
  return {
    connections: () => count,
    close: () =>
      new Promise<void>((res) => {
        for (const s of open) s.destroy();
        server.close(() => res());
      }),
  };
}
