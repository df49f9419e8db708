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
      default: {
        // A failed Job is started again (a BMC busy for a moment; Rufio v0.25.0 also fails Jobs by itself when
        // its Job controller re-creates a Task); after three failures an operator looks.
        const failures = Number(own["failures"] ?? "0") + 1;
        return { done: false, blocked: failures >= 3, retryAfterMs: opts.platformPollMs, waitingFor: `power-off Job ${job} is ${state} (failure ${failures} of 3); the next attempt starts a new Job`, data: { job: "", failures: String(failures) } };
      }
    }
  },
};
