/**
 * The Tinkerbell and Rufio v1alpha1 APIs fleetd writes to (management cluster), declared once: group, version,
 * plural per kind (Hardware's plural is `hardware`), the labels that mark an object as fleetd's, and zod
 * schemas for what is read back (tinkerbell.md §1–2; CRDs of github.com/tinkerbell/tinkerbell v0.25.0).
 */
import { z } from "zod";
import { OWNER_LABEL, OWNER_VALUE } from "../fleet/ownership.js";

export interface ApiResource {
  group: string;
  version: string;
  plural: string;
  kind: string;
}

const tink = (plural: string, kind: string): ApiResource => ({ group: "tinkerbell.org", version: "v1alpha1", plural, kind });
const bmc = (plural: string, kind: string): ApiResource => ({ group: "bmc.tinkerbell.org", version: "v1alpha1", plural, kind });

export const HARDWARE = tink("hardware", "Hardware");
export const TEMPLATE = tink("templates", "Template");
export const WORKFLOW = tink("workflows", "Workflow");
export const WORKFLOW_RULE_SET = tink("workflowrulesets", "WorkflowRuleSet");
export const BMC_MACHINE = bmc("machines", "Machine");
export const BMC_JOB = bmc("jobs", "Job");
export const BMC_TASK = bmc("tasks", "Task");

export const apiVersionOf = (r: ApiResource): string => `${r.group}/${r.version}`;

/** Labels on every object fleetd creates; fleetd changes or deletes only objects that carry MANAGED_BY. */
/** fleetd's ownership label (../fleet/ownership.ts), never app.kubernetes.io/managed-by. */
export const LABEL_MANAGED_BY = OWNER_LABEL;
export const MANAGED_BY = OWNER_VALUE;
export const LABEL_NODE = "fleetd.io/node";
export const LABEL_MODE = "fleetd.io/mode";
/** On Workflows retirement starts: retirement follows (journals, restarts) them itself. */
export const LABEL_RETIREMENT = "fleetd.io/retirement";
/** How often a Workflow was started again after its boot Job failed (bootRestart.ts). */
export const ANNOTATION_BOOT_RESTARTS = "fleetd.io/boot-restarts";
/** Set once the Workflow's end is journalled in NetBox (outcome.ts): the end is journalled once. */
export const ANNOTATION_OUTCOME = "fleetd.io/outcome-journalled";
/** SHA-256 prefix of the request that started a Workflow (the request id itself may not be a label value). */
export const LABEL_REQUEST = "fleetd.io/request";
/** The label tink-server puts on Workflows it creates from a WorkflowRuleSet (TB tink/server/internal/grpc/enrollment.go). */
export const LABEL_AUTO_ENROLLMENT = "tinkerbell.org/auto-enrollment";

export const ownedLabels = (node?: string): Record<string, string> => ({ [LABEL_MANAGED_BY]: MANAGED_BY, ...(node ? { [LABEL_NODE]: node } : {}) });

export const ObjectMeta = z
  .object({
    name: z.string(),
    namespace: z.string().optional(),
    uid: z.string().optional(),
    resourceVersion: z.string().optional(),
    labels: z.record(z.string(), z.string()).optional(),
    annotations: z.record(z.string(), z.string()).optional(),
    creationTimestamp: z.string().optional(),
    deletionTimestamp: z.string().optional(),
    ownerReferences: z.array(z.object({ apiVersion: z.string(), kind: z.string(), name: z.string(), uid: z.string().optional() }).passthrough()).optional(),
  })
  .passthrough();
export type ObjectMeta = z.infer<typeof ObjectMeta>;

export const isOurs = (m: ObjectMeta): boolean => m.labels?.[LABEL_MANAGED_BY] === MANAGED_BY;

/** Any object, read back: only metadata is judged here; each kind's reader adds what it uses. */
export const AnyObject = z.object({ apiVersion: z.string().optional(), kind: z.string().optional(), metadata: ObjectMeta }).passthrough();
export type AnyObject = z.infer<typeof AnyObject>;

export const ObjectList = z.object({ items: z.array(AnyObject), metadata: z.object({ continue: z.string().optional() }).passthrough().optional() }).passthrough();

/** Workflow `status.state` (TB api/v1alpha1/tinkerbell/workflow.go); "" until the controller first reconciles. */
export const WORKFLOW_STATES = ["", "PREPARING", "PENDING", "RUNNING", "POST", "SUCCESS", "FAILED", "TIMEOUT"] as const;
export type WorkflowStateName = (typeof WORKFLOW_STATES)[number];
export const FINISHED_STATES: readonly WorkflowStateName[] = ["SUCCESS", "FAILED", "TIMEOUT"];

const Condition = z.object({ type: z.string(), status: z.string(), reason: z.string().optional(), message: z.string().optional() }).passthrough();

export const WorkflowObject = AnyObject.extend({
  spec: z
    .object({
      templateRef: z.string().optional(),
      hardwareRef: z.string().optional(),
      hardwareMap: z.record(z.string(), z.string()).optional(),
      disabled: z.boolean().optional(),
      bootOptions: z.object({ toggleAllowNetboot: z.boolean().optional(), bootMode: z.string().optional() }).passthrough().optional(),
    })
    .passthrough()
    .default({}),
  status: z
    .object({
      // Unknown future states are kept as text and treated as unfinished (fail closed).
      state: z.string().optional(),
      agentID: z.string().optional(),
      conditions: z.array(Condition).optional(),
      currentState: z.object({ actionName: z.string().optional(), state: z.string().optional() }).passthrough().optional(),
      templateRendering: z.string().optional(),
      globalTimeout: z.number().optional(),
      // What tink-server recorded per action (the agent's report: state and message).
      tasks: z
        .array(
          z
            .object({
              name: z.string().optional(),
              actions: z.array(z.object({ name: z.string().optional(), state: z.string().optional(), message: z.string().optional() }).passthrough()).optional(),
            })
            .passthrough(),
        )
        .optional(),
    })
    .passthrough()
    .optional(),
});
export type WorkflowObject = z.infer<typeof WorkflowObject>;

export const JobObject = AnyObject.extend({
  status: z.object({ conditions: z.array(Condition).optional(), startTime: z.string().optional(), completionTime: z.string().optional() }).passthrough().optional(),
});
export type JobObject = z.infer<typeof JobObject>;

/** Hardware as read back: only the interfaces' MACs are judged (any owner's Hardware is read to keep MACs unique). */
export const HardwareRead = AnyObject.extend({
  spec: z
    .object({ interfaces: z.array(z.object({ dhcp: z.object({ mac: z.string().optional() }).passthrough().optional() }).passthrough()).optional() })
    .passthrough()
    .default({}),
});
export type HardwareRead = z.infer<typeof HardwareRead>;
