/** The NodeRef (NetBox device ID and name) of the one device named `name`, for tests that act as a component. */
import { type NetBox, deviceIdByName } from "@fleetd/platform/netbox";
import type { NodeRef } from "@fleetd/platform/state";

export async function nodeRef(nb: NetBox, name: string): Promise<NodeRef> {
  const deviceId = await deviceIdByName(nb, name);
  if (deviceId === undefined) throw new Error(`no single device named ${name}`);
  return { deviceId, name };
}
