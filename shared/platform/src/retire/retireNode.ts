/**
 * Retire a node (NetBox status `decommissioning`): cordon; evict; netboot into HookOS (the wipe Workflow);
 * delete the Node; delete fleetd's cluster records (bootstrap token, CSRs); wait for the wipe; power off;
 * SPIRE entry removed and agents banned (confirmed by spire-plugin); NetBox offline. Each step is idempotent and recorded when it completes; calling retireNode again (after a
 * crash, on another replica) continues at the first incomplete step.
 */
import { cordonStep } from "./cordon.js";
import { deleteClusterRecordsStep } from "./deleteClusterRecords.js";
import { deleteNodeStep } from "./deleteNode.js";
import { evictStep } from "./evict.js";
import { netbootStep } from "./netboot.js";
import { netboxOfflineStep } from "./netboxOffline.js";
import { powerOffStep } from "./powerOff.js";
import { spireStep } from "./spire.js";
import { runRetirementPass, type RetirementReport } from "./runner.js";
import { optionsOf, type RetirementDeps, type Step } from "./types.js";
import { wipeStep } from "./wipe.js";

/** The steps, in order. */
export const RETIREMENT_STEPS: readonly Step[] = [
  cordonStep, evictStep, netbootStep, deleteNodeStep, deleteClusterRecordsStep, wipeStep, powerOffStep, spireStep, netboxOfflineStep,
];

export interface RetireOptions {
  /** The request being answered (e.g. the NetBox change id that set `decommissioning`): a finished retirement
   * for another request starts afresh (the machine was provisioned and is retired again). */
  requestId?: string;
  /** The steps to run (tests; default RETIREMENT_STEPS). */
  steps?: readonly Step[];
}

/**
 * Run passes until the retirement is complete, blocked (needs an operator), busy (another replica holds the
 * current step) or the time budget (options.budgetMs) is spent while waiting; returns the report.
 */
export async function retireNode(deps: RetirementDeps, node: string, opts: RetireOptions = {}): Promise<RetirementReport> {
  const o = optionsOf(deps);
  const clock = () => (deps.now?.() ?? new Date()).getTime();
  const sleep = deps.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const deadline = clock() + o.budgetMs;
  const completedNow: RetirementReport["completedNow"] = [];
  for (;;) {
    const pass = await runRetirementPass(deps, node, opts.steps ?? RETIREMENT_STEPS, opts.requestId);
    completedNow.push(...pass.completedNow);
    const report = { ...pass, completedNow: [...completedNow] };
    if (report.status !== "waiting") return report;
    const wait = report.retryAfterMs ?? o.platformPollMs;
    if (clock() + wait > deadline) return report;
    await sleep(wait);
  }
}
