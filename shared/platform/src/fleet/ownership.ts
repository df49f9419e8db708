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
