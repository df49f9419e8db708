/**
 * Where a node enters the Tinkerbell adapter: `checkNode` checks a `PlatformNode` (fleet/node.ts) once — name,
 * proven MACs, address, gateway, install disk — and returns a `CheckedNode`, the only node the builders and
 * steps below the effects' entry points take (they do not check it again). `namedNode` checks only the name, for
 * the steps that need no MAC (the BMC Machine, power off). The first MAC is the boot interface's (the agent ID,
 * Workflow `device_1`).
 */
import { TinkerbellError } from "./errors.js";
import { requireCanonicalMac } from "./mac.js";
import { requireNodeName } from "./names.js";
import { ipv4Mask, isIpv4, parseIpv4Cidr } from "../fleet/ipv4.js";
import type { NodeName, PlatformNode } from "../fleet/node.js";

/** A node `checkNode` accepted: a DNS-label name, at least one canonical MAC (distinct, the boot one first), an IPv4/prefix address, an IPv4 gateway, a /dev install disk. */
export type CheckedNode = Readonly<PlatformNode & { name: NodeName }> & { readonly __checked: "tinkerbell" };

/** A node whose name `namedNode` accepted (its other fields are not looked at). */
export type NamedNode = Readonly<Pick<PlatformNode, "bmc"> & { name: NodeName }>;

export function checkNode(n: PlatformNode): CheckedNode {
  const name = requireNodeName(n.name);
  if (n.macs.length === 0) throw new TinkerbellError("no-proven-mac", `${n.name}: no proven MAC address (TPM evidence vouches for the MAC at intake or provision; until then no Workflow can name the agent)`);
  n.macs.forEach((m, i) => requireCanonicalMac(m, `${n.name}: MAC ${i}`));
  if (new Set(n.macs).size !== n.macs.length) throw new TinkerbellError("invalid-input", `${n.name}: a MAC address repeats`);
  if (n.address !== undefined) {
    const c = parseIpv4Cidr(n.address);
    if (!c || c.prefix < 1) throw new TinkerbellError("invalid-input", `${n.name}: address ${n.address} is not IPv4/prefix`);
  }
  if (n.gateway !== undefined && !isIpv4(n.gateway)) throw new TinkerbellError("invalid-input", `${n.name}: gateway ${n.gateway} is not an IPv4 address`);
  if (n.installDisk !== undefined && !/^\/dev\/[A-Za-z0-9/._-]{1,200}$/.test(n.installDisk)) throw new TinkerbellError("invalid-input", `${n.name}: install disk ${n.installDisk} is not a /dev path`);
  return {
    name,
    macs: [...n.macs],
    ...(n.address !== undefined ? { address: n.address } : {}),
    ...(n.gateway !== undefined ? { gateway: n.gateway } : {}),
    ...(n.installDisk !== undefined ? { installDisk: n.installDisk } : {}),
    ...(n.bmc !== undefined ? { bmc: n.bmc } : {}),
  } as CheckedNode;
}

export function namedNode(n: Pick<PlatformNode, "name" | "bmc">): NamedNode {
  return { name: requireNodeName(n.name), ...(n.bmc !== undefined ? { bmc: n.bmc } : {}) };
}

/** 24 → 255.255.255.0 */
export function netmaskOf(prefix: number): string {
  const m = ipv4Mask(prefix);
  return [24, 16, 8, 0].map((s) => (m >>> s) & 255).join(".");
}
