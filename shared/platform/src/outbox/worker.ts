/**
 * The outbox worker: delivers what the steps committed (effects.ts) — to NetBox and the workload cluster — at
 * least once, in order per device, surviving NetBox outages and restarts (the items live in the state store).
 *
 * Each pass claims a batch (AttestationStore.claimOutbox: of each device only its oldest item; a claim that is
 * older than `staleMs` is another worker's that died), delivers each item and completes it, or defers it with
 * backoff: quickly while its dependency is down (an outage), slowly when the dependency refused it (a defect to
 * look into: logged as an error). An item is dropped only when its delivery says it is moot (its device is gone
 * from NetBox). Several replicas may run workers over one store: claims keep them apart, and the keys make a
 * second delivery of an item harmless.
 */
import { randomUUID } from "node:crypto";
import { backoffDelayMs } from "../outage/backoff.js";
import { failpoint } from "../outage/failpoint.js";
import { outageOf } from "../outage/outage.js";
import type { AttestationStore, OutboxEntry } from "../state/store.js";
import { Effect } from "./effects.js";

/** Where effects go: NetBox and the workload cluster (netbox/outboxDelivery.ts). */
export interface OutboxDelivery {
  /** Deliver one item; "moot" when there is nothing left to do it to (the device is gone). Throws when it failed. */
  deliver(entry: OutboxEntry, effect: Effect): Promise<"delivered" | "moot">;
}

export interface OutboxLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export type DeliveryOutcome = "delivered" | "moot" | "outage" | "failed" | "invalid";

export interface OutboxWorkerOptions {
  store: Pick<AttestationStore, "claimOutbox" | "completeOutbox" | "deferOutbox" | "listOutbox" | "recover">;
  delivery: OutboxDelivery;
  log: OutboxLog;
  /** Counts each delivery attempt by effect kind and outcome (a metric). */
  onDelivery?: (kind: string, outcome: DeliveryOutcome) => void;
  /** Between passes when nothing kicks the worker (default 2 s). */
  intervalMs?: number;
  /** A claim older than this belongs to a worker that died (default 60 s). */
  staleMs?: number;
  /** Items per pass (default 50). */
  batch?: number;
  now?: () => number;
}

/** Retry delays: an outage is retried soon (the dependency comes back), a refusal slowly (someone must look). */
const OUTAGE_BACKOFF = { baseMs: 500, capMs: 30_000 };
const FAILURE_BACKOFF = { baseMs: 10_000, capMs: 3_600_000 };

export class OutboxWorker {
  private readonly claimer = `outbox-${randomUUID()}`;
  private readonly now: () => number;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private stopped = true;

  constructor(private readonly o: OutboxWorkerOptions) {
    this.now = o.now ?? Date.now;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.schedule(0);
  }

  /** Stops passes; waits for the one running. Items stay queued for the next start (or another replica). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
  }

  /** Run a pass now (a step just committed effects): NetBox sees them within milliseconds when it is up. */
  kick(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.schedule(0);
  }

  private schedule(ms: number): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.running = this.passes().finally(() => {
        this.running = undefined;
        if (!this.stopped) this.schedule(this.again ? 0 : (this.o.intervalMs ?? 2000));
        this.again = false;
      });
    }, ms);
    this.timer.unref();
  }

  private async passes(): Promise<void> {
    try {
      await this.o.store.recover(this.now());
      // keep going while passes deliver something (a device's next item becomes its head after the last one)
      for (let i = 0; i < 100 && !this.stopped; i++) if ((await this.runOnce()).claimed === 0) break;
    } catch (e) {
      this.o.log.error({ err: e }, "outbox pass failed");
    }
  }

  /** One pass: claim a batch, deliver each item (devices in parallel, each device's items in order). */
  async runOnce(onlyDevice?: number): Promise<{ claimed: number; delivered: number; deferred: number }> {
    // a pass for one device is someone waiting for it: its backoff is cut short
    const due = onlyDevice === undefined ? undefined : Number.MAX_SAFE_INTEGER;
    const items = await this.o.store.claimOutbox(this.now(), this.claimer, this.o.staleMs ?? 60_000, this.o.batch ?? 50, onlyDevice, due);
    const results = await Promise.all(items.map((i) => this.deliverOne(i)));
    return { claimed: items.length, delivered: results.filter(Boolean).length, deferred: results.filter((r) => !r).length };
  }

  /**
   * Deliver this device's queued items now (a step answered, or a step's gates are about to read NetBox); true
   * when none is left. A failed delivery ends it (false): the dependency is down. Items another worker is
   * delivering are waited for, briefly.
   */
  async flush(deviceId: number, passes = 50): Promise<boolean> {
    for (let i = 0; i < passes; i++) {
      if ((await this.o.store.listOutbox(deviceId)).length === 0) return true;
      const r = await this.runOnce(deviceId);
      if (r.deferred > 0) return false;
      if (r.claimed === 0) await new Promise((res) => setTimeout(res, 20)); // in another worker's hands
    }
    return (await this.o.store.listOutbox(deviceId)).length === 0;
  }

  private async deliverOne(i: OutboxEntry): Promise<boolean> {
    const parsed = Effect.safeParse(i.effect);
    if (!parsed.success) {
      // written by an older or newer fleetd, or edited by hand: kept, with why, and retried slowly
      await this.defer(i, FAILURE_BACKOFF, `not an effect this fleetd knows: ${parsed.error.issues.map((x) => `${x.path.join(".")}: ${x.message}`).join("; ")}`);
      this.o.onDelivery?.("unknown", "invalid");
      return false;
    }
    const kind = parsed.data.kind;
    try {
      const r = await this.o.delivery.deliver(i, parsed.data);
      failpoint(`outbox.afterDeliver.${kind}`); // delivered, not yet marked so: a restart delivers it again (idempotently)
      await this.o.store.completeOutbox(i.key, this.claimer);
      this.o.onDelivery?.(kind, r);
      if (r === "moot") this.o.log.warn({ key: i.key, kind, deviceId: i.deviceId }, "outbox item dropped: its device is gone");
      return true;
    } catch (e) {
      const outage = outageOf(e);
      const detail = outage ? `${outage.reason}: ${outage.detail}` : (e as Error).message;
      await this.defer(i, outage ? OUTAGE_BACKOFF : FAILURE_BACKOFF, detail);
      this.o.onDelivery?.(kind, outage ? "outage" : "failed");
      if (!outage) this.o.log.error({ key: i.key, kind, deviceId: i.deviceId, attempts: i.attempts + 1, err: detail }, "outbox delivery refused; retrying later");
      return false;
    }
  }

  private async defer(i: OutboxEntry, backoff: { baseMs: number; capMs: number }, error: string): Promise<void> {
    await this.o.store.deferOutbox(i.key, this.claimer, this.now() + backoffDelayMs(i.attempts + 1, Math.random(), backoff), error);
  }
}
