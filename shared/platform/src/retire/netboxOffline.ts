/**
 * Step `netbox-offline` and the NetBox side of retirement: the device's status becomes `offline` and the facts
 * fleetd recorded about the old installation are cleared (attestation verdict and time, LDevID serial and
 * expiry, attested serial and switch port — see netbox/fields.ts); the inventory fields from the nodes file
 * (EK bindings, class, disk, BMC…) stay, they describe the machine. The write is conditional (If-Match), re-read
 * and retried on 412.
 */
import { NetBoxError, type NetBox } from "../netbox/client.js";
import { deviceIdByName, patchDevice, readDevice } from "../netbox/device.js";
import type { RetirementInventory, Step } from "./types.js";

/** Custom fields holding what attestation proved about the installation being retired. */
export const RETIRED_FACTS = ["attestation_verdict", "attested_at", "ldevid_serial", "ldevid_expiry", "attested_serial", "attested_port"] as const;

async function deviceId(nb: NetBox, node: string): Promise<number> {
  const id = await deviceIdByName(nb, node);
  if (id === undefined) throw new NetBoxError("netbox-http", `device ${node}`, 404, `no NetBox device is named ${node}`);
  return id;
}

export function netboxRetirementInventory(nb: NetBox): RetirementInventory {
  return {
    async markOffline(node) {
      const id = await deviceId(nb, node);
      for (let attempt = 1; ; attempt++) {
        const { device, etag } = await readDevice(nb, id);
        const stale = RETIRED_FACTS.filter((f) => device.cf[f] !== null && device.cf[f] !== undefined && device.cf[f] !== "");
        if (device.status === "offline" && stale.length === 0) return `NetBox device ${node} (#${id}) was already offline`;
        try {
          await patchDevice(nb, id, { status: "offline", custom_fields: Object.fromEntries(RETIRED_FACTS.map((f) => [f, null])) }, etag,
            "fleetd: retirement complete");
          return `NetBox device ${node} (#${id}) set offline (was ${device.status}); cleared ${stale.length ? stale.join(", ") : "no recorded facts"}`;
        } catch (e) {
          if (e instanceof NetBoxError && e.code === "netbox-conflict" && attempt < 5) continue;
          throw e;
        }
      }
    },
  };
}

export const netboxOfflineStep: Step = {
  name: "netbox-offline",
  summary: "set the NetBox device offline and clear fleetd's recorded facts",
  async run({ node, deps }) {
    return { done: true, detail: await deps.inventory.markOffline(node) };
  },
};
