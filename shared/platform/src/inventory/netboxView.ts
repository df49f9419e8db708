/**
 * How a nodes-file entry is written into NetBox: slugs, and `deviceFieldsFromEntry`, the one conversion of a
 * `NodeEntry` (judged by zod when the file was parsed) into the device fields and custom-field values `inventory
 * apply` owns. NetBox's answer comes back as a `Node` through netbox/attestationInventory.ts `nodeFromDevice`.
 */
import type { NodeEntry, NodesFile } from "../fleet/nodesFile.js";

export function slugify(s: string): string {
  return s.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 100) || "x";
}

export const INTERFACE_TYPE = "1000base-t";

/** The EK bindings as stored in the `ek_bindings` JSON custom field. */
export function ekBindingsValue(n: NodeEntry): { alg: string; sha256: string; chain: boolean }[] | null {
  if (!n.ek || n.ek.length === 0) return null;
  return n.ek.map((b) => ({ alg: b.alg, sha256: b.sha256, chain: b.chain }));
}

/** The NetBox objects a device refers to by ID (looked up or created by `inventory apply`). */
export interface DeviceRefs {
  deviceType: number;
  role: number;
  site: number;
}

/**
 * The nodes file's entry `name` as the NetBox device fields the apply account writes: the top-level fields and the
 * custom fields (the boot interface, its address and cable are objects of their own, written beside the device).
 */
export function deviceFieldsFromEntry(name: string, n: NodeEntry, refs: DeviceRefs): { fields: { name: string; device_type: number; role: number; site: number; serial: string }; customFields: Record<string, unknown> } {
  return {
    fields: { name, device_type: refs.deviceType, role: refs.role, site: refs.site, serial: n.serial },
    customFields: {
      node_class: n.class,
      tpm_version: n.tpm,
      install_disk: n.installDisk,
      network_gateway: n.address.gateway,
      bmc: n.bmc.type === "none" ? { type: "none" } : { type: n.bmc.type, address: n.bmc.address, credentials: n.bmc.credentials },
      ek_bindings: ekBindingsValue(n),
      switch_port_check: n.switchPortCheck,
    },
  };
}

export function roleOf(file: NodesFile, n: NodeEntry): { name: string; slug: string; color: string } {
  return file.roles[n.role];
}
