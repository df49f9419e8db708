/**
 * Does a certificate name a host? RFC 6125 as OpenSSL's X509_check_ip / X509_check_host apply it with node's
 * defaults (what a TLS peer will check): an IP address must be an iPAddress subjectAltName; a DNS name must
 * match a dNSName subjectAltName — or the subject CN, but only when the certificate has no dNSName — ignoring
 * case, where a wildcard may stand for all or part of the leftmost label (one label, never the registrable
 * domain itself: "*.com" names nothing).
 */
import type { Certificate } from "./certificate.js";
import { nameValues } from "./names.js";

const OID_CN = "2.5.4.3";

/** The bytes of a textual IPv4 or IPv6 address, or undefined when `s` is not one. */
export function ipAddressBytes(s: string): Uint8Array | undefined {
  const v4 = (t: string): number[] | undefined => {
    const p = t.split(".");
    if (p.length !== 4 || p.some((x) => !/^(0|[1-9][0-9]{0,2})$/.test(x) || Number(x) > 255)) return undefined;
    return p.map(Number);
  };
  if (!s.includes(":")) {
    const b = v4(s);
    return b ? Uint8Array.from(b) : undefined;
  }
  const halves = s.split("::");
  if (halves.length > 2) return undefined;
  const groups = (h: string): number[] | undefined => {
    if (h === "") return [];
    const out: number[] = [];
    const parts = h.split(":");
    for (const [i, g] of parts.entries()) {
      if (i === parts.length - 1 && g.includes(".")) {
        const b = v4(g);
        if (!b) return undefined;
        out.push(((b[0] ?? 0) << 8) | (b[1] ?? 0), ((b[2] ?? 0) << 8) | (b[3] ?? 0));
      } else if (/^[0-9a-fA-F]{1,4}$/.test(g)) out.push(parseInt(g, 16));
      else return undefined;
    }
    return out;
  };
  const head = groups(halves[0] ?? "");
  const tail = halves.length === 2 ? groups(halves[1] ?? "") : [];
  if (!head || !tail) return undefined;
  const fill = 8 - head.length - tail.length;
  if (halves.length === 2 ? fill < 1 : fill !== 0) return undefined;
  const all = [...head, ...new Array<number>(halves.length === 2 ? fill : 0).fill(0), ...tail];
  return Uint8Array.from(all.flatMap((g) => [g >> 8, g & 0xff]));
}

function matchesDnsName(pattern: string, host: string): boolean {
  const p = pattern.toLowerCase().replace(/\.$/, "");
  const h = host.toLowerCase().replace(/\.$/, "");
  if (!p.includes("*")) return p === h;
  const [first, ...rest] = p.split(".");
  const [hostFirst, ...hostRest] = h.split(".");
  if (first === undefined || hostFirst === undefined || rest.length < 2 || rest.join(".") !== hostRest.join(".")) return false;
  if (rest.some((l) => l.includes("*")) || first.split("*").length !== 2 || first.startsWith("xn--")) return false;
  const [prefix = "", suffix = ""] = first.split("*");
  // a whole-label "*" matches at least one character; a partial one ("w*", "*x", "a*b") may match none
  const min = Math.max(prefix.length + suffix.length, first === "*" ? 1 : 0);
  return hostFirst.length >= min && hostFirst.startsWith(prefix) && hostFirst.endsWith(suffix) && /^[a-z0-9-]*$/.test(hostFirst.slice(prefix.length, hostFirst.length - suffix.length));
}

/** Whether `cert` names `host` (an IP address or a DNS name; IPv6 may be given in brackets). */
export function namesHost(cert: Certificate, host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, "");
  const san = cert.ext.subjectAltName ?? [];
  const ip = ipAddressBytes(bare);
  if (ip) return san.some((n) => n.kind === "iPAddress" && Buffer.from(n.bytes).equals(Buffer.from(ip)));
  const dns = san.flatMap((n) => (n.kind === "dNSName" ? [n.value] : []));
  const names = dns.length > 0 ? dns : nameValues(cert.subject, OID_CN);
  return names.some((n) => matchesDnsName(n, bare));
}
