/**
 * STAND-IN for the management-cluster effects (the Tinkerbell wipe Workflow and the Rufio power Job, built on
 * another branch in shared/platform/src/tinkerbell): real ConfigMaps on the real API server, one per "Workflow" and
 * "Job", whose `state` the test sets. Being API objects, the state is shared between the test and a retirement
 * running in a child process. Each start call counts itself in the object (`starts`), so a test can prove a
 * completed step was not run again. Swapped for the real Tinkerbell/Rufio platform when the lead wires it.
 */
import * as k8s from "@kubernetes/client-node";
import { isConflict, isNotFound, type Kube } from "@fleetd/platform/kube";
import type { RetirementPlatform } from "@fleetd/platform/retire";

export const STANDIN_LABEL = "fleetd.io/test-standin";

export interface ConfigMapTestPlatform extends RetirementPlatform {
  set(name: string, state: string): Promise<void>;
  starts(name: string): Promise<number>;
}

export function configMapTestPlatform(kube: Kube, namespace: string, initialJobState = "running", initialWorkflowState = "running"): ConfigMapTestPlatform {
  const read = (name: string) => kube.core.readNamespacedConfigMap({ name, namespace });
  /** Create or count a start; idempotent per name (as the real effects must be). */
  const start = async (name: string, kind: string, initial: string): Promise<string> => {
    for (;;) {
      try {
        const cm = await read(name);
        const n = Number(cm.data?.["starts"] ?? "0") + 1;
        await kube.core.replaceNamespacedConfigMap({ name, namespace, body: { ...cm, data: { ...cm.data, starts: String(n) } } });
        return name;
      } catch (e) {
        if (isConflict(e)) continue;
        if (!isNotFound(e)) throw e;
      }
      try {
        await kube.core.createNamespacedConfigMap({ namespace, body: {
          metadata: { name, namespace, labels: { [STANDIN_LABEL]: kind } }, data: { kind, state: initial, starts: "1" },
        } });
        return name;
      } catch (e) {
        if (!isConflict(e)) throw e;
      }
    }
  };
  const state = async (name: string): Promise<string> => {
    try {
      return (await read(name)).data?.["state"] ?? "missing";
    } catch (e) {
      if (isNotFound(e)) return "missing";
      throw e;
    }
  };
  return {
    startWipe: (node) => start(`standin-wipe-${node}`, "Workflow", initialWorkflowState),
    workflowState: async (name) => (await state(name)) as Awaited<ReturnType<RetirementPlatform["workflowState"]>>,
    startPowerOff: (node) => start(`standin-poweroff-${node}`, "Job", initialJobState),
    jobState: async (name) => (await state(name)) as Awaited<ReturnType<RetirementPlatform["jobState"]>>,
    async set(name, s) {
      await kube.core.patchNamespacedConfigMap({ name, namespace, body: { data: { state: s } } }, k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.MergePatch));
    },
    async starts(name) {
      try {
        return Number((await read(name)).data?.["starts"] ?? "0");
      } catch (e) {
        if (isNotFound(e)) return 0;
        throw e;
      }
    },
  };
}
