/** Step `cordon`: mark the Node unschedulable (spec.unschedulable), as `kubectl cordon` does. Idempotent. */
import * as k8s from "@kubernetes/client-node";
import { isNotFound } from "../kube/client.js";
import type { Step } from "./types.js";

export const cordonStep: Step = {
  name: "cordon",
  summary: "mark the Node unschedulable",
  async run({ node, deps }) {
    let current: k8s.V1Node;
    try {
      current = await deps.workload.core.readNode({ name: node });
    } catch (e) {
      if (isNotFound(e)) return { done: true, detail: `Node ${node} does not exist in the workload cluster; nothing to cordon` };
      throw e;
    }
    if (current.spec?.unschedulable === true) return { done: true, detail: `Node ${node} was already unschedulable` };
    await deps.workload.core.patchNode({ name: node, body: { spec: { unschedulable: true } } },
      k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.MergePatch));
    return { done: true, detail: `Node ${node} cordoned (spec.unschedulable=true)` };
  },
};
