/**
 * What the handler does with a device, decided from its *current* state (never from the webhook body):
 * the design's rules as data. No I/O here: the caller gathers the facts, this judges them.
 */
import type { NodeEntry } from "../inventory/nodesFile.js";
import type { Attribution } from "./changelog.js";
import type { DeviceRecord } from "./device.js";
import type { DesiredAction } from "./fields.js";

export type Trigger = "desired_action" | "decommissioning";

export interface Intent {
  /** What the platform side (Tinkerbell/Kubernetes, built elsewhere) is asked to do. */
  action: "provision" | "attest" | "wipe" | "decommission";
  deviceId: number;
  node: string;
  /** TPM 1.2 provision: wipe and stay in HookOS (no attestation, no install). */
  leaveInHookOS?: boolean;
  role?: "worker" | "control-plane";
  requestedBy: string | null;
}

export interface Facts {
  trigger: Trigger;
  device: DeviceRecord;
  desiredAction: DesiredAction | null;
  /** The node's entry in the nodes file, if any. */
  node: NodeEntry | undefined;
  /** Whether the device's EK bindings were written by the apply account (undefined: not checked). */
  ekAttribution: Attribution | undefined;
  /** Who requested it (from the change log), with their NetBox groups. */
  requester: { username: string; groups: string[] } | null;
  authorizedGroup: string;
  features: { controlPlanes: boolean };
}

export type Decision =
  | { outcome: "ignore"; reason: string }
  | { outcome: "dispatch"; intent: Intent; clearDesiredAction: boolean; journal: { kind: "success" | "warning" | "info"; text: string } }
  | { outcome: "refuse"; code: string; reason: string; clearDesiredAction: boolean };

/** Device statuses each action may start from. */
export const ALLOWED_STATUS: Record<DesiredAction, readonly string[]> = {
  provision: ["planned", "staged", "failed", "offline"],
  attest: ["planned", "staged", "active", "failed", "offline"],
  wipe: ["planned", "staged", "active", "failed", "offline", "inventory"],
};

/** Actions only members of the authorized group may request. */
export const PRIVILEGED: readonly string[] = ["wipe", "decommission"];

export function decide(f: Facts): Decision {
  const name = f.device.name ?? `#${f.device.id}`;
  const who = f.requester?.username ?? null;
  const refuse = (code: string, reason: string): Decision => ({ outcome: "refuse", code, reason, clearDesiredAction: f.trigger === "desired_action" });
  const authorized = (): boolean => f.requester !== null && f.requester.groups.includes(f.authorizedGroup);

  if (f.trigger === "decommissioning") {
    if (f.device.status !== "decommissioning") return { outcome: "ignore", reason: `status is ${f.device.status} now, no longer decommissioning` };
    if (!authorized()) {
      return refuse("not_authorized", `decommissioning ${name} was requested by ${who ?? "an unknown user"}, who is not in the group ${f.authorizedGroup}`);
    }
    return {
      outcome: "dispatch",
      intent: { action: "decommission", deviceId: f.device.id, node: name, requestedBy: who },
      clearDesiredAction: f.desiredAction !== null,
      journal: { kind: "info", text: `fleetd: decommission of ${name} accepted (requested by ${who}): wipe, then removal from the cluster` },
    };
  }

  const action = f.desiredAction;
  if (action === null) return { outcome: "ignore", reason: "desired_action is not set (already taken or cleared)" };
  if (!f.node) return refuse("not_in_inventory", `${name} is not in the nodes file: fleetd acts only on inventoried nodes`);
  if (!ALLOWED_STATUS[action].includes(f.device.status)) {
    return refuse("status_not_allowed", `${action} is not allowed while the device status is ${f.device.status} (allowed: ${ALLOWED_STATUS[action].join(", ")})`);
  }
  if (PRIVILEGED.includes(action) && !authorized()) {
    return refuse("not_authorized", `${action} of ${name} was requested by ${who ?? "an unknown user"}, who is not in the group ${f.authorizedGroup}`);
  }
  if (f.node.tpm === "none") return refuse("no_tpm", `${name} has no TPM (nodes file): fleetd cannot ${action} it`);
  if (f.node.tpm === "2.0") {
    if (!f.ekAttribution) return refuse("ek_binding_unchecked", "EK bindings were not checked");
    if (!f.ekAttribution.ok) return refuse(f.ekAttribution.code, f.ekAttribution.reason);
  }
  const base = { deviceId: f.device.id, node: name, requestedBy: who, role: f.node.role };
  if (f.node.tpm === "1.2") {
    if (action === "attest") return refuse("tpm12_no_attestation", `${name} has a TPM 1.2 (nodes file): it cannot be attested`);
    if (action === "provision") {
      return {
        outcome: "dispatch",
        intent: { ...base, action: "wipe", leaveInHookOS: true },
        clearDesiredAction: true,
        journal: { kind: "warning", text: `fleetd: ${name} has a TPM 1.2 (nodes file): provision cannot attest it, so it is wiped and left in HookOS` },
      };
    }
  }
  if (action === "provision" && f.node.role === "control-plane" && !f.features.controlPlanes) {
    return refuse("control_planes_disabled", `${name} is a control-plane node and control-plane installation is off (feature flag controlPlanes)`);
  }
  return {
    outcome: "dispatch",
    intent: { ...base, action },
    clearDesiredAction: true,
    journal: { kind: "success", text: `fleetd: ${action} of ${name} accepted${who ? ` (requested by ${who})` : ""}` },
  };
}
