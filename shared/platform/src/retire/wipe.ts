/**
 * Step `wipe`: wait for the wipe Workflow started by `netboot` to succeed (whole-disk wipe, and the TPM's
 * owner hierarchy cleared where the site allows it: tink-action `clear-tpm`). A failed, timed-out or vanished
 * Workflow blocks retirement for an operator: the disk is not known to be wiped.
 */
import { optionsOf, type Step } from "./types.js";

export const wipeStep: Step = {
  name: "wipe",
  summary: "wait for the wipe Workflow to succeed",
  async run({ deps, earlier }) {
    const opts = optionsOf(deps);
    const workflow = earlier["workflow"];
    if (!workflow) return { done: false, blocked: true, retryAfterMs: opts.platformPollMs, waitingFor: "no wipe Workflow recorded by the netboot step" };
    const state = await deps.platform.workflowState(workflow);
    switch (state) {
      case "success":
        return { done: true, detail: `wipe Workflow ${workflow} succeeded`, data: { workflow } };
      case "pending":
      case "running":
        return { done: false, retryAfterMs: opts.platformPollMs, waitingFor: `wipe Workflow ${workflow} is ${state}` };
      case "missing":
        return { done: false, blocked: true, retryAfterMs: opts.platformPollMs,
          waitingFor: `wipe Workflow ${workflow} no longer exists; the disk is not known to be wiped (delete the netboot step's record to start it again)` };
      default:
        return { done: false, blocked: true, retryAfterMs: opts.platformPollMs,
          waitingFor: `wipe Workflow ${workflow} ended ${state}; the disk is not known to be wiped` };
    }
  },
};
