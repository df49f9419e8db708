/**
 * fleetd's one IPv4 and IPv4-CIDR validator: the nodes file, Tinkerbell's Hardware and the Talos config inputs
 * (IPv4 side) all check addresses here, so "what is a valid IPv4 address?" has one answer.
 *
 * Strict on purpose: a dotted quad of four decimal octets 0–255 with no leading zeros (`010.0.0.1` is octal to
 * some parsers and decimal to others), nothing around it (no spaces, no zone, no IPv6 or IPv4-mapped form); a
 * prefix is decimal 0–32, also without leading zeros. Domain rules on top (a node's prefix 1–30, not the
 * network or broadcast address) stay with the schema that has them.
 */
import { z } from "zod";

const OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])";
const IPV4 = new RegExp(`^${OCTET}(?:\\.${OCTET}){3}$`);
const PREFIX = /^(?:3[0-2]|[12][0-9]|[0-9])$/;

/** A dotted-quad IPv4 address, e.g. 10.0.10.1. */
export function isIpv4(s: string): boolean {
  return IPV4.test(s);
}

/** An IPv4 address with its prefix length; the address may have host bits set (a host address in a subnet). */
export interface Ipv4Cidr {
  address: string;
  prefix: number;
}

/** `a.b.c.d/p` with p in 0–32, or undefined. */
export function parseIpv4Cidr(s: string): Ipv4Cidr | undefined {
  const slash = s.indexOf("/");
  if (slash < 0) return undefined;
  const address = s.slice(0, slash);
  const prefix = s.slice(slash + 1);
  if (!isIpv4(address) || !PREFIX.test(prefix)) return undefined;
  return { address, prefix: Number(prefix) };
}

export const isIpv4Cidr = (s: string): boolean => parseIpv4Cidr(s) !== undefined;

/** The address as an unsigned 32-bit number (the caller has checked it with `isIpv4`). */
export function ipv4ToInt(ip: string): number {
  return ip.split(".").reduce((n, o) => n * 256 + Number(o), 0);
}

/** The netmask of a prefix length as an unsigned 32-bit number: 24 → 0xffffff00. */
export function ipv4Mask(prefix: number): number {
  return prefix === 0 ? 0 : (~0 << (32 - prefix)) >>> 0;
}

/** Whether `ip` (a valid IPv4 address) lies in the subnet of `cidr`. */
export function ipv4InSubnet(cidr: Ipv4Cidr, ip: string): boolean {
  const mask = ipv4Mask(cidr.prefix);
  return ((ipv4ToInt(ip) & mask) >>> 0) === ((ipv4ToInt(cidr.address) & mask) >>> 0);
}

/** zod form of `isIpv4`; `message` replaces the default (schemas keep their own wording). */
export const ipv4Schema = (message = "must be an IPv4 address (a dotted quad without leading zeros), e.g. 10.0.10.1") => z.string().refine(isIpv4, message);

/** zod form of `parseIpv4Cidr`'s check (the value stays the text). */
export const ipv4CidrSchema = (message = "must be an IPv4 address with a prefix length 0-32, e.g. 10.0.10.11/24") => z.string().refine(isIpv4Cidr, message);
