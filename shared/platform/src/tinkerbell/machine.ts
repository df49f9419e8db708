/**
 * Rufio Machines (bmc.tinkerbell.org/v1alpha1) per BMC type. Provider names are bmclib's (v2.3.5, pinned by
 * TB v0.25.0): `IntelAMT` (providers/intelamt), `ipmitool`, and `gofish` for Redfish (providers/redfish
 * ProviderName). preferredOrder puts the one provider first so Rufio does not probe the others.
 * `connection.port` is never read by Rufio (tinkerbell.md §2): ports go in providerOptions. Pure.
 */
import { apiVersionOf, BMC_MACHINE, ownedLabels } from "./api.js";
import { machineName } from "./names.js";
import type { BmcInfo, NodeName } from "../fleet/node.js";

export interface SecretRef {
  name: string;
  namespace: string;
}

export interface MachineOptions {
  /** Rufio `connection.insecureTLS` (required by the CRD; see siteConfig.ts). */
  insecureTLS: boolean;
  /** Redfish: the system to manage when one endpoint serves several (sushy-tools, chassis managers). */
  redfishSystemName?: string;
  /** Redfish port (default: 443 by bmclib). */
  redfishPort?: number;
  /** Redfish with HTTP basic auth instead of a session token (default false: sessions, as bmclib does). */
  redfishBasicAuth?: boolean;
  /** AMT: 16992 (http, default) or 16993 (https). */
  amtScheme?: "http" | "https";
}

export type ProviderOptions =
  | { preferredOrder: ["IntelAMT"]; intelAMT: { port: number; hostScheme: "http" | "https" } }
  | { preferredOrder: ["ipmitool"]; ipmitool: { port: number } }
  | { preferredOrder: ["gofish"]; redfish: { port?: number; useBasicAuth: boolean; systemName?: string } };

export interface MachineObject {
  apiVersion: string;
  kind: "Machine";
  metadata: { name: string; namespace: string; labels: Record<string, string> };
  spec: { connection: { host: string; insecureTLS: boolean; authSecretRef: SecretRef; providerOptions: ProviderOptions } };
}

export function providerOptionsFor(bmc: BmcInfo, o: MachineOptions): ProviderOptions {
  switch (bmc.type) {
    case "amt": {
      const scheme = o.amtScheme ?? "http";
      // Rufio passes the port straight to bmclib when intelAMT is set: always give it.
      return { preferredOrder: ["IntelAMT"], intelAMT: { port: scheme === "https" ? 16993 : 16992, hostScheme: scheme } };
    }
    case "ipmi":
      return { preferredOrder: ["ipmitool"], ipmitool: { port: 623 } };
    case "redfish":
      return {
        preferredOrder: ["gofish"],
        redfish: { ...(o.redfishPort ? { port: o.redfishPort } : {}), useBasicAuth: o.redfishBasicAuth ?? false, ...(o.redfishSystemName ? { systemName: o.redfishSystemName } : {}) },
      };
  }
}

export function buildMachine(node: NodeName, bmc: BmcInfo, secret: SecretRef, namespace: string, o: MachineOptions): MachineObject {
  return {
    apiVersion: apiVersionOf(BMC_MACHINE),
    kind: "Machine",
    metadata: { name: machineName(node), namespace, labels: ownedLabels(node) },
    spec: { connection: { host: bmc.address, insecureTLS: o.insecureTLS, authSecretRef: secret, providerOptions: providerOptionsFor(bmc, o) } },
  };
}
