/**
 * Step `evict`: evict every pod on the node through the Eviction API (policy/v1 Eviction on pods/eviction), so
 * PodDisruptionBudgets are respected, skipping what `kubectl drain` skips: DaemonSet-owned pods (the
 * DaemonSet controller would put them back) and mirror pods (the kubelet owns them). A refusal (429: the PDB
 * allows no disruption now) is retried until `evictionTimeoutMs`; then the step reports which pods and PDBs
 * block and stops as blocked (journalled for the operator). Done when no evictable pod is left on the node.
 * Idempotent: evicting a pod that is already terminating or gone changes nothing.
 */
import type * as k8s from "@kubernetes/client-node";
import { isNotFound, kubeStatus, type Kube } from "../kube/client.js";
import { statusMessage } from "./kubeStatusBody.js";
import { selects } from "./labelSelector.js";
import { optionsOf, type Step } from "./types.js";

const key = (p: k8s.V1Pod) => `${p.metadata?.namespace ?? ""}/${p.metadata?.name ?? ""}`;

/** Why `kubectl drain` would leave this pod alone, or undefined when it must be evicted. */
export function skipReason(pod: k8s.V1Pod): string | undefined {
  if (pod.metadata?.annotations?.["kubernetes.io/config.mirror"] !== undefined) return "mirror pod";
  const owner = pod.metadata?.ownerReferences?.find((o) => o.controller === true);
  if (owner?.kind === "DaemonSet") return `DaemonSet ${owner.name}`;
  return undefined;
}

async function podsOn(kube: Kube, node: string): Promise<k8s.V1Pod[]> {
  const out: k8s.V1Pod[] = [];
  let cont: string | undefined;
  do {
    const l = await kube.core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${node}`, limit: 500, ...(cont ? { _continue: cont } : {}) });
    out.push(...l.items);
    cont = l.metadata?._continue || undefined;
  } while (cont);
  return out;
}

/** The PDBs selecting this pod (named in the blocked report). */
async function pdbsOf(kube: Kube, pod: k8s.V1Pod): Promise<string[]> {
  const ns = pod.metadata?.namespace ?? "";
  const l = await kube.policy.listNamespacedPodDisruptionBudget({ namespace: ns });
  return l.items.filter((b) => selects(b.spec?.selector, pod.metadata?.labels)).map((b) => {
    const s = b.status;
    return `PodDisruptionBudget ${ns}/${b.metadata?.name} (disruptionsAllowed ${s?.disruptionsAllowed ?? "?"}, currentHealthy ${s?.currentHealthy ?? "?"}, desiredHealthy ${s?.desiredHealthy ?? "?"})`;
  });
}

export const evictStep: Step = {
  name: "evict",
  summary: "evict the node's pods through the Eviction API (PDBs respected; DaemonSet and mirror pods skipped)",
  async run({ node, deps }) {
    const opts = optionsOf(deps);
    const sleep = deps.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
    const clock = () => (deps.now?.() ?? new Date()).getTime();
    const deadline = clock() + opts.evictionTimeoutMs;
    const evicted = new Set<string>();
    const refused = new Map<string, string>();
    let refusals = 0;
    for (;;) {
      const pods = await podsOn(deps.workload, node);
      const skipped = pods.flatMap((p) => { const r = skipReason(p); return r ? [`${key(p)} (${r})`] : []; });
      const left = pods.filter((p) => skipReason(p) === undefined);
      if (left.length === 0) {
        return {
          done: true,
          detail: `no evictable pod left on ${node}; evicted now: ${evicted.size ? [...evicted].sort().join(", ") : "none"}` +
            `${refusals ? `; ${refusals} eviction(s) refused by a PodDisruptionBudget and retried` : ""}` +
            `; skipped: ${skipped.length ? skipped.sort().join(", ") : "none"}`,
        };
      }
      for (const pod of left) {
        if (pod.metadata?.deletionTimestamp) continue; // terminating: wait for it to go
        const name = pod.metadata?.name ?? "";
        const namespace = pod.metadata?.namespace ?? "";
        try {
          await deps.workload.core.createNamespacedPodEviction({
            name, namespace,
            body: {
              apiVersion: "policy/v1", kind: "Eviction", metadata: { name, namespace },
              ...(opts.evictionGraceSeconds !== undefined ? { deleteOptions: { gracePeriodSeconds: opts.evictionGraceSeconds } } : {}),
            },
          });
          evicted.add(key(pod));
          refused.delete(key(pod));
        } catch (e) {
          if (isNotFound(e)) continue; // gone meanwhile
          const status = kubeStatus(e);
          // 429: a PDB allows no disruption now; 500 with several PDBs selecting the pod (the API refuses those).
          if (status === 429 || (status === 500 && /disruption budget/i.test(statusMessage(e)))) {
            refusals++;
            refused.set(key(pod), statusMessage(e));
            continue;
          }
          throw new Error(`eviction of pod ${key(pod)} failed: ${statusMessage(e)}`);
        }
      }
      if (clock() >= deadline) {
        const lines: string[] = [];
        for (const pod of left) {
          const k = key(pod);
          const why = refused.get(k);
          if (why !== undefined) {
            const pdbs = await pdbsOf(deps.workload, pod);
            lines.push(`${k}: eviction refused (${why})${pdbs.length ? `; ${pdbs.join("; ")}` : ""}`);
          } else {
            lines.push(`${k}: ${pod.metadata?.deletionTimestamp ? "still terminating" : "not yet evicted"}`);
          }
        }
        return {
          done: false, blocked: true, retryAfterMs: opts.evictionTimeoutMs,
          waitingFor: `${left.length} pod(s) still on ${node} after ${Math.round(opts.evictionTimeoutMs / 1000)} s: ${lines.join(" | ")}`,
        };
      }
      await sleep(opts.evictionPollMs);
    }
  },
};
