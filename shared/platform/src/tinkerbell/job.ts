/**
 * Rufio Jobs (bmc.tinkerbell.org/v1alpha1) fleetd creates itself: power off (retirement), and the boot into the
 * installed OS after a provision Workflow succeeded (off, boot device disk, on). Netboot Jobs are the
 * controller's (Workflow bootMode netboot). Each task has exactly one key (maxProperties 1). Pure.
 */
import { apiVersionOf, BMC_JOB, LABEL_REQUEST, ownedLabels, type JobObject } from "./api.js";
import { bootDiskJobName, machineName, powerOffJobName, requestTag } from "./names.js";
import type { NodeName } from "../fleet/node.js";

export interface PowerJobObject {
  apiVersion: string;
  kind: "Job";
  metadata: { name: string; namespace: string; labels: Record<string, string> };
  spec: { machineRef: { name: string; namespace: string }; tasks: { powerAction: "off" }[] };
}

export function buildPowerOffJob(node: NodeName, requestId: string, namespace: string): PowerJobObject {
  return {
    apiVersion: apiVersionOf(BMC_JOB),
    kind: "Job",
    metadata: { name: powerOffJobName(node, requestId), namespace, labels: { ...ownedLabels(node), [LABEL_REQUEST]: requestTag(requestId) } },
    // "off" is a hard power off (Rufio's `soft` is ACPI and unsupported by AMT).
    spec: { machineRef: { name: machineName(node), namespace }, tasks: [{ powerAction: "off" }] },
  };
}

export interface BootDiskJobObject {
  apiVersion: string;
  kind: "Job";
  metadata: { name: string; namespace: string; labels: Record<string, string> };
  spec: { machineRef: { name: string; namespace: string }; tasks: ({ powerAction: "off" | "on" } | { oneTimeBootDeviceAction: { device: ["disk"]; efiBoot: true } })[] };
}

/**
 * After `workflow` (a provision) succeeded: power the node off, boot it once from its disk (UEFI), power it on —
 * HookOS hands the machine over to the OS the Workflow installed. One per Workflow (`<workflow>-boot-disk`).
 */
export function buildBootDiskJob(node: NodeName, workflow: string, namespace: string): BootDiskJobObject {
  return {
    apiVersion: apiVersionOf(BMC_JOB),
    kind: "Job",
    metadata: { name: bootDiskJobName(workflow), namespace, labels: ownedLabels(node) },
    spec: {
      machineRef: { name: machineName(node), namespace },
      tasks: [{ powerAction: "off" }, { oneTimeBootDeviceAction: { device: ["disk"], efiBoot: true } }, { powerAction: "on" }],
    },
  };
}

export type JobState = { state: "pending" } | { state: "running" } | { state: "completed" } | { state: "failed"; message: string };

/** Rufio Job conditions (TB api/v1alpha1/bmc/job.go): Completed/Failed with status "True" end it. */
export function jobStateOf(j: JobObject): JobState {
  const c = j.status?.conditions ?? [];
  const failed = c.find((x) => x.type === "Failed" && x.status === "True");
  if (failed) return { state: "failed", message: failed.message ?? "(no message)" };
  if (c.some((x) => x.type === "Completed" && x.status === "True")) return { state: "completed" };
  if (c.some((x) => x.type === "Running" && x.status === "True") || j.status?.startTime) return { state: "running" };
  return { state: "pending" };
}
