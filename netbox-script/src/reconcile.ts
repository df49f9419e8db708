/**
 * The reconcile loop: NetBox does not retry a failed delivery by default, so every interval (and at start)
 * fleetd lists the devices with a request outstanding — desired_action set, or status decommissioning — and
 * queues a hint for each one that has no job pending. The worker then treats it like any webhook.
 */
import type { Logger } from "pino";
import { type NetBox, listDevices, DESIRED_ACTIONS } from "@fleetd/platform/netbox";
import type { Metrics } from "./metrics.js";
import type { JobQueue } from "./queue.js";

export async function reconcileOnce(
  nb: NetBox,
  queue: JobQueue,
  log: Logger,
  metrics: Metrics,
  settled: (deviceId: number, lastUpdated: string | null | undefined) => boolean,
): Promise<number[]> {
  const ids = new Set<number>();
  for (const a of DESIRED_ACTIONS) for (const d of await listDevices(nb, { cf_desired_action: a })) ids.add(d.id);
  for (const d of await listDevices(nb, { status: ["decommissioning"] })) if (!settled(d.id, d.last_updated)) ids.add(d.id);
  const queued: number[] = [];
  const now = new Date();
  const pending = await queue.pendingDevices();
  for (const id of [...ids].sort((a, b) => a - b)) {
    if (pending.has(id)) continue;
    await queue.enqueue({ id: `rc:${id}:${now.getTime()}:${queue.nextSeq()}`, deviceId: id, source: "reconcile", receivedAt: now.toISOString(), hintEvent: null });
    queued.push(id);
  }
  metrics.reconcileRuns.inc({ outcome: "ok" });
  if (queued.length > 0) log.info({ devices: queued }, "reconcile queued devices a webhook did not deliver");
  return queued;
}
