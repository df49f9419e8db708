/**
 * Recorded intents: what the handler decided, and what was done about it (the Tinkerbell Workflow it created,
 * a refusal, or nothing when no management cluster is configured): the record of what was asked.
 * Keyed by the request (device + the change-log entry that asked), so a retried job never doubles an intent.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Intent } from "@fleetd/shared/netbox/decide";
import { appendDurable } from "./durable.js";
import type { EffectOutcome } from "./effects.js";

export interface RecordedIntent extends Intent {
  key: string;
  recordedAt: string;
  /** What was done about it: the Workflow's name, a refusal with its reason, or only recorded. */
  effect?: EffectOutcome;
}

export interface IntentSink {
  record(key: string, intent: Intent, effect?: EffectOutcome): RecordedIntent | undefined;
}

export class IntentLog implements IntentSink {
  private readonly path: string;
  private readonly keys = new Set<string>();

  constructor(stateDir: string) {
    this.path = join(stateDir, "intents.jsonl");
    for (const i of this.all()) this.keys.add(i.key);
  }

  all(): RecordedIntent[] {
    if (!existsSync(this.path)) return [];
    return readFileSync(this.path, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l) as RecordedIntent);
  }

  has(key: string): boolean {
    return this.keys.has(key);
  }

  /** Records once per key; returns undefined if it was already recorded. */
  record(key: string, intent: Intent, effect?: EffectOutcome): RecordedIntent | undefined {
    if (this.keys.has(key)) return undefined;
    const r: RecordedIntent = { ...intent, key, recordedAt: new Date().toISOString(), ...(effect ? { effect } : {}) };
    appendDurable(this.path, JSON.stringify(r));
    this.keys.add(key);
    return r;
  }
}
