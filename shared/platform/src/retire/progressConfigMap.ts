/**
 * RetirementProgress in the management cluster: a ConfigMap `fleetd-retire-<node>` per node in fleetd's
 * namespace, labelled as fleetd's, replaced only at the resourceVersion that was read (409 → ProgressConflict).
 * RBAC there: configmaps get/list/create/update/delete in that namespace.
 */
import type * as k8s from "@kubernetes/client-node";
import { isConflict, isNotFound, type Kube } from "../kube/client.js";
import { ProgressConflict, ProgressRecord, type RetirementProgress, type VersionedProgress } from "./progress.js";
import { OWNER_LABELS, OWNER_SELECTOR, ownedByFleetd } from "../fleet/ownership.js";

export const PROGRESS_LABELS = { ...OWNER_LABELS, "fleetd.io/record": "retirement" } as const;
const KEY = "progress.json";

export const progressConfigMapName = (node: string): string => `fleetd-retire-${node}`;

export const RETIREMENT_PROGRESS_ERROR_CODES = ["retire-progress-malformed", "retire-progress-foreign"] as const;

export class RetirementProgressError extends Error {
  override readonly name = "RetirementProgressError";
  constructor(readonly code: (typeof RETIREMENT_PROGRESS_ERROR_CODES)[number], message: string) {
    super(message);
  }
}

export function configMapProgress(kube: Kube, namespace: string): RetirementProgress {
  const parse = (cm: k8s.V1ConfigMap, node: string): VersionedProgress => {
    const name = progressConfigMapName(node);
    if (!ownedByFleetd(cm.metadata?.labels)) {
      throw new RetirementProgressError("retire-progress-foreign", `ConfigMap ${namespace}/${name} exists but is not labelled as fleetd's; refusing to use it`);
    }
    let raw: unknown;
    try {
      raw = JSON.parse(cm.data?.[KEY] ?? "");
    } catch (e) {
      throw new RetirementProgressError("retire-progress-malformed", `ConfigMap ${namespace}/${name}: ${KEY} is not JSON (${(e as Error).message})`);
    }
    const r = ProgressRecord.safeParse(raw);
    if (!r.success) {
      throw new RetirementProgressError("retire-progress-malformed",
        `ConfigMap ${namespace}/${name}: ${r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
    }
    if (r.data.node !== node) throw new RetirementProgressError("retire-progress-malformed", `ConfigMap ${namespace}/${name} records node ${r.data.node}`);
    return { record: r.data, version: cm.metadata?.resourceVersion ?? "" };
  };
  const body = (node: string, record: ProgressRecord, version: string | undefined): k8s.V1ConfigMap => ({
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: {
      name: progressConfigMapName(node),
      namespace,
      labels: { ...PROGRESS_LABELS, "fleetd.io/node": node },
      ...(version !== undefined ? { resourceVersion: version } : {}),
    },
    data: { [KEY]: JSON.stringify(record, null, 1) },
  });
  return {
    async read(node) {
      try {
        return parse(await kube.core.readNamespacedConfigMap({ name: progressConfigMapName(node), namespace }), node);
      } catch (e) {
        if (isNotFound(e)) return undefined;
        throw e;
      }
    },
    async write(node, record, version) {
      try {
        const cm = version === undefined
          ? await kube.core.createNamespacedConfigMap({ namespace, body: body(node, record, version) })
          : await kube.core.replaceNamespacedConfigMap({ name: progressConfigMapName(node), namespace, body: body(node, record, version) });
        return cm.metadata?.resourceVersion ?? "";
      } catch (e) {
        if (isConflict(e) || (version !== undefined && isNotFound(e))) {
          throw new ProgressConflict(`retirement progress of ${node} changed meanwhile (ConfigMap ${namespace}/${progressConfigMapName(node)})`);
        }
        throw e;
      }
    },
    async remove(node) {
      // Only fleetd's record of this node (label and recorded node checked by parse), with its UID as read.
      try {
        const cm = await kube.core.readNamespacedConfigMap({ name: progressConfigMapName(node), namespace });
        parse(cm, node);
        const uid = cm.metadata?.uid;
        await kube.core.deleteNamespacedConfigMap({ name: progressConfigMapName(node), namespace, ...(uid ? { body: { preconditions: { uid } } } : {}) });
      } catch (e) {
        if (!isNotFound(e) && !isConflict(e)) throw e;
      }
    },
    async list() {
      const l = await kube.core.listNamespacedConfigMap({ namespace, labelSelector: `${OWNER_SELECTOR},fleetd.io/record=retirement` });
      return l.items.map((cm) => cm.metadata?.labels?.["fleetd.io/node"]).filter((n): n is string => typeof n === "string");
    },
  };
}
