/**
 * The boot interface's MAC as NetBox holds it: the primary MAC address of the device's cabled, non-management
 * interface — written by fleetd when TPM evidence vouched for it (attestationInventory.ts recordMac). NetBox
 * prints MACs uppercase; the caller canonicalises. An operator can edit it by hand: a wrong MAC only hands the
 * Workflow to another machine, whose attestation then fails the gates (it is not that node).
 */
import { z } from "zod";
import { listAll, type NetBox } from "./client.js";

const Row = z
  .object({
    id: z.number().int(),
    mgmt_only: z.boolean().optional(),
    link_peers: z.array(z.unknown()).nullish(),
    primary_mac_address: z.object({ mac_address: z.string().optional() }).passthrough().nullish(),
  })
  .passthrough();

export async function bootMacOf(nb: NetBox, deviceId: number): Promise<string | undefined> {
  const query = { device_id: [deviceId], cabled: true, limit: 100, fields: "id,name,mgmt_only,link_peers,primary_mac_address" };
  const rows = z.array(Row).parse(await listAll(nb.api.GET("/api/dcim/interfaces/", { params: { query: query as never } }), "list interfaces", nb));
  const boot = rows.find((i) => !i.mgmt_only && (i.link_peers?.length ?? 0) > 0);
  return boot?.primary_mac_address?.mac_address || undefined;
}
