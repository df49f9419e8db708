/**
 * Which of a machine's MACs it netboots from, as Tinkerbell saw it: the agent ID (`device_1`) of the intake
 * Workflow tink-server created for it from fleetd's rule set. The action's claims list every physical MAC,
 * sorted, without saying which one booted.
 */
import { LABEL_AUTO_ENROLLMENT, WORKFLOW, WORKFLOW_RULE_SET, WorkflowObject } from "./api.js";
import type { Objects } from "./objects.js";
import { INTAKE_RULE_SET } from "./ruleSet.js";

export async function intakeAgentMac(objs: Objects, macs: readonly string[]): Promise<string | undefined> {
  const wfs = await objs.list(WORKFLOW, `${LABEL_AUTO_ENROLLMENT}=true`, WorkflowObject);
  const hits = new Set<string>();
  for (const w of wfs) {
    if (!(w.metadata.ownerReferences ?? []).some((o) => o.kind === WORKFLOW_RULE_SET.kind && o.name === INTAKE_RULE_SET)) continue;
    const agent = (w.spec.hardwareMap?.["device_1"] ?? w.status?.agentID ?? "").toLowerCase();
    if (macs.includes(agent)) hits.add(agent);
  }
  return hits.size === 1 ? [...hits][0] : undefined;
}
