/**
 * `spire-sync-status.json`: what spire-plugin last applied, written by it after every pass (same stores as the
 * list: a file or a ConfigMap). Retirement's `spire` step reads it: a node's entry is confirmed removed and its
 * agents banned once the status names the digest of the list now published, that list does not hold the node,
 * the pass converged (every write OK), and no ban of the node is pending.
 */
import { z } from "zod";
import { canonicalJson, type NodeList, nodeListDigest } from "./nodeList.js";

export const SYNC_STATUS_API_VERSION = "fleetd.io/spire-sync-status/v1";
/** Bans kept in the status (newest last). */
export const SYNC_STATUS_MAX_BANS = 200;

const Sel = z.strictObject({ type: z.string().min(1).max(64), value: z.string().min(1).max(256) });

export const SyncStatus = z.strictObject({
  apiVersion: z.literal(SYNC_STATUS_API_VERSION),
  /** The digest of the list this pass applied (`nodeListDigest`); null before a valid list was read. */
  listDigest: z.string().regex(/^sha256:[0-9a-f]{64}$/).nullable(),
  at: z.iso.datetime({ offset: true }),
  /** Every write of the pass was OK and no ban is pending. */
  converged: z.boolean(),
  /** fleetd's entries after the pass. */
  entries: z.number().int().min(0),
  pendingBans: z.array(z.strictObject({ node: z.string().min(1).max(63), selectors: z.array(Sel).max(8) })).max(100_000),
  /**
   * Nodes whose entry's selectors moved (a renewed LDevID) and whose agent has not attested with them yet: its
   * agents carrying the previous selectors are deleted on every pass so that they attest again. Not part of
   * `converged` (a node's renewal does not hold back another node's retirement). Absent when none.
   */
  pendingReattests: z.array(z.strictObject({ node: z.string().min(1).max(63), previous: z.array(Sel).max(8), current: z.array(z.array(Sel).max(8)).max(8), since: z.iso.datetime({ offset: true }), deletions: z.number().int().min(0) })).max(100_000).optional(),
  bans: z.array(z.strictObject({ node: z.string().min(1).max(63), agents: z.array(z.string().max(2048)).max(1000), at: z.iso.datetime({ offset: true }) })).max(SYNC_STATUS_MAX_BANS),
  /** Why the last pass did not converge (a refused list, SPIRE down, item errors). */
  error: z.string().max(4000).optional(),
});
export type SyncStatus = z.infer<typeof SyncStatus>;

export function serializeSyncStatus(s: SyncStatus): string {
  return canonicalJson(s);
}

export function parseSyncStatus(bytes: Uint8Array | string): SyncStatus {
  const text = typeof bytes === "string" ? bytes : Buffer.from(bytes).toString("utf8");
  return SyncStatus.parse(JSON.parse(text));
}

export type RemovalCheck = { confirmed: true; detail: string } | { confirmed: false; waitingFor: string };

/** Whether spire-plugin has applied `list` (which must not hold `node`) and banned the node's agents. */
export function spireRemovalConfirmed(status: SyncStatus | undefined, list: NodeList, node: string): RemovalCheck {
  if (list.nodes.some((n) => n.name === node)) return { confirmed: false, waitingFor: `the published spire-nodes.json still lists ${node}` };
  if (!status) return { confirmed: false, waitingFor: "spire-plugin has not written its status yet" };
  const digest = nodeListDigest(list);
  if (status.listDigest !== digest) return { confirmed: false, waitingFor: `spire-plugin has not applied the current spire-nodes.json yet (applied ${status.listDigest ?? "none"} at ${status.at}, published ${digest})` };
  if (status.pendingBans.some((b) => b.node === node)) return { confirmed: false, waitingFor: `spire-plugin has not banned the agents of ${node} yet${status.error ? ` (${status.error})` : ""}` };
  if (!status.converged) return { confirmed: false, waitingFor: `spire-plugin's last pass did not converge${status.error ? `: ${status.error}` : ""}` };
  const bans = status.bans.filter((b) => b.node === node).flatMap((b) => b.agents);
  return {
    confirmed: true,
    detail: `SPIRE holds no entry of ${node} (spire-plugin applied ${digest.slice(0, 19)}… at ${status.at}); ${bans.length > 0 ? `agents banned: ${bans.join(", ")}` : "no attested agent of it was found to ban"}`,
  };
}
