/**
 * Step `power-off`: power the machine off with a Rufio Job and wait for it to complete. The Job's name is kept
 * in the step's progress record, so a restart waits for the same Job instead of starting another.
 */
import { optionsOf, type Step, type StepResult } from "./types.js";

export const powerOffStep: Step = {
  name: "power-off",
  summary: "power the machine off (Rufio Job) and wait for it to complete",
  async run({ node, deps, own }): Promise<StepResult> {
    const opts = optionsOf(deps);
    const job = own["job"] || (await deps.platform.startPowerOff(node));
    const state = await deps.platform.jobState(job);
    switch (state) {
      case "completed":
        return { done: true, detail: `power-off Job ${job} completed`, data: { powerOffJob: job } };
      case "running":
        return { done: false, retryAfterMs: opts.platformPollMs, waitingFor: `power-off Job ${job} is running`, data: { job } };
      default:
        return { done: false, blocked: true, retryAfterMs: opts.platformPollMs, waitingFor: `power-off Job ${job} is ${state}; the next attempt starts a new Job`, data: { job: "" } };
    }
  },
};
