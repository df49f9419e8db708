/**
 * Step `spire`: the node's SPIRE identity is gone before NetBox says `offline` — its node entry removed and the
 * agents that attested as it banned, confirmed rather than assumed. netbox-script republishes spire-nodes.json
 * (the device is `decommissioning`, so the list no longer holds it) and reads spire-plugin's status
 * (spire/syncStatus.ts): the step is done once spire-plugin applied exactly that list, converged, and has no ban
 * of the node pending; until then it waits (journalled once per reason, retried every `pollMs`). A site without
 * SPIRE (`deps.spire` absent) passes the step with that said.
 */
import type { RemovalCheck } from "../spire/syncStatus.js";
import type { Step } from "./types.js";

export interface RetirementSpire {
  /** Republish the node list and say whether spire-plugin has applied it and banned the node's agents. */
  confirmRemoved(node: string): Promise<RemovalCheck>;
  /** Wait between looks (default 1 s). */
  pollMs?: number;
}

export const spireStep: Step = {
  name: "spire",
  summary: "remove the node's SPIRE entry and ban its agents (confirmed by spire-plugin's status)",
  async run({ node, deps }) {
    if (!deps.spire) return { done: true, detail: "SPIRE is not configured for this site (no node list is published): nothing to remove" };
    const c = await deps.spire.confirmRemoved(node);
    if (c.confirmed) return { done: true, detail: c.detail };
    return { done: false, waitingFor: c.waitingFor, retryAfterMs: deps.spire.pollMs ?? 1000 };
  },
};
