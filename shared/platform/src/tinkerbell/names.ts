/**
 * Deterministic object names: a retried request names the same Workflow (AlreadyExists is then success), and a
 * node's objects are found by name and label alike.
 */
import { createHash } from "node:crypto";
import { isNodeName, type NodeName } from "../fleet/node.js";
import { TinkerbellError } from "./errors.js";

export type WorkflowMode = "provision" | "attest" | "wipe";

/**
 * The one check of a node name where it enters the Tinkerbell adapter (checkNode, the effects' entry points, the
 * Workflow gate): a DNS label, or `invalid-input`. Everything below takes the `NodeName` it returns.
 */
export function requireNodeName(node: string): NodeName {
  if (!isNodeName(node)) throw new TinkerbellError("invalid-input", `node name "${node}" is not a DNS label`);
  return node;
}

/** First 10 hex digits of SHA-256(request id): a label value and a name part, for any request id. */
export const requestTag = (requestId: string): string => createHash("sha256").update(requestId, "utf8").digest("hex").slice(0, 10);

/** `fleetd-<node>-<mode>-<tag>`; at most 6+63+1+9+1+10 = 90 characters (Workflow names may have 253; the
 *  controller's Job `netboot-<workflow>` and its Tasks `<job>-task-<n>` stay well inside that). */
export const workflowName = (node: NodeName, mode: WorkflowMode, requestId: string): string => `fleetd-${node}-${mode}-${requestTag(requestId)}`;

/** Hardware and BMC Machine are named as the node (different kinds; one each per node). */
export const hardwareName = (node: NodeName): string => node;
export const machineName = (node: NodeName): string => node;
export const bmcSecretName = (node: NodeName): string => `fleetd-bmc-${node}`;
export const powerOffJobName = (node: NodeName, requestId: string): string => `fleetd-${node}-poweroff-${requestTag(requestId)}`;
/** The Job that boots the OS a provision Workflow installed: `<workflow>-boot-disk` (at most 100 characters). */
export const bootDiskJobName = (workflow: string): string => `${workflow}-boot-disk`;

/** The Workflow tink-server creates for an auto-enrolled agent (TB tink/server/internal/grpc/kube.go makeValidName). */
export function enrollmentWorkflowName(agentId: string): string {
  let s = `enrollment-${agentId.trim()}`;
  if (!/[a-zA-Z0-9]$/.test(s)) s += "e";
  return s.replace(/[^a-zA-Z0-9-]/g, "-").replace(/-+/g, "-").replace(/^-+|-+$/g, "");
}
