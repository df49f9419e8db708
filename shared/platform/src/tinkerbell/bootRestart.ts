/**
 * A Workflow whose boot Job failed before any action ran is started again, a bounded number of times. No action
 * ran, so nothing happened to the disk; and Tinkerbell v0.25.0 fails boot Jobs by itself now and then (Rufio's
 * Job controller creates a Task twice, tink-controller the Job, each failing on AlreadyExists). "Again" is the same
 * object: deleted (UID precondition) and created with the same name, labels, annotations and spec, with the
 * restart count carried in an annotation so every replica and every restart of fleetd counts the same way.
 * The old `netboot-<workflow>` Job and its Tasks must be gone first (the garbage collector removes them with the
 * old Workflow): tink-controller adopts an existing Job of that name for a new Workflow, and Rufio fails a Job
 * whose Task name is taken.
 */
import { isConflict } from "../kube/client.js";
import { AnyObject, ANNOTATION_BOOT_RESTARTS, ANNOTATION_OUTCOME, apiVersionOf, BMC_JOB, BMC_TASK, WORKFLOW, WorkflowObject } from "./api.js";
import type { Objects } from "./objects.js";

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Why the Workflow failed at its boot Job, before any action ran: the Job failed (`BootJobFailed`), or
 * tink-controller could not set it up (`BootJobSetupFailed`; v0.25.0 does that by itself now and then: it
 * creates the Job, reconciles again before its cache shows it, and fails on AlreadyExists).
 */
export function bootFailure(wf: WorkflowObject): string | undefined {
  if (wf.status?.state !== "FAILED" || wf.status.currentState?.actionName) return undefined;
  const c = (wf.status.conditions ?? []).find((x) => (x.type === "BootJobFailed" || x.type === "BootJobSetupFailed") && x.status === "True");
  return c ? `${c.type}: ${c.message || c.reason || "no message"}` : undefined;
}

/** How often this Workflow was started again already (a missing or garbled annotation counts as 0). */
export function bootRestartsOf(wf: WorkflowObject): number {
  const v = wf.metadata.annotations?.[ANNOTATION_BOOT_RESTARTS] ?? "";
  return /^[0-9]{1,3}$/.test(v) ? Number(v) : 0;
}

/**
 * Deletes `wf` (exactly that UID) and creates it again with the restart count raised. Returns false when another
 * replica (or retirement) got there first: the object had changed under us, and the new one is theirs.
 */
export async function restartWorkflow(objs: Objects, wf: WorkflowObject): Promise<boolean> {
  const uid = wf.metadata.uid;
  try {
    await objs.delete(WORKFLOW, wf.metadata.name, uid);
  } catch (e) {
    if (isConflict(e)) return false; // the UID precondition failed: it was started again already
    throw e;
  }
  for (let i = 0; i < 150; i++) {
    const now = await objs.get(WORKFLOW, wf.metadata.name, WorkflowObject);
    if (!now) break;
    if (now.metadata.uid !== uid) return false;
    await sleep(200);
  }
  // the garbage collector's part: the old boot Job (owned by the old UID) and its Tasks
  const job = `netboot-${wf.metadata.name}`;
  for (let i = 0; i < 300; i++) {
    const live = await objs.get(BMC_JOB, job, AnyObject);
    const staleJob = live !== undefined && (live.metadata.ownerReferences ?? []).some((r) => r.uid === uid);
    // a Task is stale unless a Job of the new Workflow owns it (another replica may have restarted it already)
    const current = !staleJob ? live?.metadata.uid : undefined;
    const tasks = await objs.list(BMC_TASK, `owner-name=${job}`, AnyObject);
    const staleTasks = tasks.filter((t) => !(t.metadata.ownerReferences ?? []).some((r) => current !== undefined && r.uid === current));
    if (!staleJob && staleTasks.length === 0) break;
    await sleep(200);
  }
  const annotations: Record<string, string> = { ...(wf.metadata.annotations ?? {}), [ANNOTATION_BOOT_RESTARTS]: String(bootRestartsOf(wf) + 1) };
  delete annotations[ANNOTATION_OUTCOME];
  const spec: Record<string, unknown> = { ...wf.spec };
  try {
    await objs.create(WORKFLOW, {
      apiVersion: apiVersionOf(WORKFLOW),
      kind: WORKFLOW.kind,
      metadata: { name: wf.metadata.name, namespace: objs.namespace, labels: wf.metadata.labels ?? {}, annotations },
      spec,
    });
  } catch (e) {
    if (isConflict(e)) return false;
    throw e;
  }
  return true;
}
