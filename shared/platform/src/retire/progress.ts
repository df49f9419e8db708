/**
 * Retirement progress: one record per node, written with compare-and-swap so two replicas cannot both claim a
 * step. A step is `claimed` (owner + time) before it runs, `waiting` when it reported a wait, `done` after it
 * completed. The record is data, parsed with zod wherever it is read back.
 */
import { z } from "zod";
import { STEP_NAMES } from "./types.js";

export const StepRecord = z.strictObject({
  state: z.enum(["claimed", "waiting", "done"]),
  owner: z.string(),
  claimedAt: z.string(),
  attempts: z.number().int().nonnegative(),
  completedAt: z.string().optional(),
  detail: z.string().optional(),
  waitingFor: z.string().optional(),
  blocked: z.boolean().optional(),
  data: z.record(z.string(), z.string()).optional(),
  /** The journal entry for this step's completion was written (re-tried on the next pass otherwise). */
  journalled: z.boolean().optional(),
});
export type StepRecord = z.infer<typeof StepRecord>;

export const ProgressRecord = z.strictObject({
  node: z.string(),
  /** The request this retirement answers (e.g. the NetBox change that set `decommissioning`). */
  requestId: z.string().optional(),
  startedAt: z.string(),
  finishedAt: z.string().optional(),
  steps: z.partialRecord(z.enum(STEP_NAMES), StepRecord),
});
export type ProgressRecord = z.infer<typeof ProgressRecord>;

export interface VersionedProgress {
  record: ProgressRecord;
  /** Opaque version for compare-and-swap (a resourceVersion). */
  version: string;
}

/** Raised when a write lost a race: the record changed (or appeared) since it was read. Re-read and decide again. */
export class ProgressConflict extends Error {
  override readonly name = "ProgressConflict";
  readonly code = "retire-progress-conflict";
}

export interface RetirementProgress {
  read(node: string): Promise<VersionedProgress | undefined>;
  /** Create (version undefined) or replace the record at exactly `version`; returns the new version. */
  write(node: string, record: ProgressRecord, version: string | undefined): Promise<string>;
  /** Forget a node's retirement (e.g. before the machine is provisioned again). */
  remove(node: string): Promise<void>;
  /** Every node with a record (for the worker to resume retirements after a restart). */
  list(): Promise<string[]>;
}
