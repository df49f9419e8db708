/**
 * Retirement's management-cluster side (shared/platform/src/retire RetirementPlatform) on the Tinkerbell effects:
 * the `wipe` Workflow (its bootOptions netboot the machine into HookOS through the node's Rufio Machine) and
 * a Rufio power-off Job. Both are named from the retirement request, so a process killed between creating an
 * object and recording it finds the same object again instead of starting a second one.
 */
import type { RetirementPlatform } from "../retire/types.js";
import { AnyObject, BMC_JOB, WORKFLOW, WorkflowObject } from "./api.js";
import { bootFailure, bootRestartsOf, restartWorkflow } from "./bootRestart.js";
import type { TinkerbellEffects } from "./effects.js";
import { TinkerbellError } from "./errors.js";
import type { PlatformNode } from "../fleet/node.js";

export interface TinkerbellRetirementOptions {
  effects: TinkerbellEffects;
  /** The node as the effects need it (nodes file / NetBox + proven MACs). */
  node(name: string): Promise<PlatformNode>;
  /** The retirement request (NetBox device + the change that set decommissioning): names the objects. */
  requestId: string;
  /** How often a wipe Workflow whose boot Job failed is started again (default: the site's tinkerbell.bootRetries). */
  bootRetries?: number;
  log?: { warn(obj: object, msg: string): void };
}

export function tinkerbellRetirementPlatform(o: TinkerbellRetirementOptions): RetirementPlatform {
  return {
    async startWipe(name) {
      const started = await o.effects.start(await o.node(name), { mode: "wipe", requestId: o.requestId, retirement: true });
      return started.name;
    },
    async workflowState(name) {
      const live = await o.effects.objects.get(WORKFLOW, name, WorkflowObject);
      if (!live) return "missing";
      // The boot Job failed (or could not be set up) before any action ran (Tinkerbell v0.25.0 also does that
      // by itself): nothing happened to the disk, so the same Workflow is started again, a bounded number of
      // times (the count lives on the Workflow: a restarted handler counts on).
      const boot = bootFailure(live);
      if (boot !== undefined && bootRestartsOf(live) < (o.bootRetries ?? o.effects.bootRetries)) {
        o.log?.warn({ workflow: name, attempt: bootRestartsOf(live) + 1, condition: boot }, "wipe Workflow's boot Job failed before any action ran; starting it again");
        await restartWorkflow(o.effects.objects, live);
        return "pending";
      }
      switch (live.status?.state ?? "") {
        case "SUCCESS":
          return "success";
        case "FAILED":
          return "failed";
        case "TIMEOUT":
          return "timeout";
        case "RUNNING":
        case "POST":
          return "running";
        default:
          return "pending"; // "", PREPARING (the netboot Job), PENDING (waiting for the agent)
      }
    },
    async startPowerOff(name) {
      const node = await o.node(name);
      if (!node.bmc) throw new TinkerbellError("no-bmc", `${name} has no BMC in the nodes file: power it off by hand, then set the device offline`);
      const job = await o.effects.powerOff(node, o.requestId);
      // the power-off step asks again after a failed Job: the same name must run again, so the failed one goes
      const state = await o.effects.jobState(job);
      if (state?.state === "failed") {
        const live = await o.effects.objects.get(BMC_JOB, job, AnyObject);
        await o.effects.objects.delete(BMC_JOB, job, live?.metadata.uid);
        return o.effects.powerOff(node, o.requestId);
      }
      return job;
    },
    async jobState(name) {
      const s = await o.effects.jobState(name);
      if (!s) return "missing";
      return s.state === "pending" ? "running" : s.state;
    },
  };
}
