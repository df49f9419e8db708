/**
 * Retirement of a node (NetBox status `decommissioning`): an ordered list of steps, each idempotent, with
 * progress persisted after every completed step so a restarted process continues at the first incomplete step
 * and never re-runs a completed one. The vocabulary every step file shares is declared here.
 */
import type { Kube } from "../kube/client.js";
import type { Journal } from "../fleet/ports.js";
import type { RetirementProgress } from "./progress.js";
import type { RetirementSpire } from "./spire.js";

/** What a step reports. `waiting` steps are run again later (same process after retryAfterMs, or after a restart). */
export type StepResult =
  | { done: true; detail: string; data?: Record<string, string> }
  | {
      done: false;
      /** One line for people: what the step waits for (journalled when it changes). */
      waitingFor: string;
      retryAfterMs: number;
      /** Needs an operator (a PDB that does not let go, a failed wipe): retireNode stops instead of waiting on. */
      blocked?: boolean;
      /** Kept in the step's progress record for the next attempt (e.g. the name of a Job already started). */
      data?: Record<string, string>;
    };

export interface StepContext {
  readonly node: string;
  readonly deps: RetirementDeps;
  /** Data recorded by earlier completed steps, merged (e.g. `workflow` from the netboot step). */
  readonly earlier: Readonly<Record<string, string>>;
  /** Data this step recorded in an earlier, unfinished attempt. */
  readonly own: Readonly<Record<string, string>>;
}

export interface Step {
  readonly name: StepName;
  /** One line for the journal and the README. */
  readonly summary: string;
  run(ctx: StepContext): Promise<StepResult>;
}

export const STEP_NAMES = ["cordon", "evict", "netboot", "delete-node", "delete-cluster-records", "wipe", "power-off", "spire", "netbox-offline"] as const;
export type StepName = (typeof STEP_NAMES)[number];

/**
 * The management-cluster effects (Tinkerbell workflow, Rufio Job), provided by shared/platform/src/tinkerbell.
 * Both `start` calls must be idempotent per node (a deterministic object name; an existing object is returned,
 * not duplicated): a process killed after the create and before progress was written calls them again.
 */
export interface RetirementPlatform {
  /** Create the `wipe` Workflow (its bootOptions netboot the machine into HookOS); returns the Workflow's name. */
  startWipe(node: string): Promise<string>;
  workflowState(name: string): Promise<"pending" | "running" | "success" | "failed" | "timeout" | "missing">;
  /** Create a Rufio Job powering the machine off; returns the Job's name. */
  startPowerOff(node: string): Promise<string>;
  jobState(name: string): Promise<"running" | "completed" | "failed" | "missing">;
}

/** The inventory side of the last step (NetBox in production: see netboxOffline.ts). */
export interface RetirementInventory {
  /** Set the node's status to offline and clear the facts fleetd recorded about the old installation. */
  markOffline(node: string): Promise<string>;
}

export interface RetirementLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

export interface RetirementOptions {
  /** How long the evict step keeps retrying PDB-refused evictions and waiting for pods to go (default 5 min). */
  evictionTimeoutMs: number;
  /** Pause between eviction rounds and pod polls (default 2 s). */
  evictionPollMs: number;
  /** Grace period for evicted pods, seconds (default: the pod's own). */
  evictionGraceSeconds?: number;
  /** Poll interval for the wipe Workflow and the power-off Job (default 10 s). */
  platformPollMs: number;
  /** A claim on a step older than this is taken over (its holder is presumed dead; default 10 min). */
  claimTtlMs: number;
  /** retireNode waits on waiting steps for at most this long, then returns the report (default 60 min). */
  budgetMs: number;
}

export const DEFAULT_OPTIONS: RetirementOptions = {
  evictionTimeoutMs: 5 * 60_000,
  evictionPollMs: 2000,
  platformPollMs: 10_000,
  claimTtlMs: 10 * 60_000,
  budgetMs: 60 * 60_000,
};

export interface RetirementDeps {
  /** The workload cluster (RBAC: see netbox-script/README.md, "Retirement"). */
  workload: Kube;
  progress: RetirementProgress;
  platform: RetirementPlatform;
  inventory: RetirementInventory;
  /** One entry per completed step, per new waiting reason, and per refusal. */
  journal: Journal;
  /** SPIRE (step `spire`): absent when the site runs no SPIRE sync. */
  spire?: RetirementSpire;
  /** This replica's identity (pod name); written into step claims. */
  owner: string;
  options?: Partial<RetirementOptions>;
  log?: RetirementLog;
  now?: () => Date;
  sleep?: (ms: number) => Promise<void>;
}

export function optionsOf(deps: RetirementDeps): RetirementOptions {
  return { ...DEFAULT_OPTIONS, ...deps.options };
}
