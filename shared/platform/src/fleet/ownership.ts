/**
 * What marks a Kubernetes object as fleetd's: fleetd updates or deletes only objects that carry this label, and
 * lists its own by it. It is not `app.kubernetes.io/managed-by`: deploy tools (Helm, Argo CD, Kustomize) own that
 * one and may overwrite it, and fleetd must neither lose its objects nor fight a deploy tool over a label.
 */
export const OWNER_LABEL = "fleetd.io/owner";
export const OWNER_VALUE = "fleetd";
export const OWNER_LABELS = { [OWNER_LABEL]: OWNER_VALUE } as const;
/** The label selector of fleetd's objects. */
export const OWNER_SELECTOR = `${OWNER_LABEL}=${OWNER_VALUE}`;

export function ownedByFleetd(labels: Record<string, string> | undefined | null): boolean {
  return labels?.[OWNER_LABEL] === OWNER_VALUE;
}

/**
 * A workload-cluster Node fleetd quarantined (talos-config-server/README.md "Quarantine") carries this label
 * (value OWNER_VALUE) and the annotation QUARANTINE_SET_ANNOTATION saying what fleetd set: fleetd lifts only
 * what it set, and only from a Node whose label says fleetd set it (an operator's own cordon or taint stays).
 */
export const QUARANTINE_LABEL = "fleetd.io/quarantined-by";
/** JSON `{ taint: boolean, unschedulable: boolean, at, why }`: what fleetd changed when it cordoned the Node. */
export const QUARANTINE_SET_ANNOTATION = "fleetd.io/quarantine-set";
/** The taint fleetd puts on a quarantined worker's Node (effect NoSchedule). */
export const QUARANTINE_TAINT = "fleetd.io/quarantine";
