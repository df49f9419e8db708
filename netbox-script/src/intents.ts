/**
 * Recorded intents: what the handler decided, and what was done about it (the Tinkerbell Workflow it created,
 * a refusal, or nothing when no management cluster is configured): the record of what was asked.
 * Keyed by the request (device + the change-log entry that asked), so a retried job never doubles an intent.
 *
 * A dispatched request is first **claimed** here (durably), then taken in NetBox (desired_action cleared with
 * If-Match), then its effect runs and the intent is **settled** with the effect's outcome. A claim whose effect
 * did not finish (an API error, a crash) is resumed by the next run of the device's job if NetBox shows the
 * handler's take of exactly that request; otherwise it is **abandoned** (nothing ran). One line per step; the
 * last line of a key is its state.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Intent } from "@fleetd/platform/netbox";
import { appendDurable } from "./durable.js";
import type { EffectOutcome } from "./effects.js";

export interface RecordedIntent extends Intent {
  key: string;
  recordedAt: string;
  /** What was done about it: the Workflow's name, a refusal with its reason, or only recorded. */
  effect?: EffectOutcome;
  /** Absent: settled (the effect ran, or was refused). */
  state?: "claimed" | "abandoned";
}

export interface IntentSink {
  record(key: string, intent: Intent, effect?: EffectOutcome): RecordedIntent | undefined;
}

/** Only the intent's own fields (a recorded intent passed back in carries its bookkeeping too). */
function intentOf(i: Intent): Intent {
  return { action: i.action, deviceId: i.deviceId, node: i.node, requestedBy: i.requestedBy, ...(i.role ? { role: i.role } : {}) };
}

export class IntentLog implements IntentSink {
  private readonly path: string;
  /** The last state of each key, in first-seen order. */
  private readonly byKey = new Map<string, RecordedIntent>();
  /** Device → its claimed, unsettled request (jobs of one device run one after another: at most one). */
  private readonly claimed = new Map<number, string>();

  constructor(stateDir: string) {
    this.path = join(stateDir, "intents.jsonl");
    if (!existsSync(this.path)) return;
    for (const l of readFileSync(this.path, "utf8").split("\n")) {
      if (l.length === 0) continue;
      this.index(JSON.parse(l) as RecordedIntent);
    }
  }

  /** The settled requests: what was asked and what was done about it (claims in progress are not listed). */
  all(): RecordedIntent[] {
    return [...this.byKey.values()].filter((r) => r.state === undefined);
  }

  /** True once the request's effect ran (or was refused): it is never run again. */
  has(key: string): boolean {
    const r = this.byKey.get(key);
    return r !== undefined && r.state === undefined;
  }

  /** A device's claimed request whose effect has not finished, if any. */
  unsettledFor(deviceId: number): RecordedIntent | undefined {
    const key = this.claimed.get(deviceId);
    return key === undefined ? undefined : this.byKey.get(key);
  }

  private append(r: RecordedIntent): RecordedIntent {
    appendDurable(this.path, JSON.stringify(r));
    this.index(r);
    return r;
  }

  private index(r: RecordedIntent): void {
    this.byKey.delete(r.key); // insertion order = order of the last step
    this.byKey.set(r.key, r);
    if (r.state === "claimed") this.claimed.set(r.deviceId, r.key);
    else if (this.claimed.get(r.deviceId) === r.key) this.claimed.delete(r.deviceId);
  }

  /** Durably marks a request as about to be taken and run (before NetBox's conditional write). */
  claim(key: string, intent: Intent): void {
    if (this.has(key) || this.byKey.get(key)?.state === "claimed") return;
    this.append({ ...intentOf(intent), key, recordedAt: new Date().toISOString(), state: "claimed" });
  }

  /** A claim that will not run (the request changed before it was taken). */
  abandon(key: string): void {
    const r = this.byKey.get(key);
    if (r?.state !== "claimed") return;
    this.append({ ...r, recordedAt: new Date().toISOString(), state: "abandoned" });
  }

  /** Settles a request with its effect, once per key; returns undefined if it was already settled. */
  record(key: string, intent: Intent, effect?: EffectOutcome): RecordedIntent | undefined {
    if (this.has(key)) return undefined;
    return this.append({ ...intentOf(intent), key, recordedAt: new Date().toISOString(), ...(effect ? { effect } : {}) });
  }
}
