/**
 * Keeps fleetd's Templates (and, with intake on, the intake WorkflowRuleSet) in the namespace as the site
 * configuration renders them. A running Workflow keeps what it was rendered from (tink-controller copies the
 * tasks into its status when it starts), so updating a Template in place is safe.
 */
import { TEMPLATE, WORKFLOW_RULE_SET } from "./api.js";
import type { Objects } from "./objects.js";
import { buildIntakeRuleSet } from "./ruleSet.js";
import { buildTemplates, type TemplateInputs } from "./templates.js";
import { syncObjects, type SyncCounts } from "./sync.js";

export async function ensureTemplates(objs: Objects, i: TemplateInputs): Promise<{ templates: SyncCounts; ruleSets: SyncCounts }> {
  const templates = await syncObjects(objs, TEMPLATE, buildTemplates(i, objs.namespace), { scope: "fleetd.io/template", managedSpecKeys: ["data"], prune: true });
  const ruleSets = await syncObjects(objs, WORKFLOW_RULE_SET, i.site.intake.enabled ? [buildIntakeRuleSet(i.site, objs.namespace)] : [], {
    scope: "",
    managedSpecKeys: ["rules", "workflow"],
    prune: true,
  });
  return { templates, ruleSets };
}
