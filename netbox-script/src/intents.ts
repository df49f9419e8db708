/**
 * Recorded intents: what the handler decided, and what was done about it (the Tinkerbell Workflow it created,
 * a refusal, or nothing when no management cluster is configured): the record of what was asked. Kept in the
 * state store (HandlerStore), keyed by the request (device + the change-log entry that asked), so a retried job
 * — on this replica or another — never doubles an intent.
 *
 * A dispatched request is first **claimed** (durably, at most one unsettled claim per device), then taken in
 * NetBox (desired_action cleared with If-Match), then its effect runs and the intent is **settled** with the
 * effect's outcome. A claim whose effect did not finish (an API error, a crash) is resumed by the next run of
 * the device's job if NetBox shows the handler's take of exactly that request; otherwise it is **abandoned**
 * (nothing ran).
 */
import type { Intent } from "@fleetd/platform/netbox";
import type { HandlerIntentRecord, HandlerStore } from "@fleetd/platform/state";
import type { EffectOutcome } from "./effects.js";

export interface RecordedIntent extends Intent {
  key: string;
  recordedAt: string;
  /** What was done about it: the Workflow's name, a refusal with its reason, or only recorded. */
  effect?: EffectOutcome;
  /** Absent: settled (the effect ran, or was refused). */
  state?: "claimed" | "abandoned";
}

/** Only the intent's own fields (a recorded intent passed back in carries its bookkeeping too). */
function intentOf(i: Intent): Intent {
  return { action: i.action, deviceId: i.deviceId, node: i.node, requestedBy: i.requestedBy, ...(i.role ? { role: i.role } : {}) };
}

/** A stored record back as netbox-script's types (the store keeps what intentOf and the effect wrote, as JSON). */
function recorded(r: HandlerIntentRecord): RecordedIntent {
  return {
    ...(r.intent as unknown as Intent),
    key: r.key,
    recordedAt: new Date(r.recordedAt).toISOString(),
    ...(r.effect ? { effect: r.effect as unknown as EffectOutcome } : {}),
    ...(r.state === "settled" ? {} : { state: r.state }),
  };
}

export class IntentClaimBusy extends Error {
  override readonly name = "IntentClaimBusy";
}

export class Intents {
  constructor(private readonly store: HandlerStore) {}

  /** The settled requests: what was asked and what was done about it (claims in progress are not listed). */
  async all(): Promise<RecordedIntent[]> {
    return (await this.store.listIntents()).map(recorded);
  }

  /** A device's claimed request whose effect has not finished, if any. */
  async unsettledFor(deviceId: number): Promise<RecordedIntent | undefined> {
    const r = await this.store.unsettledIntent(deviceId);
    return r ? recorded(r) : undefined;
  }

  /**
   * Durably marks a request as about to be taken and run (before NetBox's conditional write). Throws
   * IntentClaimBusy when the device holds another unsettled claim (another replica's run: the job is retried).
   */
  async claim(key: string, intent: Intent): Promise<void> {
    const c = await this.store.claimIntent(key, intent.deviceId, { ...intentOf(intent) }, Date.now());
    if (c === "busy") throw new IntentClaimBusy(`device ${intent.deviceId} has another request claimed and not settled`);
  }

  /** A claim that will not run (the request changed before it was taken). */
  async abandon(key: string, deviceId: number): Promise<void> {
    await this.store.abandonIntent(key, deviceId, Date.now());
  }

  /** Settles a request with its effect, once per key; returns undefined if it was already settled. */
  async record(key: string, intent: Intent, effect?: EffectOutcome): Promise<RecordedIntent | undefined> {
    const r = await this.store.settleIntent(key, intent.deviceId, { ...intentOf(intent) }, effect ? { ...effect } : undefined, Date.now());
    return r ? recorded(r) : undefined;
  }
}
