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
 *
 * Someone waiting for a device (flush: a step's commit, a step's gates) claims the device's queue as a run
 * (AttestationStore.claimOutboxRun): its field, status and cluster writes go one by one in queue order, then its
 * journal entries together, in one NetBox request (deliverJournals) — a step's entries, and an earlier step's
 * that lingered for it (effects.ts journal `notBefore`), cost one POST.
 */
import { randomUUID } from "node:crypto";
import { backoffDelayMs } from "../outage/backoff.js";
import { failpoint } from "../outage/failpoint.js";
import { outageOf } from "../outage/outage.js";
import type { AttestationStore, OutboxEntry } from "../state/store.js";
import { Effect } from "./effects.js";

export type JournalEffect = Extract<Effect, { kind: "netbox.journal" }>;

/** Where effects go: NetBox and the workload cluster (netbox/outboxDelivery.ts). */
export interface OutboxDelivery {
  /** Deliver one item; "moot" when there is nothing left to do it to (the device is gone). Throws when it failed. */
  deliver(entry: OutboxEntry, effect: Effect): Promise<"delivered" | "moot">;
  /**
   * Deliver several journal entries of one device in one request, in order, each idempotent by its item's key
   * (an item with attempts > 0 may have been written: looked up first). Absent: one `deliver` each.
   */
  deliverJournals?(deviceId: number, items: { entry: OutboxEntry; effect: JournalEffect }[]): Promise<"delivered" | "moot">;
}

const isDeviceJournal = (i: OutboxEntry): boolean => i.deviceId !== null && (i.effect as { kind?: unknown }).kind === "netbox.journal";

export interface OutboxLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export type DeliveryOutcome = "delivered" | "moot" | "outage" | "failed" | "invalid";

export interface OutboxWorkerOptions {
  store: Pick<AttestationStore, "claimOutbox" | "claimOutboxRun" | "completeOutbox" | "deferOutbox" | "listOutbox" | "recover">;
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
   * delivering are waited for, briefly. The device's queue is claimed as a run (AttestationStore.claimOutboxRun):
   * its field and status writes go in order, then its journal entries in one request.
   *
   * `journal: false` (the gates are about to read NetBox): only what a read could miss must be delivered — the
   * field and status writes; journal entries queued after the last of them stay queued (a lingering entry is
   * then delivered with the next step's, in one request). True when no field or status write is left.
   */
  async flush(deviceId: number, opts: { journal?: boolean; waitMs?: number } = {}): Promise<boolean> {
    const needed = async (): Promise<number> => {
      const pending = await this.o.store.listOutbox(deviceId);
      if (opts.journal !== false) return pending.length;
      let last = -1;
      pending.forEach((p, n) => {
        if (!isDeviceJournal(p)) last = n;
      });
      return last + 1;
    };
    // items in another worker's hands (a pass of this process's, another replica's) are waited for, up to
    // `waitMs` (default 2 s)
    const until = Date.now() + (opts.waitMs ?? 2_000);
    for (let i = 0; i < 1000; i++) {
      const n = await needed();
      if (n === 0) return true;
      const r = await this.runDevice(deviceId, n);
      if (r.deferred > 0) return false;
      if (r.claimed === 0) {
        if (Date.now() >= until) break;
        await new Promise((res) => setTimeout(res, 20));
      }
    }
    return (await needed()) === 0;
  }

  /**
   * Claim `deviceId`'s head run (at most `limit` items, backoff cut short: someone waits) and deliver it: the
   * field, status and cluster writes one by one in queue order, then the journal entries together in one request
   * (a journal entry is never delivered before a write queued ahead of it). When one fails the rest of the run
   * is given back (deferred: counted as an attempt, so a journal entry among them is looked up before it is
   * written again).
   */
  async runDevice(deviceId: number, limit: number): Promise<{ claimed: number; delivered: number; deferred: number }> {
    const items = await this.o.store.claimOutboxRun(this.now(), this.claimer, this.o.staleMs ?? 60_000, deviceId, limit, Number.MAX_SAFE_INTEGER);
    const journals: { entry: OutboxEntry; effect: JournalEffect }[] = [];
    const writes: OutboxEntry[] = [];
    for (const i of items) {
      const p = Effect.safeParse(i.effect);
      if (p.success && p.data.kind === "netbox.journal") journals.push({ entry: i, effect: p.data });
      else writes.push(i); // an item that is not a valid effect too: deliverOne defers it, and the rest wait
    }
    let delivered = 0;
    const giveBack = async (rest: OutboxEntry[]) => {
      for (const r of rest) await this.o.store.deferOutbox(r.key, this.claimer, this.now(), "not attempted: an item queued before it was not delivered");
      return { claimed: items.length, delivered, deferred: items.length - delivered };
    };
    for (const [n, i] of writes.entries()) {
      if (!(await this.deliverOne(i))) return giveBack([...writes.slice(n + 1), ...journals.map((j) => j.entry)]);
      delivered++;
    }
    const bulk = this.o.delivery.deliverJournals?.bind(this.o.delivery);
    if (bulk && journals.length > 1) {
      if (!(await this.deliverJournals(deviceId, journals, bulk))) return { claimed: items.length, delivered, deferred: items.length - delivered };
      delivered += journals.length;
    } else {
      for (const [n, j] of journals.entries()) {
        if (!(await this.deliverOne(j.entry))) return giveBack(journals.slice(n + 1).map((x) => x.entry));
        delivered++;
      }
    }
    return { claimed: items.length, delivered, deferred: 0 };
  }

  /** A device's journal items in one request (the delivery's deliverJournals). */
  private async deliverJournals(deviceId: number, items: { entry: OutboxEntry; effect: JournalEffect }[], deliver: NonNullable<OutboxDelivery["deliverJournals"]>): Promise<boolean> {
    try {
      failpoint("outbox.beforeDeliver.netbox.journal"); // committed (and maybe answered), not yet delivered
      const r = await deliver(deviceId, items);
      failpoint("outbox.afterDeliver.netbox.journal"); // delivered, not yet marked so: a restart looks the keys up first
      for (const x of items) {
        await this.o.store.completeOutbox(x.entry.key, this.claimer);
        this.o.onDelivery?.("netbox.journal", r);
      }
      if (r === "moot") this.o.log.warn({ keys: items.map((x) => x.entry.key), kind: "netbox.journal", deviceId }, "outbox items dropped: their device is gone");
      return true;
    } catch (e) {
      for (const x of items) await this.failed(x.entry, "netbox.journal", e);
      return false;
    }
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
      failpoint(`outbox.beforeDeliver.${kind}`); // committed (and maybe answered), not yet delivered: a restart delivers it
      const r = await this.o.delivery.deliver(i, parsed.data);
      failpoint(`outbox.afterDeliver.${kind}`); // delivered, not yet marked so: a restart delivers it again (idempotently)
      await this.o.store.completeOutbox(i.key, this.claimer);
      this.o.onDelivery?.(kind, r);
      if (r === "moot") this.o.log.warn({ key: i.key, kind, deviceId: i.deviceId }, "outbox item dropped: its device is gone");
      return true;
    } catch (e) {
      await this.failed(i, kind, e);
      return false;
    }
  }

  /** A delivery that failed: deferred with backoff (soon after an outage, slowly after a refusal, which is logged). */
  private async failed(i: OutboxEntry, kind: string, e: unknown): Promise<void> {
    const outage = outageOf(e);
    const detail = outage ? `${outage.reason}: ${outage.detail}` : (e as Error).message;
    await this.defer(i, outage ? OUTAGE_BACKOFF : FAILURE_BACKOFF, detail);
    this.o.onDelivery?.(kind, outage ? "outage" : "failed");
    if (!outage) this.o.log.error({ key: i.key, kind, deviceId: i.deviceId, attempts: i.attempts + 1, err: detail }, "outbox delivery refused; retrying later");
  }

  private async defer(i: OutboxEntry, backoff: { baseMs: number; capMs: number }, error: string): Promise<void> {
    await this.o.store.deferOutbox(i.key, this.claimer, this.now() + backoffDelayMs(i.attempts + 1, Math.random(), backoff), error);
  }
}
