/**
 * The handler's queue, on the state store (HandlerStore: SQLite alone, Kubernetes-held under HA), so no replica
 * holds work the others cannot see. A job is written durably before the webhook is answered 2xx, so a crash
 * after the answer loses nothing. The worker takes due jobs under its claim (one replica at a time; a claim
 * older than `staleMs` is taken over: its replica died); finished jobs are deleted; jobs that keep failing are
 * parked in the store for an operator (`parked()`, the fleetd_netbox_script_queue_parked metric).
 *
 * Delivery ids (SHA-256 of the body) are remembered in the store for the freshness window: a replay inside the
 * window is a duplicate on every replica, outside it the body is stale and refused anyway.
 */
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import type { HandlerJob, HandlerStore, JobFailure, NewHandlerJob } from "@fleetd/platform/state";

export type Job = HandlerJob;

export class JobQueue {
  private seq = 0;
  /** This process's claims (a restart is another claimer). */
  readonly claimer = `${hostname()}:${process.pid}:${randomBytes(4).toString("hex")}`;

  constructor(
    readonly store: HandlerStore,
    private readonly staleMs: number,
  ) {}

  /** Durably enqueues (returns once the store has it); an id queued already is left as it is. */
  enqueue(job: NewHandlerJob): Promise<Job> {
    return this.store.enqueueJob(job);
  }

  /** Records a delivery id until `expiresAt`; false if it was already seen (a redelivery, on any replica). */
  rememberDelivery(id: string, expiresAt: number): Promise<boolean> {
    return this.store.rememberDelivery(id, expiresAt, Date.now());
  }

  /** Claims up to `limit` due jobs for this process, oldest first. */
  take(limit: number): Promise<Job[]> {
    return this.store.takeJobs(Date.now(), this.claimer, this.staleMs, limit);
  }

  async done(job: Job): Promise<void> {
    await this.store.completeJob(job.id, this.claimer);
  }

  retryLater(job: Job, error: string, delayMs: number, maxAttempts: number): Promise<JobFailure> {
    return this.store.failJob(job.id, this.claimer, error, Date.now() + delayMs, maxAttempts);
  }

  /** Ends claims: this process's (`mine`), or every one (a worker starting where no other runs). */
  release(mine: boolean): Promise<number> {
    return this.store.releaseJobs(mine ? this.claimer : undefined);
  }

  /** Pending jobs, oldest first (by receipt). */
  pending(): Promise<Job[]> {
    return this.store.listJobs("pending");
  }

  /** Jobs parked after `maxAttempts` failures, for an operator. */
  parked(): Promise<Job[]> {
    return this.store.listJobs("parked");
  }

  /** The devices with a job pending, from one read (a reconcile pass asks once, not per device). */
  async pendingDevices(): Promise<Set<number>> {
    return new Set((await this.pending()).map((j) => j.deviceId));
  }

  async hasPendingFor(deviceId: number): Promise<boolean> {
    return (await this.pendingDevices()).has(deviceId);
  }

  nextSeq(): number {
    return ++this.seq;
  }
}
