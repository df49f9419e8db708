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
 *
 * Who can wipe what (a wipe destroys a disk, so it is the privileged case):
 *  - only members of `authorizedGroup` start a wipe or a decommission (whose retirement wipes the whole disk);
 *  - a wipe Workflow targets only the node's boot MAC as TPM evidence proved it (`boot_mac`, written by the
 *    attestation account after a passing attestation, checked against the change log: netbox/bootMac.ts), and its
 *    first action attests again (`fleetd-attest` in mode wipe: the approved EK and the HookOS boot) before
 *    `wipe-disk` runs; a machine that fails it is left untouched in HookOS. There is no unattested wipe.
 *
 * TPM 1.2 nodes (the trust decision; talos-config-server/README.md "TPM 1.2 machines"): a TPM 1.2 can prove its approved
 * EK (TPM_ActivateIdentity) and its boot (an AIK quote over SHA-1 PCRs, profile `hookos-tpm12`), but fleetd never
 * releases anything to it (no LDevID, LAK, install code or Talos config: SPIRE's tpm_devid and the install code
 * need TPM 2.0). So a TPM 1.2 node is taken in (intake) and wiped, nothing else:
 *  - wipe and decommission: as above — group members only, the node's EK bindings written by the apply account,
 *    and a boot MAC proven by a passing TPM 1.2 intake (`bootMac` below); without one, refused before any effect;
 *  - provision: refused (`tpm12-no-provision`) — it stays refused rather than becoming a wipe, so that a device
 *    editor's provision request never turns into a disk wipe; a group member asks for `wipe` explicitly;
 *  - attest: refused (`tpm12-no-attestation`) — there is nothing to verify or renew.
 */
import type { NodeEntry } from "../fleet/nodesFile.js";
import { mdCode } from "@fleetd/verify/text";
import type { ProvenMac } from "./bootMac.js";
import type { Attribution, AttributionCode } from "./changelog.js";
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
  /**
   * The node's boot MAC as TPM evidence proved it (boot_mac by the attestation account), gathered for TPM 1.2
   * nodes (undefined: not checked). A TPM 1.2 wipe targets exactly this MAC; without one nothing runs.
   */
  bootMac?: ProvenMac | undefined;
  /** Who requested it (from the change log), with their NetBox groups. */
  requester: { username: string; groups: string[] } | null;
  authorizedGroup: string;
  features: { controlPlanes: boolean };
}

/** Why the handler refuses a request (journalled on the device and logged). */
export const REFUSAL_CODES = [
  "not-authorized",
  "not-in-inventory",
  "status-not-allowed",
  "no-tpm",
  "tpm12-no-attestation",
  "tpm12-no-provision",
  "tpm12-no-ek",
  "ek-binding-unchecked",
  "control-planes-disabled",
  /** netbox-script's worker: the device changed between the decision and the start of its effect. */
  "request-changed",
] as const;
/** REFUSAL_CODES, or an attribution check's code (`<field>-unattributed`, `boot-mac-unproven`). */
export type RefusalCode = (typeof REFUSAL_CODES)[number] | AttributionCode;

export type Decision =
  | { outcome: "ignore"; reason: string }
  | { outcome: "dispatch"; intent: Intent; clearDesiredAction: boolean; journal: { kind: "success" | "warning" | "info"; text: string } }
  | { outcome: "refuse"; code: RefusalCode; reason: string; clearDesiredAction: boolean };

/** Device statuses each action may start from. */
export const ALLOWED_STATUS: Record<DesiredAction, readonly string[]> = {
  provision: ["planned", "staged", "failed", "offline"],
  attest: ["planned", "staged", "active", "failed", "offline"],
  wipe: ["planned", "staged", "active", "failed", "offline", "inventory"],
};

/** Actions only members of the authorized group may have run (judged on the dispatched intent's action). */
export const PRIVILEGED: readonly Intent["action"][] = ["wipe", "decommission"];

/**
 * Why a TPM 1.2 wipe cannot start, or undefined when it can: approved EK bindings written by the apply account,
 * and a boot MAC that a passing TPM 1.2 attestation proved (the Workflow netboots whatever machine answers to that
 * MAC; only TPM evidence ties the MAC to the approved EK).
 */
function tpm12WipeBlocked(f: Facts, name: string, what: string): { code: RefusalCode; reason: string } | undefined {
  if (!f.node?.ek || f.node.ek.length === 0) {
    return { code: "tpm12-no-ek", reason: `${name} has a TPM 1.2 but the nodes file approves no EK for it: no TPM evidence could prove which machine ${what} reaches` };
  }
  if (f.trigger === "desired_action") {
    if (!f.ekAttribution) return { code: "ek-binding-unchecked", reason: "EK bindings were not checked" };
    if (!f.ekAttribution.ok) return { code: f.ekAttribution.code, reason: f.ekAttribution.reason };
  }
  if (!f.bootMac) return { code: "boot-mac-unproven", reason: `the boot MAC of ${name} was not checked` };
  if (!f.bootMac.ok) {
    return {
      code: "boot-mac-unproven",
      reason: `${what} of ${name} (TPM 1.2) targets only a boot MAC proven by a passing TPM 1.2 intake, and there is none: ${f.bootMac.reason}. Run its intake first (netboot it into the intake Workflow)`,
    };
  }
  return undefined;
}

export function decide(f: Facts): Decision {
  const node = f.device.name ?? `#${f.device.id}`;
  // For journals: a name the nodes file does not vouch for (any NetBox user can type one) as a code span.
  const name = f.node ? node : mdCode(node);
  const who = f.requester?.username ?? null;
  const refuse = (code: RefusalCode, reason: string): Decision => ({ outcome: "refuse", code, reason, clearDesiredAction: f.trigger === "desired_action" });
  const authorized = (): boolean => f.requester !== null && f.requester.groups.includes(f.authorizedGroup);
  /** The one way out with an intent: the action that will run is the one authorized. */
  const dispatch = (intent: Intent, clearDesiredAction: boolean, journal: { kind: "success" | "warning" | "info"; text: string }): Decision => {
    if (PRIVILEGED.includes(intent.action) && !authorized()) {
      const what = intent.action === "decommission" ? `decommissioning ${name}` : `${intent.action} of ${name}`;
      return refuse("not-authorized", `${what} was requested by ${who ?? "an unknown user"}, who is not in the group ${f.authorizedGroup}`);
    }
    return { outcome: "dispatch", intent, clearDesiredAction, journal };
  };
  const by = who ? ` (requested by ${who})` : "";

  if (f.trigger === "decommissioning") {
    if (f.device.status !== "decommissioning") return { outcome: "ignore", reason: `status is ${f.device.status} now, no longer decommissioning` };
    if (f.node?.tpm === "1.2") {
      const blocked = tpm12WipeBlocked(f, name, "the retirement's wipe");
      if (blocked) return refuse(blocked.code, blocked.reason);
    }
    return dispatch({ action: "decommission", deviceId: f.device.id, node, requestedBy: who }, f.desiredAction !== null, {
      kind: "info",
      text: `fleetd: decommission of ${name} accepted${by}: wipe, then removal from the cluster`,
    });
  }

  const action = f.desiredAction;
  if (action === null) return { outcome: "ignore", reason: "desired_action is not set (already taken or cleared)" };
  if (!f.node) return refuse("not-in-inventory", `${name} is not in the nodes file: fleetd acts only on inventoried nodes`);
  if (!ALLOWED_STATUS[action].includes(f.device.status)) {
    return refuse("status-not-allowed", `${action} is not allowed while the device status is ${f.device.status} (allowed: ${ALLOWED_STATUS[action].join(", ")})`);
  }
  if (f.node.tpm === "none") return refuse("no-tpm", `${name} has no TPM (nodes file): fleetd cannot ${action} it`);
  if (f.node.tpm === "1.2") {
    if (action === "attest") {
      return refuse("tpm12-no-attestation", `${name} has a TPM 1.2 (nodes file): it attests only at intake and before a wipe; fleetd issues it nothing, so there is nothing to verify or renew`);
    }
    if (action === "provision") {
      return refuse(
        "tpm12-no-provision",
        `${name} has a TPM 1.2 (nodes file): fleetd does not install it (Talos' install code and SPIRE's tpm_devid need a TPM 2.0; a TPM 1.2 gets no LDevID, LAK, install code or config). A member of ${f.authorizedGroup} can ask for wipe instead`,
      );
    }
    const blocked = tpm12WipeBlocked(f, name, "the wipe");
    if (blocked) return refuse(blocked.code, blocked.reason);
    return dispatch({ deviceId: f.device.id, node, requestedBy: who, role: f.node.role, action }, true, {
      kind: "success",
      text: `fleetd: ${action} of ${name} (TPM 1.2) accepted${by}: the Workflow proves the TPM 1.2 EK and boot, then wipes the disk`,
    });
  }
  if (!f.ekAttribution) return refuse("ek-binding-unchecked", "EK bindings were not checked");
  if (!f.ekAttribution.ok) return refuse(f.ekAttribution.code, f.ekAttribution.reason);
  if (action === "provision" && f.node.role === "control-plane" && !f.features.controlPlanes) {
    return refuse("control-planes-disabled", `${name} is a control-plane node and control-plane installation is off (feature flag controlPlanes)`);
  }
  return dispatch({ deviceId: f.device.id, node, requestedBy: who, role: f.node.role, action }, true, {
    kind: "success",
    text: `fleetd: ${action} of ${name} accepted${by}`,
  });
}
