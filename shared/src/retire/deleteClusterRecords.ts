/**
 * Step `delete-cluster-records`: delete what fleetd left in the workload cluster for this node — its
 * bootstrap token Secrets in kube-system (label `fleetd.io/node=<node>`, or a fleetd token whose description
 * names the node) and its CertificateSigningRequests (spec.username `system:node:<node>`, or a request whose
 * subject CN is `system:node:<node>`, as the kubelet's bootstrap CSR is). Idempotent (404 is success).
 */
import type * as k8s from "@kubernetes/client-node";
import { isNotFound, type Kube } from "../kube/client.js";
import { csrCommonNames } from "./csrSubject.js";
import type { Step } from "./types.js";

export const TOKEN_NAMESPACE = "kube-system";
export const NODE_LABEL = "fleetd.io/node";

const b64 = (v: string | undefined) => (v === undefined ? "" : Buffer.from(v, "base64").toString("utf8"));

/** Bootstrap token Secrets fleetd made for the node. */
export async function tokenSecretsOf(kube: Kube, node: string): Promise<string[]> {
  const labelled = await kube.core.listNamespacedSecret({ namespace: TOKEN_NAMESPACE, labelSelector: `${NODE_LABEL}=${node}` });
  const tokens = await kube.core.listNamespacedSecret({ namespace: TOKEN_NAMESPACE, fieldSelector: "type=bootstrap.kubernetes.io/token" });
  const word = new RegExp(`(^|[^a-z0-9.-])${node.replace(/[.]/g, "\\.")}($|[^a-z0-9.-])`);
  const described = tokens.items.filter((s: k8s.V1Secret) => {
    const d = b64(s.data?.["description"]);
    return /fleetd/i.test(d) && word.test(d);
  });
  return [...new Set([...labelled.items, ...described].map((s) => s.metadata?.name ?? "").filter((n) => n !== ""))].sort();
}

/** CSRs of the node: made by it (username system:node:<node>) or asking for its identity (CN system:node:<node>). */
export async function csrsOf(kube: Kube, node: string): Promise<string[]> {
  const want = `system:node:${node}`;
  const l = await kube.certificates.listCertificateSigningRequest();
  return l.items.filter((c) => {
    if (c.spec.username === want) return true;
    try {
      return csrCommonNames(Buffer.from(c.spec.request, "base64").toString("latin1")).includes(want);
    } catch {
      return false; // an unreadable request names no node
    }
  }).map((c) => c.metadata?.name ?? "").filter((n) => n !== "").sort();
}

export const deleteClusterRecordsStep: Step = {
  name: "delete-cluster-records",
  summary: "delete the node's bootstrap token Secrets (kube-system) and CertificateSigningRequests",
  async run({ node, deps }) {
    const kube = deps.workload;
    const secrets = await tokenSecretsOf(kube, node);
    const csrs = await csrsOf(kube, node);
    for (const name of secrets) {
      try {
        await kube.core.deleteNamespacedSecret({ name, namespace: TOKEN_NAMESPACE });
      } catch (e) {
        if (!isNotFound(e)) throw e;
      }
    }
    for (const name of csrs) {
      try {
        await kube.certificates.deleteCertificateSigningRequest({ name });
      } catch (e) {
        if (!isNotFound(e)) throw e;
      }
    }
    return {
      done: true,
      detail: `deleted ${secrets.length} bootstrap token Secret(s) in ${TOKEN_NAMESPACE}${secrets.length ? ` (${secrets.join(", ")})` : ""} and ${csrs.length} CSR(s)${csrs.length ? ` (${csrs.join(", ")})` : ""}`,
    };
  },
};
