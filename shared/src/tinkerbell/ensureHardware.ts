/** Creates or updates one node's Hardware; refuses (not_ours) when a Hardware of that name is not fleetd's. */
import { HARDWARE, LABEL_NODE } from "./api.js";
import { TinkerbellError } from "./errors.js";
import { buildHardware } from "./hardware.js";
import type { TinkNode } from "./node.js";
import type { Objects } from "./objects.js";
import { syncObjects } from "./sync.js";

export const HARDWARE_SPEC_KEYS = ["interfaces", "disks", "bmcRef", "metadata", "auto"] as const;

export async function ensureHardware(objs: Objects, node: TinkNode): Promise<"created" | "updated" | "unchanged"> {
  const hw = buildHardware(node, objs.namespace);
  const c = await syncObjects(objs, HARDWARE, [hw], { scope: `${LABEL_NODE}=${node.name}`, managedSpecKeys: HARDWARE_SPEC_KEYS, prune: false });
  const refused = c.refused[0];
  if (refused) throw new TinkerbellError("not_ours", refused.reason);
  return c.created.length ? "created" : c.updated.length ? "updated" : "unchanged";
}
