/**
 * What the machine says about itself, read from sysfs and procfs under a root directory (`/` on a machine; a
 * tree of files in tests): the SMBIOS serial and UUID, the MACs of its physical interfaces, and which interface
 * it booted from (for LLDP). Only reading and shaping here; the server judges.
 */
import { closeSync, existsSync, openSync, readdirSync, readSync } from "node:fs";
import { join } from "node:path";

export type ClaimsErrorCode = "dmi-missing" | "dmi-unreadable" | "dmi-empty" | "no-interfaces";

export class ClaimsError extends Error {
  override readonly name = "ClaimsError";
  constructor(
    readonly code: ClaimsErrorCode,
    readonly path: string,
    detail: string,
  ) {
    super(`${path}: ${detail}`);
  }
}

export interface NetInterface {
  name: string;
  /** Lowercase aa:bb:cc:dd:ee:ff, or undefined when the address is not a usable Ethernet MAC. */
  mac?: string;
  up: boolean;
  /** Under /sys/devices/virtual/net (bridges, veths, bonds, VLANs, tunnels, lo). */
  virtual: boolean;
}

export interface HostClaims {
  serial: string;
  uuid: string;
  /** Physical interfaces' MACs, sorted, without duplicates. */
  macs: string[];
  interfaces: NetInterface[];
}

/** A small sysfs/procfs text file, at most `max` bytes (pseudo-files report size 0, so read to EOF). */
export function readSmall(path: string, max = 4096): string {
  const fd = openSync(path, "r");
  try {
    const buf = Buffer.alloc(max + 1);
    let n = 0;
    for (;;) {
      const r = readSync(fd, buf, n, buf.length - n, null);
      if (r === 0) break;
      n += r;
      if (n > max) throw new Error(`larger than ${max} bytes`);
    }
    return buf.subarray(0, n).toString("utf8");
  } finally {
    closeSync(fd);
  }
}

function readDmi(root: string, field: "product_serial" | "product_uuid"): string {
  const path = join(root, "sys/class/dmi/id", field);
  if (!existsSync(path)) throw new ClaimsError("dmi-missing", path, "no SMBIOS value (is this a machine with DMI, and is sysfs mounted?)");
  let text: string;
  try {
    text = readSmall(path, 256);
  } catch (e) {
    throw new ClaimsError("dmi-unreadable", path, (e as NodeJS.ErrnoException).code ?? (e as Error).message);
  }
  const value = text.replace(/\0+$/, "").trim();
  if (!value) throw new ClaimsError("dmi-empty", path, "empty");
  return value;
}

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;

export function listInterfaces(root: string): NetInterface[] {
  const dir = join(root, "sys/class/net");
  let names: string[];
  try {
    names = readdirSync(dir).sort();
  } catch (e) {
    throw new ClaimsError("no-interfaces", dir, (e as NodeJS.ErrnoException).code ?? (e as Error).message);
  }
  const out: NetInterface[] = [];
  for (const name of names) {
    if (name === "lo" || name === "bonding_masters") continue;
    let mac: string | undefined;
    let up = false;
    try {
      const a = readSmall(join(dir, name, "address"), 128).trim().toLowerCase();
      if (MAC.test(a) && a !== "00:00:00:00:00:00") mac = a;
    } catch {
      // no address file: not an Ethernet-like interface
    }
    try {
      up = readSmall(join(dir, name, "operstate"), 64).trim() === "up";
    } catch {
      // unknown state counts as down
    }
    const virtual = existsSync(join(root, "sys/devices/virtual/net", name));
    out.push({ name, ...(mac ? { mac } : {}), up, virtual });
  }
  return out;
}

export function collectHostClaims(root: string): HostClaims {
  const serial = readDmi(root, "product_serial");
  const uuid = readDmi(root, "product_uuid").toLowerCase();
  const interfaces = listInterfaces(root);
  const macs = [...new Set(interfaces.filter((i) => !i.virtual && i.mac).map((i) => i.mac as string))].sort();
  if (macs.length === 0) throw new ClaimsError("no-interfaces", join(root, "sys/class/net"), "no physical interface with a MAC address");
  return { serial, uuid, macs, interfaces };
}

export interface BootInterface {
  name: string;
  how: "configured" | "default-route" | "first-up";
}

/**
 * The interface the machine booted from: the configured one; else the one holding the IPv4 default route
 * (/proc/net/route); else the first physical interface that is up, by name. Undefined when none qualifies.
 */
export function bootInterface(root: string, interfaces: NetInterface[], configured?: string): BootInterface | undefined {
  if (configured) return { name: configured, how: "configured" };
  try {
    const lines = readSmall(join(root, "proc/net/route"), 1 << 20).split("\n").slice(1);
    for (const line of lines) {
      const [iface, dest, , flags, , , , mask] = line.trim().split(/\s+/);
      if (!iface || dest !== "00000000" || mask !== "00000000") continue;
      if ((parseInt(flags ?? "0", 16) & 0x1) === 0) continue; // RTF_UP
      return { name: iface, how: "default-route" };
    }
  } catch {
    // no procfs route table: fall through
  }
  const first = interfaces.find((i) => i.up && !i.virtual && i.mac);
  return first ? { name: first.name, how: "first-up" } : undefined;
}

/**
 * The MAC of the boot interface, when it is one of the claimed physical MACs (a bond or VLAN on top has none
 * of its own there): the claim `bootMac`, which the server records as the node's boot NIC instead of whichever
 * MAC sorts first.
 */
export function bootMacOf(host: Pick<HostClaims, "macs" | "interfaces">, boot: BootInterface | undefined): string | undefined {
  if (!boot) return undefined;
  const mac = host.interfaces.find((i) => i.name === boot.name)?.mac;
  return mac !== undefined && host.macs.includes(mac) ? mac : undefined;
}
