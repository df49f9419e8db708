/**
 * Address checks for the config inputs (IPv4 and IPv6). IPv4 is fleetd's one validator (fleet/ipv4.ts: dotted
 * quad, no leading zeros, prefix 0–32); IPv6 is node:net's.
 */
import { BlockList, isIPv6 } from "node:net";
import { ipv4ToInt, isIpv4, parseIpv4Cidr } from "../../fleet/ipv4.js";

export type Family = 4 | 6;

export function ipFamily(s: string): Family | undefined {
  return isIpv4(s) ? 4 : isIPv6(s) ? 6 : undefined;
}

export interface Cidr {
  address: string;
  prefix: number;
  family: Family;
}

/** `a.b.c.d/p` or `x::y/p`; the address may have host bits set (it is a host address in a subnet). */
export function parseCidr(s: string): Cidr | undefined {
  const v4 = parseIpv4Cidr(s);
  if (v4) return { ...v4, family: 4 };
  const m = /^([^/]+)\/(\d{1,3})$/.exec(s);
  if (!m) return undefined;
  const family = ipFamily(m[1]!);
  const prefix = Number(m[2]);
  if (family !== 6 || prefix > 128 || m[2]!.length > 1 && m[2]!.startsWith("0")) return undefined;
  if (m[1]!.includes("%")) return undefined; // no zone ids
  return { address: m[1]!, prefix, family };
}

/** Whether `ip` lies in the subnet of `cidr`. */
export function inSubnet(cidr: Cidr, ip: string): boolean {
  if (ipFamily(ip) !== cidr.family) return false;
  const type = cidr.family === 4 ? "ipv4" : "ipv6";
  const bl = new BlockList();
  bl.addSubnet(cidr.address, cidr.prefix, type);
  return bl.check(ip, type);
}

/** For IPv4 prefixes up to /30: the address is neither the network nor the broadcast address. */
export function isUsableHost(cidr: Cidr): boolean {
  if (cidr.family !== 4 || cidr.prefix > 30) return true;
  const size = 2 ** (32 - cidr.prefix);
  const offset = ipv4ToInt(cidr.address) % size;
  return offset !== 0 && offset !== size - 1;
}

/** The subnet of a host CIDR, e.g. 10.0.0.21/24 -> 10.0.0.0/24 (IPv4 only; IPv6 is returned as given). */
export function subnetOf(cidr: Cidr): string {
  if (cidr.family === 6) return `${cidr.address}/${cidr.prefix}`;
  const size = 2 ** (32 - cidr.prefix);
  const base = ipv4ToInt(cidr.address) - (ipv4ToInt(cidr.address) % size);
  const octets = [24, 16, 8, 0].map((s) => Math.floor(base / 2 ** s) % 256);
  return `${octets.join(".")}/${cidr.prefix}`;
}

/** Whether two textual addresses are the same address (e.g. 2001:db8::1 and 2001:db8:0::1). */
export function sameAddress(a: string, b: string): boolean {
  const fa = ipFamily(a);
  if (!fa || fa !== ipFamily(b)) return false;
  const type = fa === 4 ? "ipv4" : "ipv6";
  const bl = new BlockList();
  bl.addAddress(a, type);
  return bl.check(b, type);
}
