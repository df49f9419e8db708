/** A Workflow's progress, read back (zod) and summarised: state, whether it is finished, the failed action. */
import { FINISHED_STATES, WORKFLOW, WorkflowObject, type WorkflowStateName } from "./api.js";
import type { Objects } from "./objects.js";

export interface WorkflowState {
  name: string;
  /** status.state; "" until tink-controller first reconciles it. */
  state: string;
  finished: boolean;
  agentID?: string;
  /** The action that was running when it ended, and its state (FAILED/TIMEOUT). */
  action?: { name: string; state: string };
  conditions: { type: string; status: string; message?: string }[];
}

export const isFinished = (state: string): boolean => (FINISHED_STATES as readonly string[]).includes(state as WorkflowStateName);

export function summarise(wf: WorkflowObject): WorkflowState {
  const state = wf.status?.state ?? "";
  const cur = wf.status?.currentState;
  return {
    name: wf.metadata.name,
    state,
    finished: isFinished(state),
    ...(wf.status?.agentID ? { agentID: wf.status.agentID } : {}),
    ...(cur?.actionName ? { action: { name: cur.actionName, state: cur.state ?? "" } } : {}),
    conditions: (wf.status?.conditions ?? []).map((c) => ({ type: c.type, status: c.status, ...(c.message ? { message: c.message } : {}) })),
  };
}

export async function workflowState(objs: Objects, name: string): Promise<WorkflowState | undefined> {
  const wf = await objs.get(WORKFLOW, name, WorkflowObject);
  return wf ? summarise(wf) : undefined;
}
