/**
 * Starts a node's Workflow for one request. Tinkerbell serves one Workflow per agent (tinkerbell.md §1.3), so:
 *  - the same request again (same name) → the existing Workflow, nothing else touched (idempotent retry);
 *  - fleetd's *finished* Workflows of the node (SUCCESS/FAILED/TIMEOUT) are deleted first;
 *  - only Workflows of this node are acted on: fleetd's own whose `hardwareRef` is the node's Hardware, and
 *    intake Workflows tink-server created from fleetd's rule set whose `device_1` is the node's boot MAC — those
 *    are deleted in any state: admission runs inside the intake's confirm, so the intake's work is done (and a
 *    running one would otherwise block the provision Workflow forever);
 *  - a MAC of the node already in another Hardware refuses the start (`mac-in-use`), before anything is deleted;
 *  - an unfinished Workflow of fleetd's (anything but SUCCESS/FAILED/TIMEOUT, including "" just created and
 *    POST) refuses the new one (`workflow-in-progress`, naming it and its state) — except for `wipe`: a wipe
 *    (authorized operators, retirement) supersedes an unfinished provision or attest, which is deleted; an
 *    unfinished wipe still refuses a second wipe;
 *  - any other Workflow for the node's MACs or Hardware refuses: `not-ours` when it is another party's,
 *    `mac-in-use` when it is fleetd's but another node's (or an intake for another of its MACs); fleetd does not
 *    delete it, and Tinkerbell would not serve ours beside it.
 * Then the Hardware is brought up to date and the Workflow created (AlreadyExists from a concurrent replica with
 * the same request is success).
 */
import { isAlreadyExists } from "../kube/client.js";
import { isOurs, LABEL_AUTO_ENROLLMENT, LABEL_MODE, WORKFLOW, WORKFLOW_RULE_SET, WorkflowObject } from "./api.js";
import { checkMacsUnique, ensureHardware } from "./ensureHardware.js";
import { TinkerbellError } from "./errors.js";
import { hardwareName } from "./names.js";
import type { CheckedNode } from "./node.js";
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

const fromOurIntake = (wf: WorkflowObject): boolean =>
  wf.metadata.labels?.[LABEL_AUTO_ENROLLMENT] === "true" && (wf.metadata.ownerReferences ?? []).some((o) => o.kind === WORKFLOW_RULE_SET.kind && o.name === INTAKE_RULE_SET);

/** The MACs a Workflow names: its agent and its hardwareMap values, lowercase. */
const macsNamed = (wf: WorkflowObject): string[] => [wf.status?.agentID ?? "", ...Object.values(wf.spec.hardwareMap ?? {})].map((v) => v.toLowerCase()).filter((v) => v !== "");

/**
 * How a Workflow bears on this node's start. Only two kinds are ever acted on: fleetd's own Workflows whose
 * `hardwareRef` is this node's Hardware, and intake Workflows of fleetd's rule set whose `device_1` is this
 * node's boot MAC (the proven one, first in `macs`). Any other Workflow naming this node's Hardware or one of
 * its MACs — another party's, another node's, an intake for another of its MACs — refuses the start and is
 * left alone: a MAC in the wrong record must never delete another machine's Workflow.
 */
function relationOf(wf: WorkflowObject, node: CheckedNode): "own" | "intake" | "conflict" | "unrelated" {
  const hw = hardwareName(node.name);
  if (isOurs(wf.metadata) && wf.spec.hardwareRef === hw) return "own";
  if (fromOurIntake(wf) && (wf.spec.hardwareMap?.["device_1"] ?? "").toLowerCase() === node.macs[0]) return "intake";
  if (wf.spec.hardwareRef === hw || macsNamed(wf).some((m) => node.macs.includes(m))) return "conflict";
  return "unrelated";
}

/** `node` was checked where it entered (TinkerbellEffects.start: checkNode). */
export async function startWorkflow(objs: Objects, node: CheckedNode, req: WorkflowRequest): Promise<StartedWorkflow> {
  const want = buildWorkflow(node, req, objs.namespace);
  const name = want.metadata.name;

  const same = await objs.get(WORKFLOW, name, WorkflowObject);
  if (same) {
    if (!isOurs(same.metadata)) throw new TinkerbellError("not-ours", `Workflow ${objs.namespace}/${name} exists and is not fleetd's`);
    return { name, created: false, deleted: [] };
  }

  await checkMacsUnique(objs, node);
  const all = (await objs.list(WORKFLOW, "", WorkflowObject)).filter((w) => !w.metadata.deletionTimestamp);
  const remove: StartedWorkflow["deleted"] = [];
  const toDelete: WorkflowObject[] = [];
  for (const w of all) {
    const state = w.status?.state ?? "";
    const label = `${w.metadata.name} (${state || "not yet reconciled"})`;
    const rel = relationOf(w, node);
    if (rel === "unrelated") continue;
    if (rel === "own") {
      if (isFinished(state)) {
        remove.push({ name: w.metadata.name, state, why: "finished" });
      } else if (req.mode === "wipe" && w.metadata.labels?.[LABEL_MODE] !== "wipe") {
        remove.push({ name: w.metadata.name, state, why: "superseded by wipe" });
      } else {
        throw new TinkerbellError("workflow-in-progress", `${node.name}: Workflow ${label} is still in progress; Tinkerbell serves one Workflow per machine — wait for it to finish${req.mode === "wipe" ? "" : ", or request wipe (which supersedes it)"}, or delete it`);
      }
      toDelete.push(w);
    } else if (rel === "intake") {
      remove.push({ name: w.metadata.name, state, why: "intake superseded" });
      toDelete.push(w);
    } else if (!isOurs(w.metadata) && !fromOurIntake(w)) {
      throw new TinkerbellError("not-ours", `${node.name}: Workflow ${label} targets this machine and is not fleetd's; fleetd does not delete it, and Tinkerbell would not serve a second one`);
    } else {
      throw new TinkerbellError("mac-in-use", `${node.name}: fleetd's Workflow ${label} (Hardware ${w.spec.hardwareRef || "none"}, device ${w.spec.hardwareMap?.["device_1"] ?? "none"}) names this node's Hardware or one of its MACs but is not this node's; fleetd does not delete it — correct the inventory, or delete it`);
    }
  }
  for (const w of toDelete) await objs.delete(WORKFLOW, w.metadata.name, w.metadata.uid);

  const hardware = await ensureHardware(objs, node);
  try {
    await objs.create(WORKFLOW, want);
  } catch (e) {
    if (!isAlreadyExists(e)) throw e;
    const raced = await objs.get(WORKFLOW, name, WorkflowObject);
    if (!raced || !isOurs(raced.metadata)) throw new TinkerbellError("not-ours", `Workflow ${objs.namespace}/${name} appeared meanwhile and is not fleetd's`);
    return { name, created: false, deleted: remove, hardware };
  }
  return { name, created: true, deleted: remove, hardware };
}
