/**
 * A node's Hardware (tinkerbell.org/v1alpha1): one interface per proven MAC (the boot MAC first, with the
 * static address Tootles keys on), UEFI x86_64, netboot allowed, the install disk, and bmcRef when the node has
 * a BMC (the controller then runs the netboot Job itself). `agentID` is the boot MAC (the ID HookOS's agent
 * uses, Smee's worker_id) and auto-enrollment stays off: tink-server enrolls an agent only when no Hardware has its
 * agentID (or that Hardware allows it), so an admitted machine is never enrolled again. Found by the real agent:
 * without agentID, a provisioned machine whose agent asked again got a second intake Workflow. Pure.
 */
import { apiVersionOf, BMC_MACHINE, HARDWARE, ownedLabels } from "./api.js";
import { hardwareName, machineName } from "./names.js";
import { netmaskOf, type CheckedNode } from "./node.js";

export interface HardwareObject {
  apiVersion: string;
  kind: "Hardware";
  metadata: { name: string; namespace: string; labels: Record<string, string> };
  spec: {
    interfaces: {
      dhcp: { mac: string; hostname: string; arch: "x86_64"; uefi: true; ip?: { address: string; netmask: string; gateway?: string } };
      netboot: { allowPXE: boolean; allowWorkflow: boolean };
    }[];
    disks?: { device: string }[];
    bmcRef?: { apiGroup: string; kind: "Machine"; name: string };
    metadata: { instance: { id: string; hostname: string } };
    agentID: string;
    auto: { enrollmentEnabled: false };
  };
}

export function buildHardware(n: CheckedNode, namespace: string): HardwareObject {
  const ip = n.address
    ? { address: n.address.split("/")[0] as string, netmask: netmaskOf(Number(n.address.split("/")[1])), ...(n.gateway ? { gateway: n.gateway } : {}) }
    : undefined;
  return {
    apiVersion: apiVersionOf(HARDWARE),
    kind: "Hardware",
    metadata: { name: hardwareName(n.name), namespace, labels: ownedLabels(n.name) },
    spec: {
      interfaces: n.macs.map((mac, i) => ({
        dhcp: { mac, hostname: n.name, arch: "x86_64" as const, uefi: true as const, ...(i === 0 && ip ? { ip } : {}) },
        // Only the boot interface netboots; allowWorkflow is legacy (not read by TB v0.25) but harmless.
        netboot: { allowPXE: i === 0, allowWorkflow: i === 0 },
      })),
      ...(n.installDisk ? { disks: [{ device: n.installDisk }] } : {}),
      ...(n.bmc ? { bmcRef: { apiGroup: BMC_MACHINE.group, kind: "Machine" as const, name: machineName(n.name) } } : {}),
      metadata: { instance: { id: n.macs[0] as string, hostname: n.name } },
      agentID: n.macs[0] as string,
      auto: { enrollmentEnabled: false },
    },
  };
}
