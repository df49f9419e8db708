/**
 * What the handler does with a device, decided from its *current* state (never from the webhook body):
 * the design's rules as data. No I/O here: the caller gathers the facts, this judges them.
 *
 * Who may start what (the input's owner, style §10: `desired_action` and `status` are editable by any NetBox user
 * with change rights on the device; the requester is the change log's user, with live groups):
 *  - provision, attest: any device editor — both are attested Workflows (the machine proves its EK binding
 *    before anything is released or, for provision, before the install disk is overwritten).
 *  - wipe, decommission (retirement wipes the whole disk): members of `authorizedGroup` only.
 * Authorization is judged on the intent that is dispatched — the action that will run — at the one place an
 * intent leaves this function (`dispatch`), so no rule above it can turn a request into a privileged action
 * that escapes the group check.
 * A TPM 1.2 node is refused every action that boots it into a Workflow (provision, attest, wipe, decommission):
 * fleetd has no TPM 1.2 identity proof yet, so no TPM evidence could show which machine the Workflow reaches.
 */
import type { NodeEntry } from "../inventory/nodesFile.js";
import { mdCode } from "../text/untrusted.js";
import type { Attribution } from "./changelog.js";
import type { DeviceRecord } from "./device.js";
import type { DesiredAction } from "./fields.js";

export type Trigger = "desired_action" | "decommissioning";

export interface Intent {
  /** What will run on the platform side (Tinkerbell/Kubernetes): exactly the action that was authorized. */
  action: "provision" | "attest" | "wipe" | "decommission";
  deviceId: number;
  node: string;
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

/** Actions only members of the authorized group may have run (judged on the dispatched intent's action). */
export const PRIVILEGED: readonly Intent["action"][] = ["wipe", "decommission"];

/** The refusal of a TPM 1.2 node's Workflow, for people: the trust decision and what to do instead. */
function tpm12Refusal(name: string, what: string): string {
  return (
    `${name} has a TPM 1.2 (nodes file), and fleetd has no TPM 1.2 identity proof yet: no TPM evidence can prove ` +
    `which machine ${what} would reach (the Workflow netboots whatever machine answers to a MAC address that NetBox ` +
    `holds and device editors can change), so fleetd will not wipe or install it. Wipe it by hand or through its BMC.`
  );
}

export function decide(f: Facts): Decision {
  const node = f.device.name ?? `#${f.device.id}`;
  // For journals: a name the nodes file does not vouch for (any NetBox user can type one) as a code span.
  const name = f.node ? node : mdCode(node);
  const who = f.requester?.username ?? null;
  const refuse = (code: string, reason: string): Decision => ({ outcome: "refuse", code, reason, clearDesiredAction: f.trigger === "desired_action" });
  const authorized = (): boolean => f.requester !== null && f.requester.groups.includes(f.authorizedGroup);
  /** The one way out with an intent: the action that will run is the one authorized. */
  const dispatch = (intent: Intent, clearDesiredAction: boolean, journal: { kind: "success" | "warning" | "info"; text: string }): Decision => {
    if (PRIVILEGED.includes(intent.action) && !authorized()) {
      const what = intent.action === "decommission" ? `decommissioning ${name}` : `${intent.action} of ${name}`;
      return refuse("not_authorized", `${what} was requested by ${who ?? "an unknown user"}, who is not in the group ${f.authorizedGroup}`);
    }
    return { outcome: "dispatch", intent, clearDesiredAction, journal };
  };
  const by = who ? ` (requested by ${who})` : "";

  if (f.trigger === "decommissioning") {
    if (f.device.status !== "decommissioning") return { outcome: "ignore", reason: `status is ${f.device.status} now, no longer decommissioning` };
    if (f.node?.tpm === "1.2") return refuse("tpm12_no_identity_proof", tpm12Refusal(name, "the retirement's wipe"));
    return dispatch({ action: "decommission", deviceId: f.device.id, node, requestedBy: who }, f.desiredAction !== null, {
      kind: "info",
      text: `fleetd: decommission of ${name} accepted${by}: wipe, then removal from the cluster`,
    });
  }

  const action = f.desiredAction;
  if (action === null) return { outcome: "ignore", reason: "desired_action is not set (already taken or cleared)" };
  if (!f.node) return refuse("not_in_inventory", `${name} is not in the nodes file: fleetd acts only on inventoried nodes`);
  if (!ALLOWED_STATUS[action].includes(f.device.status)) {
    return refuse("status_not_allowed", `${action} is not allowed while the device status is ${f.device.status} (allowed: ${ALLOWED_STATUS[action].join(", ")})`);
  }
  if (f.node.tpm === "none") return refuse("no_tpm", `${name} has no TPM (nodes file): fleetd cannot ${action} it`);
  if (f.node.tpm === "1.2") {
    if (action === "attest") return refuse("tpm12_no_attestation", `${name} has a TPM 1.2 (nodes file): it cannot be attested (no TPM 1.2 identity proof yet)`);
    return refuse("tpm12_no_identity_proof", tpm12Refusal(name, action === "wipe" ? "the wipe" : "the provision (which wipes the install disk first)"));
  }
  if (!f.ekAttribution) return refuse("ek_binding_unchecked", "EK bindings were not checked");
  if (!f.ekAttribution.ok) return refuse(f.ekAttribution.code, f.ekAttribution.reason);
  if (action === "provision" && f.node.role === "control-plane" && !f.features.controlPlanes) {
    return refuse("control_planes_disabled", `${name} is a control-plane node and control-plane installation is off (feature flag controlPlanes)`);
  }
  return dispatch({ deviceId: f.device.id, node, requestedBy: who, role: f.node.role, action }, true, {
    kind: "success",
    text: `fleetd: ${action} of ${name} accepted${by}`,
  });
}
