/**
 * Step `netboot`: start the `wipe` Workflow on the management cluster. Its bootOptions make Tinkerbell netboot
 * the machine into HookOS (a Rufio Job), which also stops the kubelet, so the Node deleted next stays deleted.
 * Idempotent: RetirementPlatform.startWipe returns the existing Workflow for the node.
 */
import type { Step } from "./types.js";

export const netbootStep: Step = {
  name: "netboot",
  summary: "start the wipe Workflow (netboots the machine into HookOS)",
  async run({ node, deps }) {
    const workflow = await deps.platform.startWipe(node);
    return { done: true, detail: `wipe Workflow ${workflow} started; the machine netboots into HookOS`, data: { workflow } };
  },
};
