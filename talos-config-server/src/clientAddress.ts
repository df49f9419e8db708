/**
 * The client's address for limits and records. Behind a Service or an ingress every request arrives from the
 * proxy, so limits keyed on the socket would give the whole fleet one budget; a forwarded address is believed
 * only from a configured trusted proxy, and then the right-most X-Forwarded-For hop that is not itself a trusted
 * proxy is the client (left-most entries are whatever the client wrote).
 */
import { BlockList, isIP } from "node:net";
import type { Request } from "express";

export type TrustedProxies = BlockList;

/** A BlockList from CIDRs or single addresses ("10.0.0.0/8", "fd00::/8", "127.0.0.1"); throws on a bad entry. */
export function trustedProxies(entries: readonly string[]): TrustedProxies {
  const list = new BlockList();
  for (const e of entries) {
    const [addr, bits] = e.split("/");
    const family = isIP(addr ?? "");
    if (family === 0) throw new Error(`trusted proxy ${JSON.stringify(e)} is not an IP address or CIDR`);
    const type = family === 6 ? "ipv6" : "ipv4";
    if (bits === undefined) list.addAddress(addr as string, type);
    else {
      const n = Number(bits);
      if (!Number.isInteger(n) || n < 0 || n > (family === 6 ? 128 : 32)) throw new Error(`trusted proxy ${JSON.stringify(e)} has a bad prefix length`);
      list.addSubnet(addr as string, n, type);
    }
  }
  return list;
}

const unmapped = (a: string) => (a.startsWith("::ffff:") && isIP(a.slice(7)) === 4 ? a.slice(7) : a);

function trusted(list: TrustedProxies, a: string): boolean {
  const family = isIP(a);
  return family !== 0 && list.check(a, family === 6 ? "ipv6" : "ipv4");
}

export function clientAddress(req: Request, proxies: TrustedProxies | undefined): string {
  const socket = unmapped(req.socket.remoteAddress ?? "unknown");
  if (!proxies || !trusted(proxies, socket)) return socket;
  const header = req.headers["x-forwarded-for"];
  const hops = (Array.isArray(header) ? header.join(",") : header ?? "").split(",").map((h) => unmapped(h.trim())).filter((h) => h.length > 0);
  for (let i = hops.length - 1; i >= 0; i--) {
    const h = hops[i] as string;
    if (isIP(h) === 0) return socket; // garbage in the chain: the proxy is the client as far as limits go
    if (!trusted(proxies, h)) return h;
  }
  return socket;
}
