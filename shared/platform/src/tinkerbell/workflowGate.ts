/**
 * The attestation server's Workflow gate: a session's mode and Workflow are the machine's own claims, so before
 * anything is released the claimed Workflow must exist in Tinkerbell, be asked for this node in this mode, and be
 * the current one. Otherwise an `active` node with no desired_action could ask for `provision` and get a new
 * install code, config and bootstrap token.
 *  - intake: the Workflow tink-server created from fleetd's intake rule set for the booting agent — named
 *    `enrollment-<agent>`, from the `fleetd-intake` Template, `device_1` one of the machine's MACs;
 *  - provision, attest, wipe: a Workflow fleetd started (its labels), whose `fleetd.io/mode` is the mode, whose
 *    `hardwareRef` is this node's Hardware and whose `device_1` is one of the machine's MACs;
 *  - in every mode: not finished, not being deleted, and no newer unfinished fleetd Workflow for the node.
 * Reasons name the check; details name no inventory value (the node's Hardware name goes to `internal`).
 */
import type { Reason } from "@fleetd/verify/attest";
import { LABEL_MANAGED_BY, LABEL_MODE, LABEL_NODE, MANAGED_BY, WORKFLOW, WorkflowObject } from "./api.js";
import { enrollmentWorkflowName, hardwareName, requireNodeName } from "./names.js";
import type { Objects } from "./objects.js";
import { templateName } from "./templates.js";
import { isFinished } from "./workflowState.js";

export interface ClaimedWorkflow {
  workflow: string;
  mode: "intake" | "provision" | "attest" | "wipe";
  macs: readonly string[];
  /** The claimed boot interface's MAC: when given, the Workflow's device_1 must be exactly it. */
  bootMac?: string | undefined;
}

/** What the server asks before it releases anything (deps.ts `WorkflowGate`). */
export interface WorkflowGate {
  check(node: { name: string }, claimed: ClaimedWorkflow): Promise<Reason[]>;
}

const macKey = (m: string) => m.toLowerCase().replace(/-/g, ":");

export class TinkerbellWorkflowGate implements WorkflowGate {
  constructor(private readonly objects: Objects) {}

  async check(node: { name: string }, claimed: ClaimedWorkflow): Promise<Reason[]> {
    const fail = (check: string, detail: string, internal?: string): Reason[] => [{ check, detail, ...(internal ? { internal } : {}) }];
    const wf = await this.objects.get(WORKFLOW, claimed.workflow, WorkflowObject);
    if (!wf) return fail("workflow.unknown", `no Workflow ${claimed.workflow} in Tinkerbell: nothing is released to a machine nobody asked to ${claimed.mode}`);
    if (wf.metadata.deletionTimestamp) return fail("workflow.deleted", `Workflow ${claimed.workflow} is being deleted`);
    const state = wf.status?.state ?? "";
    if (isFinished(state)) return fail("workflow.finished", `Workflow ${claimed.workflow} has finished (${state}); a finished Workflow releases nothing`);
    const macs = new Set(claimed.macs.map(macKey));
    const device = wf.spec.hardwareMap?.["device_1"];
    if (!device || !macs.has(macKey(device))) return fail("workflow.device", `Workflow ${claimed.workflow} was not started for a MAC of this machine`);
    if (claimed.bootMac !== undefined && macKey(device) !== macKey(claimed.bootMac)) {
      return fail("workflow.device", `Workflow ${claimed.workflow} names another interface of this machine than the one it booted from (${claimed.bootMac})`);
    }
    const hardware = hardwareName(requireNodeName(node.name)); // the node as the inventory names it: checked here, where it enters
    if (claimed.mode === "intake") {
      const ok = wf.spec.templateRef === templateName("intake") && claimed.workflow === enrollmentWorkflowName(device);
      if (!ok) return fail("workflow.mode", `Workflow ${claimed.workflow} is not an intake (enrollment from the fleetd-intake Template)`);
    } else {
      const labels = wf.metadata.labels ?? {};
      if (labels[LABEL_MANAGED_BY] !== MANAGED_BY) return fail("workflow.owner", `Workflow ${claimed.workflow} was not started by fleetd`);
      if (labels[LABEL_MODE] !== claimed.mode) return fail("workflow.mode", `Workflow ${claimed.workflow} is not a ${claimed.mode} Workflow`, `its mode label: ${labels[LABEL_MODE] ?? "none"}`);
      if (wf.spec.hardwareRef !== hardware) return fail("workflow.hardware", `Workflow ${claimed.workflow} targets another machine's Hardware`, `hardwareRef ${wf.spec.hardwareRef ?? "none"}, the node's Hardware is ${hardware}`);
    }
    // The current one: no unfinished fleetd Workflow for this node was created after it.
    const created = Date.parse(wf.metadata.creationTimestamp ?? "") || 0;
    const others = await this.objects.list(WORKFLOW, `${LABEL_MANAGED_BY}=${MANAGED_BY},${LABEL_NODE}=${hardware}`, WorkflowObject);
    const newer = others.find(
      (o) => o.metadata.name !== wf.metadata.name && !o.metadata.deletionTimestamp && !isFinished(o.status?.state ?? "") && (Date.parse(o.metadata.creationTimestamp ?? "") || 0) > created,
    );
    if (newer) return fail("workflow.superseded", `Workflow ${claimed.workflow} is not the node's current Workflow (a newer one was started)`, `newer: ${newer.metadata.name}`);
    return [];
  }
}

/** Where no Tinkerbell is configured: nothing can show that a machine was asked to attest, so every session is refused. */
export class NoWorkflowGate implements WorkflowGate {
  constructor(private readonly why: string) {}

  async check(): Promise<Reason[]> {
    return [{ check: "workflow.unavailable", detail: "the attestation server cannot check the claimed Workflow, so it releases nothing", internal: this.why }];
  }
}
