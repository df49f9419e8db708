/**
 * The handler's durable queue: a file journal (one JSON file per job, written with fsync + rename before the
 * webhook is answered 2xx), so a crash after the answer loses nothing — at start, every file in pending/ is
 * work to do. Finished jobs are deleted; jobs that keep failing are parked in failed/ for an operator.
 *
 * Delivery ids (SHA-256 of the body) are remembered in an fsync'd append-only log for the freshness window:
 * a replay inside the window is a duplicate, outside it the body is stale and refused anyway.
 */
import { ensurePrivateDir } from "@fleetd/platform/state";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { appendDurable, moveDurable, writeDurable } from "./durable.js";

export const Job = z.object({
  id: z.string().regex(/^[a-z0-9:_-]{1,200}$/i),
  deviceId: z.number().int().positive(),
  source: z.enum(["webhook", "reconcile"]),
  receivedAt: z.string(),
  /** From the body, unverified, for logs only. */
  hintEvent: z.string().nullable(),
  attempts: z.number().int().min(0),
  notBefore: z.number().int().min(0),
  lastError: z.string().nullable(),
});
export type Job = z.infer<typeof Job>;

export class FileQueue {
  private readonly pendingDir: string;
  private readonly failedDir: string;
  private readonly seenLog: string;
  private readonly seen = new Map<string, number>();
  /** Lines in deliveries.log now: it is rewritten with the live ids when expired ones outnumber them. */
  private seenLines = 0;
  private liveAtCompaction = 0;
  private seq = 0;

  constructor(readonly dir: string) {
    this.pendingDir = join(dir, "pending");
    this.failedDir = join(dir, "failed");
    this.seenLog = join(dir, "deliveries.log");
    // Webhook bodies are NetBox data (device fields, the BMC reference): private, like every file fleetd keeps.
    ensurePrivateDir(dir);
    mkdirSync(this.pendingDir, { recursive: true, mode: 0o700 });
    mkdirSync(this.failedDir, { recursive: true, mode: 0o700 });
    this.loadSeen();
  }

  private loadSeen(): void {
    if (!existsSync(this.seenLog)) return;
    const now = Date.now();
    for (const line of readFileSync(this.seenLog, "utf8").split("\n")) {
      const m = /^([0-9a-f]{64}) (\d+)$/.exec(line);
      if (m && Number(m[2]) > now) this.seen.set(m[1] as string, Number(m[2]));
    }
    this.compactSeen(now);
  }

  /** Rewrites deliveries.log (write, fsync, rename) with the ids still inside their window. */
  private compactSeen(now: number): void {
    for (const [k, v] of this.seen) if (v <= now) this.seen.delete(k);
    writeDurable(this.seenLog, [...this.seen].map(([id, exp]) => `${id} ${exp}\n`).join(""));
    this.seenLines = this.seen.size;
    this.liveAtCompaction = this.seen.size;
  }

  /** Lines in deliveries.log (for tests). */
  get deliveryLogLines(): number {
    return this.seenLines;
  }

  /** Records a delivery id until `expiresAt`; false if it was already seen (a redelivery). */
  rememberDelivery(id: string, expiresAt: number): boolean {
    const now = Date.now();
    const exp = this.seen.get(id);
    if (exp !== undefined && exp > now) return false;
    this.seen.set(id, expiresAt);
    appendDurable(this.seenLog, `${id} ${expiresAt}`);
    this.seenLines++;
    if (this.seenLines > 2 * this.liveAtCompaction + 1000) this.compactSeen(now);
    return true;
  }

  private fileOf(job: Job): string {
    return join(this.pendingDir, `${job.id.replace(/:/g, "_")}.json`);
  }

  /** Durably enqueues (returns after fsync). */
  enqueue(job: Omit<Job, "attempts" | "notBefore" | "lastError">): Job {
    const full: Job = { ...job, attempts: 0, notBefore: 0, lastError: null };
    writeDurable(this.fileOf(full), JSON.stringify(full));
    return full;
  }

  /** Pending jobs, oldest first (by receipt). Unreadable files are parked in failed/ rather than crash the loop. */
  pending(): Job[] {
    const jobs: Job[] = [];
    for (const f of readdirSync(this.pendingDir)) {
      if (!f.endsWith(".json")) continue;
      const p = join(this.pendingDir, f);
      try {
        jobs.push(Job.parse(JSON.parse(readFileSync(p, "utf8"))));
      } catch {
        moveDurable(p, join(this.failedDir, f));
      }
    }
    return jobs.sort((a, b) => a.receivedAt.localeCompare(b.receivedAt) || a.id.localeCompare(b.id));
  }

  /** The devices with a job pending, from one read of the directory (a reconcile pass asks once, not per device). */
  pendingDevices(): Set<number> {
    return new Set(this.pending().map((j) => j.deviceId));
  }

  hasPendingFor(deviceId: number): boolean {
    return this.pendingDevices().has(deviceId);
  }

  done(job: Job): void {
    rmSync(this.fileOf(job), { force: true });
  }

  retryLater(job: Job, error: string, delayMs: number, maxAttempts: number): "retry" | "parked" {
    const next: Job = { ...job, attempts: job.attempts + 1, lastError: error.slice(0, 2000), notBefore: Date.now() + delayMs };
    if (next.attempts >= maxAttempts) {
      writeFileSync(join(this.failedDir, `${job.id.replace(/:/g, "_")}.json`), JSON.stringify(next), { mode: 0o600 });
      rmSync(this.fileOf(job), { force: true });
      return "parked";
    }
    writeDurable(this.fileOf(next), JSON.stringify(next));
    return "retry";
  }

  nextSeq(): number {
    return ++this.seq;
  }
}
