/**
 * How fleetd's Workflows end, told in NetBox. netbox-script starts provision / attest / wipe Workflows and
 * Tinkerbell runs them; without this, a Workflow that failed (an action's error, a timeout, a BMC that would
 * not netboot) would leave nothing in NetBox but "Workflow created". Each pass lists fleetd's Workflows and, for
 * each finished one not journalled yet:
 *  - its boot Job failed (or could not be set up) before any action ran and the site's budget is not spent →
 *    started again (bootRestart.ts), journalled as a warning;
 *  - otherwise its end is journalled on the device (success, or danger naming the action, its state and the
 *    message the agent reported), then the Workflow is annotated so no pass journals it twice;
 *  - a provision Workflow that succeeded leaves the machine in HookOS (tink-controller only turns its netboot
 *    off): with a BMC (the Workflow's bootMode netboot) fleetd boots the installed OS — a Rufio Job
 *    `<workflow>-boot-disk` (power off, boot device disk once, power on) — before journalling; without one the
 *    journal says to power-cycle the machine.
 * Workflows retirement started (label fleetd.io/retirement) are retirement's to follow, and intake Workflows are
 * tink-server's: both are skipped. judgeOutcome is pure; followWorkflows is the loop body.
 */
import type { Journal, JournalEntry } from "../fleet/ports.js";
import { ANNOTATION_OUTCOME, isOurs, LABEL_MANAGED_BY, LABEL_MODE, LABEL_NODE, LABEL_RETIREMENT, MANAGED_BY, WORKFLOW, WorkflowObject } from "./api.js";
import { bootFailure, bootRestartsOf, restartWorkflow } from "./bootRestart.js";
import type { Objects } from "./objects.js";
import { isFinished } from "./workflowState.js";
import { bootInstalledOs } from "./bmc.js";
import { bootDiskJobName } from "./names.js";
import { mdCode } from "@fleetd/verify/text";

export type OutcomeVerdict =
  | { kind: "skip"; why: "not fleetd's" | "retirement's" | "unfinished" | "journalled" }
  | { kind: "restart"; attempt: number; of: number; entry: JournalEntry }
  | { kind: "journal"; entry: JournalEntry; bootDiskJob?: string };


type RecordedAction = NonNullable<NonNullable<NonNullable<WorkflowObject["status"]>["tasks"]>[number]["actions"]>[number];

/** The failed (or timed-out) action and the message the agent reported for it, as tink-server recorded them. */
function failedAction(wf: WorkflowObject, actions: RecordedAction[]): { name: string; state: string; message: string } | undefined {
  const cur = wf.status?.currentState;
  const bad = actions.find((a) => a.state === "FAILED" || a.state === "TIMEOUT") ?? actions.find((a) => a.name !== undefined && a.name === cur?.actionName);
  const name = bad?.name ?? cur?.actionName;
  if (!name) return undefined;
  return { name, state: bad?.state ?? cur?.state ?? "", message: (bad?.message ?? "").trim() };
}

export function judgeOutcome(wf: WorkflowObject, bootRetries: number): OutcomeVerdict {
  const m = wf.metadata;
  if (!isOurs(m)) return { kind: "skip", why: "not fleetd's" };
  if (m.labels?.[LABEL_RETIREMENT] === "true") return { kind: "skip", why: "retirement's" };
  const state = wf.status?.state ?? "";
  if (!isFinished(state)) return { kind: "skip", why: "unfinished" };
  if (m.annotations?.[ANNOTATION_OUTCOME]) return { kind: "skip", why: "journalled" };
  const mode = m.labels?.[LABEL_MODE] ?? "fleetd";
  const title = `${mode} Workflow ${m.name}`;
  const restarts = bootRestartsOf(wf);
  const boot = bootFailure(wf);
  if (boot !== undefined) {
    const check = { check: "workflow.boot-job", detail: `netboot-${m.name}: ${mdCode(boot)}` };
    if (restarts < bootRetries) {
      const attempt = restarts + 1;
      return { kind: "restart", attempt, of: bootRetries, entry: { kind: "warning", summary: `${title}: the boot Job failed before any action ran; started again (${attempt} of ${bootRetries})`, reasons: [check] } };
    }
    return { kind: "journal", entry: { kind: "danger", summary: `${title} failed: the boot Job failed before any action ran${restarts > 0 ? `, also after ${restarts} restart(s)` : ""}; no action ran`, reasons: [check] } };
  }
  const actions = (wf.status?.tasks ?? []).flatMap((t) => t.actions ?? []);
  if (state === "SUCCESS") {
    const summary = `${title} succeeded${actions.length ? `: ${actions.map((x) => x.name ?? "?").join(" → ")}` : ""}`;
    if (mode !== "provision") return { kind: "journal", entry: { kind: "success", summary } };
    if (wf.spec.bootOptions?.bootMode === "netboot") {
      const job = bootDiskJobName(m.name);
      return { kind: "journal", entry: { kind: "success", summary: `${summary}; booting the installed OS: Rufio Job ${job} (power off, boot device disk, power on)` }, bootDiskJob: job };
    }
    return { kind: "journal", entry: { kind: "success", summary: `${summary}; no BMC: power-cycle the machine to boot the installed OS (its netboot is off now)` } };
  }
  const a = failedAction(wf, actions);
  const reasons: NonNullable<JournalEntry["reasons"]> = [];
  if (a) reasons.push({ check: state === "TIMEOUT" ? "workflow.timeout" : "workflow.action", detail: `${a.name} (${a.state || state})${a.message ? `: ${mdCode(a.message)}` : ""}` });
  if (wf.status?.templateRendering === "failed") reasons.push({ check: "workflow.template", detail: `Template ${wf.spec.templateRef ?? "?"} did not render` });
  for (const c of wf.status?.conditions ?? []) {
    if (c.status === "True" && /Failed$/.test(c.type)) reasons.push({ check: "workflow.condition", detail: `${c.type}: ${mdCode(c.message ?? c.reason ?? "")}` });
  }
  const where = a ? ` at action ${a.name}` : "";
  const what = state === "TIMEOUT" ? `timed out${where}${wf.status?.globalTimeout ? ` (global timeout ${wf.status.globalTimeout} s)` : ""}` : `failed${where}`;
  return { kind: "journal", entry: { kind: "danger", summary: `${title} ${what}`, reasons } };
}

export interface FollowDeps {
  objects: Objects;
  journal: Journal;
  /** How often a Workflow whose boot Job failed is started again (site config tinkerbell.bootRetries). */
  bootRetries: number;
  log?: { info(o: object, m: string): void; warn(o: object, m: string): void };
}

export interface FollowReport {
  journalled: string[];
  /** Boot Jobs created for provision Workflows that succeeded (`<workflow>-boot-disk`). */
  booted: string[];
  restarted: string[];
  errors: { workflow: string; error: string }[];
}

/** One pass over fleetd's Workflows in the namespace (see the file comment). */
export async function followWorkflows(d: FollowDeps): Promise<FollowReport> {
  const report: FollowReport = { journalled: [], booted: [], restarted: [], errors: [] };
  const all = await d.objects.list(WORKFLOW, `${LABEL_MANAGED_BY}=${MANAGED_BY}`, WorkflowObject);
  for (const wf of all) {
    if (wf.metadata.deletionTimestamp) continue;
    const v = judgeOutcome(wf, d.bootRetries);
    if (v.kind === "skip") continue;
    const node = wf.metadata.labels?.[LABEL_NODE];
    try {
      if (v.kind === "restart") {
        // journal after the restart: a restart another replica made first is theirs to journal
        if (await restartWorkflow(d.objects, wf)) {
          report.restarted.push(wf.metadata.name);
          d.log?.warn({ workflow: wf.metadata.name, attempt: v.attempt, of: v.of }, v.entry.summary);
          await d.journal.record(node, v.entry);
        }
        continue;
      }
      // the boot Job first (the same Job again on a retry), then the journal, then the mark: a crash in between
      // journals it twice rather than never
      if (v.bootDiskJob !== undefined) {
        if (node === undefined) throw new Error(`Workflow ${wf.metadata.name} has no ${LABEL_NODE} label: no node to boot`);
        await bootInstalledOs(d.objects, node, wf.metadata.name);
        report.booted.push(v.bootDiskJob);
      }
      await d.journal.record(node, v.entry);
      await d.objects.mergePatch(WORKFLOW, wf.metadata.name, { metadata: { annotations: { [ANNOTATION_OUTCOME]: wf.status?.state ?? "" } } });
      report.journalled.push(wf.metadata.name);
      d.log?.info({ workflow: wf.metadata.name, node, state: wf.status?.state }, v.entry.summary);
    } catch (e) {
      report.errors.push({ workflow: wf.metadata.name, error: (e as Error).message });
      d.log?.warn({ workflow: wf.metadata.name, err: (e as Error).message }, "Workflow outcome not followed up; the next pass tries again");
    }
  }
  return report;
}
