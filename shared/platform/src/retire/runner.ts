/**
 * The step runner: one pass over the ordered steps against the persisted progress. Completed steps are
 * skipped (never re-run); the first incomplete one is claimed with a compare-and-swap write (owner + time),
 * run, and its outcome written back before anything else happens. A claim younger than `claimTtlMs` held by
 * another owner means another replica is at work: the pass stops with `busy`.
 */
import { ProgressConflict, type ProgressRecord, type StepRecord, type VersionedProgress } from "./progress.js";
import { optionsOf, type RetirementDeps, type Step, type StepName, type StepResult } from "./types.js";

export type RetirementStatus = "complete" | "waiting" | "blocked" | "busy";

export interface StepReport {
  name: StepName;
  state: "pending" | "claimed" | "waiting" | "done";
  owner?: string;
  detail?: string;
  waitingFor?: string;
  completedAt?: string;
  attempts: number;
}

export interface RetirementReport {
  node: string;
  status: RetirementStatus;
  /** Steps this pass ran to completion (a restart that resumes lists only the remaining ones). */
  completedNow: StepName[];
  /** For waiting/blocked/busy: why. */
  waitingFor?: string;
  retryAfterMs?: number;
  steps: StepReport[];
}

const nowIso = (deps: RetirementDeps) => (deps.now?.() ?? new Date()).toISOString();

function reportOf(node: string, steps: readonly Step[], rec: ProgressRecord, status: RetirementStatus, completedNow: StepName[], extra: Partial<RetirementReport> = {}): RetirementReport {
  return {
    node, status, completedNow, ...extra,
    steps: steps.map((s) => {
      const r = rec.steps[s.name];
      if (!r) return { name: s.name, state: "pending", attempts: 0 };
      return {
        name: s.name, state: r.state, owner: r.owner, attempts: r.attempts,
        ...(r.detail !== undefined ? { detail: r.detail } : {}),
        ...(r.waitingFor !== undefined && r.state !== "done" ? { waitingFor: r.waitingFor } : {}),
        ...(r.completedAt !== undefined ? { completedAt: r.completedAt } : {}),
      };
    }),
  };
}

/** Read the record, creating it (or starting afresh when a finished retirement answered another request). */
async function load(deps: RetirementDeps, node: string, requestId: string | undefined): Promise<VersionedProgress> {
  for (let i = 0; i < 5; i++) {
    const got = await deps.progress.read(node);
    const fresh: ProgressRecord = { node, startedAt: nowIso(deps), steps: {}, ...(requestId !== undefined ? { requestId } : {}) };
    try {
      if (!got) return { record: fresh, version: await deps.progress.write(node, fresh, undefined) };
      if (got.record.finishedAt !== undefined && requestId !== undefined && got.record.requestId !== requestId) {
        return { record: fresh, version: await deps.progress.write(node, fresh, got.version) };
      }
      return got;
    } catch (e) {
      if (!(e instanceof ProgressConflict)) throw e;
    }
  }
  throw new ProgressConflict(`retirement progress of ${node}: five conflicting writes in a row`);
}

/** One pass: run steps until one waits, the work is done, or another replica holds the current step. */
export async function runRetirementPass(deps: RetirementDeps, node: string, steps: readonly Step[], requestId?: string): Promise<RetirementReport> {
  const opts = optionsOf(deps);
  let { record, version } = await load(deps, node, requestId);
  const completedNow: StepName[] = [];
  const save = async (name: StepName, r: StepRecord): Promise<void> => {
    const next: ProgressRecord = { ...record, steps: { ...record.steps, [name]: r } };
    version = await deps.progress.write(node, next, version);
    record = next;
  };
  const earlier: Record<string, string> = {};

  for (const step of steps) {
    const prev = record.steps[step.name];
    if (prev?.state === "done") {
      if (prev.journalled !== true) {
        await deps.journal.record(node, { kind: "info", summary: `retirement step ${step.name} done: ${prev.detail ?? ""}` });
        await save(step.name, { ...prev, journalled: true });
      }
      Object.assign(earlier, prev.data ?? {});
      continue;
    }
    const now = deps.now?.() ?? new Date();
    if (prev?.state === "claimed" && prev.owner !== deps.owner && now.getTime() - Date.parse(prev.claimedAt) < opts.claimTtlMs) {
      return reportOf(node, steps, record, "busy", completedNow, { waitingFor: `step ${step.name} is claimed by ${prev.owner} since ${prev.claimedAt}` });
    }
    // Claim (compare-and-swap): of two replicas reaching this point with the same version, one write fails.
    try {
      await save(step.name, {
        ...(prev ?? {}), state: "claimed", owner: deps.owner, claimedAt: now.toISOString(), attempts: (prev?.attempts ?? 0) + 1,
      });
    } catch (e) {
      if (e instanceof ProgressConflict) {
        return reportOf(node, steps, record, "busy", completedNow, { waitingFor: `step ${step.name}: another replica changed the progress record first` });
      }
      throw e;
    }
    deps.log?.info({ node, step: step.name, attempt: record.steps[step.name]?.attempts }, "retirement step starting");
    let result: StepResult;
    try {
      result = await step.run({ node, deps, earlier, own: prev?.data ?? {} });
    } catch (e) {
      const msg = `error: ${(e as Error).message}`.slice(0, 2000);
      deps.log?.warn({ node, step: step.name, err: msg }, "retirement step failed; will retry");
      result = { done: false, waitingFor: msg, retryAfterMs: opts.platformPollMs };
    }
    const claimed = record.steps[step.name] as StepRecord;
    if (result.done) {
      const { waitingFor: _w, blocked: _b, ...rest } = claimed;
      await save(step.name, { ...rest, state: "done", completedAt: nowIso(deps), detail: result.detail, ...(result.data ? { data: result.data } : {}) });
      completedNow.push(step.name);
      deps.log?.info({ node, step: step.name, detail: result.detail }, "retirement step done");
      await deps.journal.record(node, { kind: "success", summary: `retirement step ${step.name} done: ${result.detail}` });
      await save(step.name, { ...(record.steps[step.name] as StepRecord), journalled: true });
      Object.assign(earlier, result.data ?? {});
      continue;
    }
    const changed = prev?.waitingFor !== result.waitingFor;
    await save(step.name, {
      ...claimed, state: "waiting", waitingFor: result.waitingFor,
      ...(result.blocked ? { blocked: true } : { blocked: false }),
      ...(result.data ? { data: { ...(claimed.data ?? {}), ...result.data } } : {}),
    });
    if (changed) {
      await deps.journal.record(node, {
        kind: result.blocked ? "danger" : result.waitingFor.startsWith("error:") ? "warning" : "info",
        summary: `retirement step ${step.name} ${result.blocked ? "blocked" : "waiting"}: ${result.waitingFor}`,
      });
    }
    return reportOf(node, steps, record, result.blocked ? "blocked" : "waiting", completedNow, { waitingFor: result.waitingFor, retryAfterMs: result.retryAfterMs });
  }
  if (record.finishedAt === undefined) {
    const next = { ...record, finishedAt: nowIso(deps) };
    version = await deps.progress.write(node, next, version);
    record = next;
    await deps.journal.record(node, { kind: "success", summary: `retirement of ${node} complete (${steps.length} steps)` });
  }
  return reportOf(node, steps, record, "complete", completedNow);
}
