/**
 * Retirement wired into the handler: a device in status `decommissioning` runs shared/platform/src/retire's steps in
 * the background (they can wait an hour on a PodDisruptionBudget or the wipe), one run per node at a time.
 * Progress lives in the management cluster (a ConfigMap per node), so a restarted or newly elected handler
 * resumes where the last one stopped; the reconcile loop re-queues every decommissioning device that is not
 * settled, which is what resumes it. Needs both clusters: the workload one (cordon, evict, delete) and the
 * management one (wipe Workflow, Rufio power-off, progress records).
 */
import type { Logger } from "pino";
import { nodeEntry, type NodesFile } from "@fleetd/platform/fleet";
import type { Kube } from "@fleetd/platform/kube";
import { type NetBox, netboxJournal } from "@fleetd/platform/netbox";
import { configMapProgress, netboxRetirementInventory, retireNode, type RetirementOptions, type RetirementReport, type RetirementSpire } from "@fleetd/platform/retire";
import { type TinkerbellEffects, tinkerbellRetirementPlatform } from "@fleetd/platform/tinkerbell";
import { platformNodeOf, type RetireFn } from "./effects.js";

export interface RetirementWiring {
  tinkerbell: TinkerbellEffects;
  /** The management cluster (progress ConfigMaps live in the Tinkerbell namespace). */
  management: Kube;
  workload: Kube;
  nb: NetBox;
  nodes: NodesFile;
  /** The boot interface's MAC as NetBox holds it. */
  bootMac(deviceId: number): Promise<string | undefined>;
  /** This replica's identity (pod name), written into step claims. */
  owner: string;
  log: Logger;
  options?: Partial<RetirementOptions>;
  /** SPIRE's step (handler.spireNodes); absent: the step says SPIRE is not configured. */
  spire?: RetirementSpire;
  /** Called when a run ends (tests, metrics). */
  onReport?: (node: string, report: RetirementReport | Error) => void;
}

export function retirementFor(w: RetirementWiring): { retire: RetireFn; running(): string[]; idle(): Promise<void> } {
  const runs = new Map<string, Promise<void>>();
  const retire: RetireFn = async (req) => {
    if (runs.has(req.node)) return; // one run per node; the running one picks up where it is
    const entry = nodeEntry(w.nodes, req.node);
    if (!entry) throw new Error(`${req.node} is not in the nodes file: it cannot be retired by fleetd`);
    const platform = tinkerbellRetirementPlatform({
      effects: w.tinkerbell,
      requestId: req.requestKey,
      log: w.log,
      node: async (name) => platformNodeOf(name, entry, await w.bootMac(req.deviceId)),
    });
    const run = retireNode(
      {
        workload: w.workload,
        progress: configMapProgress(w.management, w.tinkerbell.namespace),
        platform,
        inventory: netboxRetirementInventory(w.nb),
        journal: netboxJournal(w.nb),
        owner: w.owner,
        log: w.log,
        ...(w.spire ? { spire: w.spire } : {}),
        ...(w.options ? { options: w.options } : {}),
      },
      req.node,
      { requestId: req.requestKey },
    )
      .then((report) => {
        w.log.info({ node: req.node, status: report.status }, "retirement pass ended");
        w.onReport?.(req.node, report);
      })
      .catch((e: unknown) => {
        w.log.error({ node: req.node, err: e }, "retirement failed; the reconcile loop resumes it");
        w.onReport?.(req.node, e as Error);
      })
      .finally(() => runs.delete(req.node));
    runs.set(req.node, run);
  };
  return {
    retire,
    running: () => [...runs.keys()],
    idle: async () => {
      await Promise.all([...runs.values()]);
    },
  };
}
