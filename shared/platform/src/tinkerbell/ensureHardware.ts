/**
 * Creates or updates one node's Hardware; refuses (not-ours) when a Hardware of that name is not fleetd's, and
 * (mac-in-use) when one of the node's MACs is already in another Hardware, whoever owns it: Tinkerbell would
 * then serve either machine's Workflow to the agent with that MAC, and a wrong MAC in the inventory must not move
 * another machine into this node's Hardware with PXE allowed.
 */
import { HARDWARE, HardwareRead, LABEL_NODE } from "./api.js";
import { TinkerbellError } from "./errors.js";
import { buildHardware } from "./hardware.js";
import { hardwareName } from "./names.js";
import type { CheckedNode } from "./node.js";
import type { Objects } from "./objects.js";
import { syncObjects } from "./sync.js";

export const HARDWARE_SPEC_KEYS = ["interfaces", "disks", "bmcRef", "metadata", "auto"] as const;

/** Refuses when another Hardware in the namespace lists one of `node`'s MACs (compared lowercase). */
export async function checkMacsUnique(objs: Objects, node: CheckedNode): Promise<void> {
  const own = hardwareName(node.name);
  const macs = new Set(node.macs);
  for (const hw of await objs.list(HARDWARE, "", HardwareRead)) {
    if (hw.metadata.name === own) continue;
    const taken = (hw.spec.interfaces ?? []).map((i) => (i.dhcp?.mac ?? "").toLowerCase()).filter((m) => macs.has(m));
    if (taken.length > 0) {
      throw new TinkerbellError("mac-in-use", `${node.name}: MAC ${taken.join(", ")} is already in Hardware ${objs.namespace}/${hw.metadata.name}; one MAC belongs to one machine — correct the inventory or delete that Hardware first`);
    }
  }
}

export async function ensureHardware(objs: Objects, node: CheckedNode): Promise<"created" | "updated" | "unchanged"> {
  const hw = buildHardware(node, objs.namespace);
  await checkMacsUnique(objs, node);
  const c = await syncObjects(objs, HARDWARE, [hw], { scope: `${LABEL_NODE}=${node.name}`, managedSpecKeys: HARDWARE_SPEC_KEYS, prune: false });
  const refused = c.refused[0];
  if (refused) throw new TinkerbellError("not-ours", refused.reason);
  return c.created.length ? "created" : c.updated.length ? "updated" : "unchanged";
}
