/**
 * Quarantine in the workload cluster (talos-config-server/README.md "Quarantine"): a worker whose authenticated
 * runtime quote missed its class profile gets the taint `fleetd.io/quarantine:NoSchedule` and
 * `spec.unschedulable: true`, labelled and annotated as fleetd's doing (fleet/ownership.ts), so that lifting it
 * later removes only what fleetd set. Both are read-modify-replace with the Node's resourceVersion (the taint
 * list cannot be merge-patched without replacing an operator's taints); a conflict re-reads. Idempotent: the
 * outbox delivers at least once. Running Pods are not evicted: existing workloads keep running until an
 * operator drains the Node; new ones are not scheduled there.
 */
import type * as k8s from "@kubernetes/client-node";
import { OWNER_VALUE, QUARANTINE_LABEL, QUARANTINE_SET_ANNOTATION, QUARANTINE_TAINT } from "../fleet/ownership.js";
import { Unavailable } from "../outage/outage.js";
import { isConflict, isNotFound, kubeStatus, type Kube } from "./client.js";

/** The API server did not answer, or answered 5xx: an outage (the outbox retries soon); anything else stays a failure. */
function outage(e: unknown, what: string): unknown {
  const status = kubeStatus(e);
  return status === undefined || status >= 500 ? new Unavailable("kubernetes-unavailable", `${what}: ${status ?? (e as Error).message}`) : e;
}

export interface NodeQuarantine {
  /** Cordon the Node `name`; "absent" when the workload cluster has no such Node. */
  cordon(name: string, why: string): Promise<"cordoned" | "already" | "absent">;
  /** Lift fleetd's cordon of `name` (only what fleetd's annotation says it set); "not-ours" when fleetd's label is absent. */
  uncordon(name: string): Promise<"lifted" | "not-ours" | "absent">;
}

interface SetByFleetd {
  taint: boolean;
  unschedulable: boolean;
  at: string;
  why: string;
}

function setByFleetd(n: k8s.V1Node): SetByFleetd | undefined {
  if (n.metadata?.labels?.[QUARANTINE_LABEL] !== OWNER_VALUE) return undefined;
  const raw = n.metadata.annotations?.[QUARANTINE_SET_ANNOTATION];
  try {
    const v = JSON.parse(raw ?? "{}") as Partial<SetByFleetd>;
    return { taint: v.taint === true, unschedulable: v.unschedulable === true, at: String(v.at ?? ""), why: String(v.why ?? "") };
  } catch {
    return { taint: true, unschedulable: false, at: "", why: "" }; // an annotation someone mangled: lift only fleetd's own taint
  }
}

export class KubeNodeQuarantine implements NodeQuarantine {
  constructor(
    private readonly kube: Pick<Kube, "core">,
    private readonly now: () => Date = () => new Date(),
  ) {}

  private async modify<R>(name: string, change: (n: k8s.V1Node) => { next: k8s.V1Node; result: R } | { result: R }): Promise<R | "absent"> {
    for (let attempt = 0; attempt < 10; attempt++) {
      let current: k8s.V1Node;
      try {
        current = await this.kube.core.readNode({ name });
      } catch (e) {
        if (isNotFound(e)) return "absent";
        throw outage(e, `reading Node ${name}`);
      }
      const c = change(structuredClone(current));
      if (!("next" in c)) return c.result;
      try {
        await this.kube.core.replaceNode({ name, body: c.next });
        return c.result;
      } catch (e) {
        if (isNotFound(e)) return "absent";
        if (!isConflict(e)) throw outage(e, `updating Node ${name}`);
      }
    }
    throw new Error(`Node ${name} kept changing while fleetd tried to update it (10 conflicts)`);
  }

  cordon(name: string, why: string): Promise<"cordoned" | "already" | "absent"> {
    return this.modify(name, (n) => {
      const taints = n.spec?.taints ?? [];
      const hasTaint = taints.some((t) => t.key === QUARANTINE_TAINT && t.effect === "NoSchedule");
      const unschedulable = n.spec?.unschedulable === true;
      const prior = setByFleetd(n);
      if (hasTaint && unschedulable && prior) return { result: "already" as const };
      const set: SetByFleetd = {
        taint: (prior?.taint ?? false) || !hasTaint,
        unschedulable: (prior?.unschedulable ?? false) || !unschedulable,
        at: prior?.at || this.now().toISOString(),
        why: prior?.why || why.slice(0, 500),
      };
      n.spec = { ...n.spec, unschedulable: true, taints: hasTaint ? taints : [...taints, { key: QUARANTINE_TAINT, value: "runtime-attestation", effect: "NoSchedule" }] };
      n.metadata = {
        ...n.metadata,
        labels: { ...n.metadata?.labels, [QUARANTINE_LABEL]: OWNER_VALUE },
        annotations: { ...n.metadata?.annotations, [QUARANTINE_SET_ANNOTATION]: JSON.stringify(set) },
      };
      return { next: n, result: "cordoned" as const };
    });
  }

  uncordon(name: string): Promise<"lifted" | "not-ours" | "absent"> {
    return this.modify(name, (n) => {
      const set = setByFleetd(n);
      if (!set) return { result: "not-ours" as const };
      const taints = (n.spec?.taints ?? []).filter((t) => !(set.taint && t.key === QUARANTINE_TAINT));
      n.spec = { ...n.spec, taints, ...(set.unschedulable ? { unschedulable: false } : {}) };
      const labels = { ...n.metadata?.labels };
      delete labels[QUARANTINE_LABEL];
      const annotations = { ...n.metadata?.annotations };
      delete annotations[QUARANTINE_SET_ANNOTATION];
      n.metadata = { ...n.metadata, labels, annotations };
      return { next: n, result: "lifted" as const };
    });
  }
}
