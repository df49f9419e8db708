/**
 * What a dispatched intent does on the platform side. provision / attest / wipe: the node's Workflow in
 * Tinkerbell (Hardware, BMC Machine, Templates as needed; see shared/platform/src/tinkerbell). decommission: the
 * injected `retire` (shared/platform/src/retire, wired by the caller); without it, the intent is only recorded.
 * Without a management cluster configured, every intent is only recorded (the handler warns at start).
 * A refusal (TinkerbellError: no proven MAC, a Workflow still running, objects not fleetd's, credentials)
 * is permanent for this request: it is journalled, not retried. Anything else throws and the job is retried
 * (the same request names the same Workflow, so a retry never doubles one).
 */
import { platformNodeFromEntry, type NodeEntry, type PlatformNode } from "@fleetd/platform/fleet";
import type { DeviceRecord, Intent } from "@fleetd/platform/netbox";
import { TinkerbellError, type TinkerbellEffects, type TinkerbellErrorCode, canonicalMac } from "@fleetd/platform/tinkerbell";

export interface RetireRequest {
  node: string;
  deviceId: number;
  /** The request's key (device + change-log entry): the same request resumes, never repeats. */
  requestKey: string;
  requestedBy: string | null;
}
export type RetireFn = (req: RetireRequest) => Promise<void>;

export type EffectOutcome =
  | { effect: "intent-only"; why: string }
  | { effect: "workflow"; workflow: string; created: boolean; deleted: string[] }
  | { effect: "retire" }
  | { effect: "refused"; code: TinkerbellErrorCode | "not-in-inventory"; reason: string };

export interface EffectDeps {
  tinkerbell?: TinkerbellEffects;
  retire?: RetireFn;
  /**
   * The boot MAC TPM evidence proved (bootMac.ts: the field, attributed to the attestation account by the change
   * log), any case, of the device as the take confirmed it (the record its If-Match write matched).
   */
  bootMac(device: DeviceRecord): Promise<string | undefined>;
}

/** The node as the effects take it: its nodes-file entry and the boot MAC NetBox holds (canonicalised here; the effects check the rest once). */
export function platformNodeOf(name: string, entry: NodeEntry, mac: string | undefined): PlatformNode {
  return platformNodeFromEntry(name, entry, mac ? canonicalMac(mac) : undefined);
}

/**
 * `bootMac`: the proven boot MAC of the record the request was taken at (EffectDeps.bootMac of it, or the same read
 * made beside the take: see the worker), asked only when a Workflow is to be started.
 */
export async function applyIntent(d: EffectDeps, intent: Intent, requestKey: string, entry: NodeEntry | undefined, bootMac: () => Promise<string | undefined>): Promise<EffectOutcome> {
  if (intent.action === "decommission") {
    if (!d.retire) return { effect: "intent-only", why: "retirement is not wired into this handler" };
    await d.retire({ node: intent.node, deviceId: intent.deviceId, requestKey, requestedBy: intent.requestedBy });
    return { effect: "retire" };
  }
  if (!d.tinkerbell) return { effect: "intent-only", why: "no management cluster configured" };
  if (!entry) return { effect: "refused", code: "not-in-inventory", reason: `${intent.node} is not in the nodes file` };
  try {
    const node = platformNodeOf(intent.node, entry, await bootMac());
    const s = await d.tinkerbell.start(node, { mode: intent.action, requestId: requestKey });
    return { effect: "workflow", workflow: s.name, created: s.created, deleted: s.deleted.map((x) => `${x.name} (${x.state}, ${x.why})`) };
  } catch (e) {
    if (e instanceof TinkerbellError && e.code !== "bad-response") return { effect: "refused", code: e.code, reason: e.message };
    throw e;
  }
}
