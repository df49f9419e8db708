/**
 * Recorded intents: what the handler decided and queued for the platform side. The Kubernetes/Tinkerbell
 * effects are built elsewhere; until then the intent log is the handler's output (and what tests assert).
 * Keyed by the request (device + the change-log entry that asked), so a retried job never doubles an intent.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Intent } from "@fleetd/shared/netbox/decide";
import { appendDurable } from "./durable.js";

export interface RecordedIntent extends Intent {
  key: string;
  recordedAt: string;
}

export interface IntentSink {
  record(key: string, intent: Intent): RecordedIntent | undefined;
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
  record(key: string, intent: Intent): RecordedIntent | undefined {
    if (this.keys.has(key)) return undefined;
    const r: RecordedIntent = { ...intent, key, recordedAt: new Date().toISOString() };
    appendDurable(this.path, JSON.stringify(r));
    this.keys.add(key);
    return r;
  }
}
