/** How a nodes-file entry is written into NetBox: slugs and the custom-field values `inventory apply` owns. */
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

export function inventoryCustomFields(n: NodeEntry): Record<string, unknown> {
  return {
    node_class: n.class,
    tpm_version: n.tpm,
    install_disk: n.installDisk,
    network_gateway: n.address.gateway,
    bmc: n.bmc.type === "none" ? { type: "none" } : { type: n.bmc.type, address: n.bmc.address, credentials: n.bmc.credentials },
    ek_bindings: ekBindingsValue(n),
    switch_port_check: n.switchPortCheck,
  };
}

export function roleOf(file: NodesFile, n: NodeEntry): { name: string; slug: string; color: string } {
  return file.roles[n.role];
}
