/**
 * What the effects need to know about a node, gathered by the caller from the nodes file / NetBox and the
 * attestation's proven MACs. The first MAC is the boot interface's (the agent ID, Workflow `device_1`).
 */
import { TinkerbellError } from "./errors.js";
import { requireCanonicalMac } from "./mac.js";
import { requireNodeName } from "./names.js";
import { ipv4Mask, isIpv4, parseIpv4Cidr } from "../fleet/ipv4.js";
import type { BmcInfo } from "../fleet/ports.js";

export interface TinkNode {
  name: string;
  /** Proven MACs, canonical (lowercase, colons); the first is the boot interface's. */
  macs: string[];
  /** IPv4 with prefix, e.g. 10.0.10.11/24. */
  address?: string;
  gateway?: string;
  /** The install disk, first in Hardware spec.disks (`{{ index .Hardware.Disks 0 }}` in the Templates). */
  installDisk?: string;
  bmc?: BmcInfo;
}

export function checkNode(n: TinkNode): TinkNode {
  requireNodeName(n.name);
  if (n.macs.length === 0) throw new TinkerbellError("no-proven-mac", `${n.name}: no proven MAC address (TPM evidence vouches for the MAC at intake or provision; until then no Workflow can name the agent)`);
  n.macs.forEach((m, i) => requireCanonicalMac(m, `${n.name}: MAC ${i}`));
  if (new Set(n.macs).size !== n.macs.length) throw new TinkerbellError("invalid-input", `${n.name}: a MAC address repeats`);
  if (n.address !== undefined) {
    const c = parseIpv4Cidr(n.address);
    if (!c || c.prefix < 1) throw new TinkerbellError("invalid-input", `${n.name}: address ${n.address} is not IPv4/prefix`);
  }
  if (n.gateway !== undefined && !isIpv4(n.gateway)) throw new TinkerbellError("invalid-input", `${n.name}: gateway ${n.gateway} is not an IPv4 address`);
  if (n.installDisk !== undefined && !/^\/dev\/[A-Za-z0-9/._-]{1,200}$/.test(n.installDisk)) throw new TinkerbellError("invalid-input", `${n.name}: install disk ${n.installDisk} is not a /dev path`);
  return n;
}

/** 24 → 255.255.255.0 */
export function netmaskOf(prefix: number): string {
  const m = ipv4Mask(prefix);
  return [24, 16, 8, 0].map((s) => (m >>> s) & 255).join(".");
}
