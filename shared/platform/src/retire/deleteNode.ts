/**
 * Step `delete-node`: delete the Node object — once the machine is in HookOS. A kubelet still running would
 * register the Node again, so the step waits until the wipe Workflow started by `netboot` is running (tink-agent
 * in HookOS took it) or done. Deleted with a UID precondition (the Node read, never a newer one). Idempotent
 * (404 is success).
 */
import { isNotFound, kubeStatus } from "../kube/client.js";
import { optionsOf, type Step, type StepResult } from "./types.js";

export const deleteNodeStep: Step = {
  name: "delete-node",
  summary: "delete the Node object once the machine runs HookOS",
  async run({ node, deps, earlier }): Promise<StepResult> {
    const opts = optionsOf(deps);
    const workflow = earlier["workflow"];
    if (workflow) {
      const state = await deps.platform.workflowState(workflow);
      if (state === "pending") {
        return { done: false, retryAfterMs: opts.platformPollMs, waitingFor: `wipe Workflow ${workflow} is pending: the machine is not in HookOS yet, and its kubelet would register the Node again` };
      }
      if (state !== "running" && state !== "success") {
        return { done: false, blocked: true, retryAfterMs: opts.platformPollMs, waitingFor: `wipe Workflow ${workflow} is ${state}: the machine is not known to be in HookOS; the Node is kept` };
      }
    }
    // The Node of exactly that name, deleted with its UID as read (never a Node registered again meanwhile).
    let uid: string | undefined;
    try {
      uid = (await deps.workload.core.readNode({ name: node })).metadata?.uid;
      await deps.workload.core.deleteNode({ name: node, ...(uid ? { body: { preconditions: { uid } } } : {}) });
    } catch (e) {
      if (isNotFound(e)) return { done: true, detail: `Node ${node} was already gone` };
      if (kubeStatus(e) === 409) return { done: false, retryAfterMs: opts.platformPollMs, waitingFor: `Node ${node} was replaced while it was being deleted (UID precondition): reading it again` };
      throw e;
    }
    return { done: true, detail: `Node ${node} deleted${workflow ? ` (wipe Workflow ${workflow} running in HookOS)` : ""}` };
  },
};
