/**
 * A Workflow per request (tinkerbell.org/v1alpha1), named deterministically from node, mode and request id.
 * hardwareMap carries `device_1` (the boot MAC = the agent ID) and `fleetd_workflow` (the Workflow's own name,
 * which the action sends as a claim). toggleAllowNetboot always (PXE off again after success); with a BMC also
 * bootMode netboot, so tink-controller creates and runs the Rufio Job `netboot-<workflow>` itself — fleetd
 * never creates its own boot Job then. Pure.
 */
import { apiVersionOf, LABEL_MODE, LABEL_REQUEST, LABEL_RETIREMENT, ownedLabels, WORKFLOW } from "./api.js";
import { hardwareName, requestTag, workflowName, type WorkflowMode } from "./names.js";
import type { CheckedNode } from "./node.js";
import { templateName } from "./templates.js";

export interface WorkflowManifest {
  apiVersion: string;
  kind: "Workflow";
  metadata: { name: string; namespace: string; labels: Record<string, string>; annotations: Record<string, string> };
  spec: {
    templateRef: string;
    hardwareRef: string;
    hardwareMap: { device_1: string; fleetd_workflow: string };
    bootOptions: { toggleAllowNetboot: true; bootMode?: "netboot" };
  };
}

export interface WorkflowRequest {
  mode: WorkflowMode;
  /** Who/what asked (e.g. the NetBox change-log entry); the same id names the same Workflow. */
  requestId: string;
  /** Started by retirement, which follows the Workflow itself (label fleetd.io/retirement). */
  retirement?: boolean;
}

export const ANNOTATION_REQUEST_ID = "fleetd.io/request-id";

export function buildWorkflow(n: CheckedNode, req: WorkflowRequest, namespace: string): WorkflowManifest {
  const name = workflowName(n.name, req.mode, req.requestId);
  return {
    apiVersion: apiVersionOf(WORKFLOW),
    kind: "Workflow",
    metadata: {
      name,
      namespace,
      labels: { ...ownedLabels(n.name), [LABEL_MODE]: req.mode, [LABEL_REQUEST]: requestTag(req.requestId), ...(req.retirement ? { [LABEL_RETIREMENT]: "true" } : {}) },
      annotations: { [ANNOTATION_REQUEST_ID]: req.requestId.slice(0, 1000) },
    },
    spec: {
      templateRef: templateName(req.mode),
      hardwareRef: hardwareName(n.name),
      hardwareMap: { device_1: n.macs[0] as string, fleetd_workflow: name },
      bootOptions: { toggleAllowNetboot: true, ...(n.bmc ? { bootMode: "netboot" as const } : {}) },
    },
  };
}
