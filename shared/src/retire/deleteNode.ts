/**
 * Step `delete-node`: delete the Node object. It runs after `netboot`, so the machine is in HookOS and no
 * kubelet re-registers it. Idempotent (404 is success).
 */
import { isNotFound } from "../kube/client.js";
import type { Step } from "./types.js";

export const deleteNodeStep: Step = {
  name: "delete-node",
  summary: "delete the Node object",
  async run({ node, deps }) {
    try {
      await deps.workload.core.deleteNode({ name: node });
    } catch (e) {
      if (isNotFound(e)) return { done: true, detail: `Node ${node} was already gone` };
      throw e;
    }
    return { done: true, detail: `Node ${node} deleted` };
  },
};
