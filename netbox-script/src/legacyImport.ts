/**
 * An older netbox-script kept its queue and intents in files under `handler.stateDir` (`queue/pending/*.json`,
 * `queue/failed/*.json`, `queue/deliveries.log`, `intents.jsonl`). At start they are imported into the state
 * store once and moved aside (`<name>.imported-<time>`), so an upgrade loses no accepted hint and no record:
 *   - pending jobs are queued again (attempts start over);
 *   - intents are replayed step by step (claimed, abandoned, settled), so an unsettled claim is resumed;
 *   - parked jobs (queue/failed) stay in the moved-aside directory for an operator (logged with their count);
 *   - delivery ids are not imported (a redelivery inside the window queues one more hint; the worker re-reads
 *     the device, so a hint decides nothing by itself).
 */
import { existsSync, readdirSync, readFileSync, renameSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { z } from "zod";
import type { HandlerStore } from "@fleetd/platform/state";

const OldJob = z.object({
  id: z.string().regex(/^[a-z0-9:_-]{1,200}$/i),
  deviceId: z.number().int().positive(),
  source: z.enum(["webhook", "reconcile"]),
  receivedAt: z.string(),
  hintEvent: z.string().nullable(),
});
const OldIntent = z.looseObject({
  key: z.string(),
  deviceId: z.number().int().positive(),
  action: z.string(),
  node: z.string(),
  requestedBy: z.string().nullable().optional(),
  role: z.string().optional(),
  recordedAt: z.string(),
  effect: z.record(z.string(), z.unknown()).optional(),
  state: z.enum(["claimed", "abandoned"]).optional(),
});

/** A file's JSON, or undefined when it is not JSON (the old queue parked such files; here they are skipped). */
function readJson(path: string): unknown {
  try {
    return JSON.parse(readFileSync(path, "utf8")) as unknown;
  } catch {
    return undefined;
  }
}

export class LegacyStateError extends Error {
  override readonly name = "LegacyStateError";
}

export interface LegacyImport {
  jobs: number;
  intents: number;
  parkedLeft: number;
}

/** Imports what an older netbox-script left in `stateDir`; undefined when there was nothing. */
export async function importLegacyState(stateDir: string, store: HandlerStore, log: Logger): Promise<LegacyImport | undefined> {
  const queueDir = join(stateDir, "queue");
  const intentsFile = join(stateDir, "intents.jsonl");
  if (!existsSync(queueDir) && !existsSync(intentsFile)) return undefined;
  const stamp = new Date().toISOString().replace(/[:.]/g, "-");
  const out: LegacyImport = { jobs: 0, intents: 0, parkedLeft: 0 };
  if (existsSync(intentsFile)) {
    const lines = readFileSync(intentsFile, "utf8").split("\n").filter((l) => l.length > 0);
    for (const [n, line] of lines.entries()) {
      let r: z.infer<typeof OldIntent>;
      try {
        r = OldIntent.parse(JSON.parse(line));
      } catch (e) {
        throw new LegacyStateError(`${intentsFile}:${n + 1}: not an intent record of netbox-script (${(e as Error).message.slice(0, 200)}); move the file aside to start without it`);
      }
      const { key, recordedAt, effect, state, ...intent } = r;
      const at = Date.parse(recordedAt) || Date.now();
      if (state === "claimed") await store.claimIntent(key, r.deviceId, intent, at);
      else if (state === "abandoned") await store.abandonIntent(key, r.deviceId, at);
      else await store.settleIntent(key, r.deviceId, intent, effect, at);
    }
    out.intents = lines.length;
    renameSync(intentsFile, `${intentsFile}.imported-${stamp}`);
  }
  if (existsSync(queueDir)) {
    const pendingDir = join(queueDir, "pending");
    for (const f of existsSync(pendingDir) ? readdirSync(pendingDir) : []) {
      if (!f.endsWith(".json")) continue;
      const parsed = OldJob.safeParse(readJson(join(pendingDir, f)));
      if (!parsed.success) {
        log.warn({ file: join(pendingDir, f) }, "an unreadable job file of the old queue was not imported");
        continue;
      }
      await store.enqueueJob(parsed.data);
      out.jobs++;
    }
    const failedDir = join(queueDir, "failed");
    out.parkedLeft = existsSync(failedDir) ? readdirSync(failedDir).filter((f) => f.endsWith(".json")).length : 0;
    renameSync(queueDir, `${queueDir}.imported-${stamp}`);
  }
  log.warn({ ...out, movedAside: stamp }, out.parkedLeft > 0
    ? `imported the file queue of an older netbox-script; its ${out.parkedLeft} parked job(s) stay in queue.imported-${stamp}/failed for an operator`
    : "imported the file queue of an older netbox-script");
  return out;
}
