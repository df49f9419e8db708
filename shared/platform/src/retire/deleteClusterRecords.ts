/**
 * Step `delete-cluster-records`: delete what fleetd left in the workload cluster for this node — its
 * bootstrap token Secrets in kube-system and its CertificateSigningRequests. Every object is selected by an
 * exact comparison and deleted with a UID precondition (the object selected, never a newer one of that name):
 *  - tokens: fleetd's label (`fleetd.io/owner: fleetd`) and the `fleetd.io/node` annotation equal to
 *    the node (kube/bootstrapToken.ts). Never by the description's words: fleetd writes "…single-use kubelet
 *    bootstrap token for node <n>", so a node named `node`, `token`, `for` or `fleetd` would select them all;
 *  - CSRs: spec.username `system:node:<node>`, or a request whose subject CN is exactly `system:node:<node>`, as
 *    the kubelet's bootstrap CSR is.
 * Idempotent (404 is success; a failed UID precondition means the object was replaced: it is left alone).
 */
import { KubeBootstrapTokens, TOKEN_NAMESPACE } from "../kube/bootstrapToken.js";
import { isNotFound, kubeStatus, type Kube } from "../kube/client.js";
import { csrCommonNames } from "./csrSubject.js";
import type { Step } from "./types.js";

export interface Selected {
  name: string;
  uid: string | undefined;
}

/** Bootstrap token Secrets fleetd made for the node (label and annotation compared exactly). */
export async function tokenSecretsOf(kube: Kube, node: string): Promise<(Selected & { tokenId: string })[]> {
  const tokens = await new KubeBootstrapTokens(kube).ofNode(node);
  return tokens.map((t) => ({ name: `bootstrap-token-${t.tokenId}`, uid: t.uid, tokenId: t.tokenId })).sort((a, b) => a.name.localeCompare(b.name));
}

/** CSRs of the node: made by it (username system:node:<node>) or asking for its identity (CN system:node:<node>). */
export async function csrsOf(kube: Kube, node: string): Promise<Selected[]> {
  const want = `system:node:${node}`;
  const l = await kube.certificates.listCertificateSigningRequest();
  return l.items
    .filter((c) => {
      if (c.spec.username === want) return true;
      try {
        return csrCommonNames(Buffer.from(c.spec.request, "base64").toString("latin1")).includes(want);
      } catch {
        return false; // an unreadable request names no node
      }
    })
    .map((c) => ({ name: c.metadata?.name ?? "", uid: c.metadata?.uid }))
    .filter((c) => c.name !== "")
    .sort((a, b) => a.name.localeCompare(b.name));
}

/** 404 (gone) and 409 (the UID precondition failed: another object of that name now) leave nothing to do. */
const gone = (e: unknown): boolean => isNotFound(e) || kubeStatus(e) === 409;

export const deleteClusterRecordsStep: Step = {
  name: "delete-cluster-records",
  summary: "delete the node's bootstrap token Secrets (kube-system) and CertificateSigningRequests",
  async run({ node, deps }) {
    const kube = deps.workload;
    const tokens = new KubeBootstrapTokens(kube);
    const secrets = await tokenSecretsOf(kube, node);
    const csrs = await csrsOf(kube, node);
    const deletedSecrets: string[] = [];
    for (const s of secrets) {
      if (await tokens.delete(s.tokenId, { ...(s.uid ? { uid: s.uid } : {}), node })) deletedSecrets.push(s.name);
    }
    const deletedCsrs: string[] = [];
    for (const c of csrs) {
      try {
        await kube.certificates.deleteCertificateSigningRequest({ name: c.name, ...(c.uid ? { body: { preconditions: { uid: c.uid } } } : {}) });
        deletedCsrs.push(c.name);
      } catch (e) {
        if (!gone(e)) throw e;
      }
    }
    return {
      done: true,
      detail: `deleted ${deletedSecrets.length} bootstrap token Secret(s) in ${TOKEN_NAMESPACE}${deletedSecrets.length ? ` (${deletedSecrets.join(", ")})` : ""} and ${deletedCsrs.length} CSR(s)${deletedCsrs.length ? ` (${deletedCsrs.join(", ")})` : ""}`,
    };
  },
};
