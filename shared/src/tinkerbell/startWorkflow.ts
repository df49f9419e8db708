/**
 * Starts a node's Workflow for one request. Tinkerbell serves one Workflow per agent (tinkerbell.md §1.3), so:
 *  - the same request again (same name) → the existing Workflow, nothing else touched (idempotent retry);
 *  - fleetd's *finished* Workflows of the node (SUCCESS/FAILED/TIMEOUT) are deleted first;
 *  - intake Workflows tink-server created from fleetd's rule set for one of the node's MACs are deleted in any
 *    state: admission runs inside the intake's confirm, so the intake's work is done (and a running one would
 *    otherwise block the provision Workflow forever);
 *  - an unfinished Workflow of fleetd's (anything but SUCCESS/FAILED/TIMEOUT, including "" just created and
 *    POST) refuses the new one (`workflow_in_progress`, naming it and its state) — except for `wipe`: a wipe
 *    (authorized operators, retirement) supersedes an unfinished provision or attest, which is deleted; an
 *    unfinished wipe still refuses a second wipe;
 *  - any other Workflow for the node's MACs or Hardware that is not fleetd's refuses (`not_ours`): fleetd does
 *    not delete it, and Tinkerbell would not serve ours beside it.
 * Then the Hardware is brought up to date and the Workflow created (AlreadyExists from a concurrent replica with
 * the same request is success).
 */
import { isAlreadyExists } from "../kube/client.js";
import { isOurs, LABEL_AUTO_ENROLLMENT, LABEL_MODE, WORKFLOW, WORKFLOW_RULE_SET, WorkflowObject } from "./api.js";
import { ensureHardware } from "./ensureHardware.js";
import { TinkerbellError } from "./errors.js";
import { hardwareName } from "./names.js";
import { checkNode, type TinkNode } from "./node.js";
import type { Objects } from "./objects.js";
import { INTAKE_RULE_SET } from "./ruleSet.js";
import { buildWorkflow, type WorkflowRequest } from "./workflow.js";
import { isFinished } from "./workflowState.js";

export interface StartedWorkflow {
  name: string;
  /** false: it existed already (the same request before). */
  created: boolean;
  /** Workflows deleted to make room, with their state and why. */
  deleted: { name: string; state: string; why: "finished" | "intake superseded" | "superseded by wipe" }[];
  hardware?: "created" | "updated" | "unchanged";
}

function targets(wf: WorkflowObject, node: TinkNode): boolean {
  const agent = wf.status?.agentID;
  const mapped = Object.values(wf.spec.hardwareMap ?? {});
  return wf.spec.hardwareRef === hardwareName(node.name) || (agent !== undefined && node.macs.includes(agent)) || mapped.some((v) => node.macs.includes(v.toLowerCase()));
}

const fromOurIntake = (wf: WorkflowObject): boolean =>
  wf.metadata.labels?.[LABEL_AUTO_ENROLLMENT] === "true" && (wf.metadata.ownerReferences ?? []).some((o) => o.kind === WORKFLOW_RULE_SET.kind && o.name === INTAKE_RULE_SET);

export async function startWorkflow(objs: Objects, node: TinkNode, req: WorkflowRequest): Promise<StartedWorkflow> {
  checkNode(node);
  const want = buildWorkflow(node, req, objs.namespace);
  const name = want.metadata.name;

  const same = await objs.get(WORKFLOW, name, WorkflowObject);
  if (same) {
    if (!isOurs(same.metadata)) throw new TinkerbellError("not_ours", `Workflow ${objs.namespace}/${name} exists and is not fleetd's`);
    return { name, created: false, deleted: [] };
  }

  const all = (await objs.list(WORKFLOW, "", WorkflowObject)).filter((w) => targets(w, node) && !w.metadata.deletionTimestamp);
  const remove: StartedWorkflow["deleted"] = [];
  const toDelete: WorkflowObject[] = [];
  for (const w of all) {
    const state = w.status?.state ?? "";
    const label = `${w.metadata.name} (${state || "not yet reconciled"})`;
    if (isOurs(w.metadata)) {
      if (isFinished(state)) {
        remove.push({ name: w.metadata.name, state, why: "finished" });
      } else if (req.mode === "wipe" && w.metadata.labels?.[LABEL_MODE] !== "wipe") {
        remove.push({ name: w.metadata.name, state, why: "superseded by wipe" });
      } else {
        throw new TinkerbellError("workflow_in_progress", `${node.name}: Workflow ${label} is still in progress; Tinkerbell serves one Workflow per machine — wait for it to finish${req.mode === "wipe" ? "" : ", or request wipe (which supersedes it)"}, or delete it`);
      }
      toDelete.push(w);
    } else if (fromOurIntake(w)) {
      remove.push({ name: w.metadata.name, state, why: "intake superseded" });
      toDelete.push(w);
    } else {
      throw new TinkerbellError("not_ours", `${node.name}: Workflow ${label} targets this machine and is not fleetd's; fleetd does not delete it, and Tinkerbell would not serve a second one`);
    }
  }
  for (const w of toDelete) await objs.delete(WORKFLOW, w.metadata.name, w.metadata.uid);

  const hardware = await ensureHardware(objs, node);
  try {
    await objs.create(WORKFLOW, want);
  } catch (e) {
    if (!isAlreadyExists(e)) throw e;
    const raced = await objs.get(WORKFLOW, name, WorkflowObject);
    if (!raced || !isOurs(raced.metadata)) throw new TinkerbellError("not_ours", `Workflow ${objs.namespace}/${name} appeared meanwhile and is not fleetd's`);
    return { name, created: false, deleted: remove, hardware };
  }
  return { name, created: true, deleted: remove, hardware };
}
