/**
 * The WorkflowRuleSet for `intake` (auto-enrollment, tinkerbell.md §1.4): tink-server matches an unknown
 * agent's attributes against `rules` and creates `enrollment-<agent ID>` from fleetd's intake Template, with
 * `device_1` = the agent ID, in fleetd's namespace, with the attributes as an annotation. Those Workflows carry
 * an ownerReference to this rule set: fleetd may delete them (they are its own). Pure.
 */
import { apiVersionOf, ownedLabels, WORKFLOW_RULE_SET } from "./api.js";
import type { TinkerbellSiteConfig } from "../fleet/tinkerbellSiteConfig.js";
import { templateName } from "./templates.js";

export const INTAKE_RULE_SET = "fleetd-intake";

export interface WorkflowRuleSetObject {
  apiVersion: string;
  kind: "WorkflowRuleSet";
  metadata: { name: string; namespace: string; labels: Record<string, string> };
  spec: {
    rules: string[];
    workflow: { namespace: string; addAttributes: true; disabled: false; template: { ref: string; agentValue: "device_1"; kvs: Record<string, string> } };
  };
}

export function buildIntakeRuleSet(site: TinkerbellSiteConfig, namespace: string): WorkflowRuleSetObject {
  return {
    apiVersion: apiVersionOf(WORKFLOW_RULE_SET),
    kind: "WorkflowRuleSet",
    metadata: { name: INTAKE_RULE_SET, namespace, labels: ownedLabels() },
    spec: {
      rules: [...site.intake.rules],
      workflow: { namespace, addAttributes: true, disabled: false, template: { ref: templateName("intake"), agentValue: "device_1", kvs: { fleetd_mode: "intake" } } },
    },
  };
}
