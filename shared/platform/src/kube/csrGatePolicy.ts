/**
 * What makes fleetd's CSR gate the only way a kubelet bootstrap CSR is approved in the workload cluster, and
 * the rights the gate needs there, as Kubernetes objects rendered for fleetd's service account:
 *
 * - a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA since Kubernetes 1.30, no API server flag)
 *   on UPDATE of `certificatesigningrequests/approval`: a `kubernetes.io/kube-apiserver-client-kubelet` CSR may
 *   carry an Approved condition only when fleetd's service account writes it, whoever requested it — a
 *   bootstrap token, or any other identity allowed to create `certificatesigningrequests/nodeclient` (kube-
 *   controller-manager's own approver would approve a `system:node:<any>` CSR of theirs). kcm's approver
 *   (which Talos's `system:bootstrappers:nodes` → `…:nodeclient` binding would let approve any such CSR, and
 *   Talos re-creates that binding) is refused, as is any other identity with approve rights. Denials and other
 *   signers pass, and so do renewals by the node itself: a requester that is a node (`system:node:*` in group
 *   `system:nodes`). CEL cannot read the request's subject, so "the node itself" (`system:node:<CN>`) is
 *   checked by kcm: its approver auto-approves a node's request under `selfnodeclient` only when the CN equals
 *   the requester; for any other CN it needs `nodeclient`, which nodes do not hold (never grant it to
 *   `system:nodes`). Admission applies to every user, system:masters included; only removing the policy lifts it.
 * - its Binding (validationActions: [Deny]);
 * - RBAC: a ClusterRole to read CSRs, write their approval and approve for the kubelet client signer; a Role
 *   in kube-system for the token Secrets. RBAC cannot narrow Secrets by label: fleetd only ever deletes
 *   Secrets labelled fleetd's (bootstrapToken.ts), but the Role's get/list cover kube-system's Secrets.
 *
 * `fleetd kube setup` applies them (create, or replace when present); talos-config-server/manifests/ holds the
 * same objects for the default account `fleetd/talos-config-server` (a test keeps the two equal).
 */
import type * as k8s from "@kubernetes/client-node";
import { isNotFound, type Kube } from "./client.js";
import { KUBELET_CLIENT_SIGNER } from "./csrGate.js";
import { TOKEN_NAMESPACE } from "./bootstrapToken.js";

export interface GateAccount {
  namespace: string;
  name: string;
}
export const DEFAULT_GATE_ACCOUNT: GateAccount = { namespace: "fleetd", name: "talos-config-server" };
export const POLICY_NAME = "fleetd-kubelet-bootstrap-csr-approval";
export const GATE_ROLE = "fleetd-csr-gate";
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

export const serviceAccountUser = (a: GateAccount): string => `system:serviceaccount:${a.namespace}:${a.name}`;

function checkAccount(a: GateAccount): void {
  if (!DNS_LABEL.test(a.namespace) || a.namespace.length > 63) throw new Error(`service account namespace ${JSON.stringify(a.namespace)} is not a namespace name`);
  if (!SUBDOMAIN.test(a.name) || a.name.length > 253) throw new Error(`service account name ${JSON.stringify(a.name)} is not a service account name`);
}

const labels = { "app.kubernetes.io/managed-by": "fleetd", "app.kubernetes.io/component": "csr-gate" };

export function approvalPolicy(account: GateAccount): k8s.V1ValidatingAdmissionPolicy {
  checkAccount(account);
  const user = serviceAccountUser(account); // checked above: no quote can reach the CEL string
  return {
    apiVersion: "admissionregistration.k8s.io/v1",
    kind: "ValidatingAdmissionPolicy",
    metadata: { name: POLICY_NAME, labels },
    spec: {
      failurePolicy: "Fail",
      matchConstraints: {
        resourceRules: [{ apiGroups: ["certificates.k8s.io"], apiVersions: ["*"], operations: ["UPDATE"], resources: ["certificatesigningrequests/approval"] }],
      },
      matchConditions: [
        {
          // Every kubelet client CSR but a node's own renewal (requester system:node:* in system:nodes).
          name: "kubelet-client-csr-not-by-a-node",
          expression: `object.spec.signerName == '${KUBELET_CLIENT_SIGNER}' && !(has(object.spec.username) && object.spec.username.startsWith('system:node:') && has(object.spec.groups) && 'system:nodes' in object.spec.groups)`,
        },
      ],
      validations: [
        {
          expression: `!(has(object.status) && has(object.status.conditions) && object.status.conditions.exists(c, c.type == 'Approved' && c.status == 'True')) || request.userInfo.username == '${user}'`,
          messageExpression: `'fleetd: kubelet client CSRs not requested by the node itself are approved only by the fleetd CSR gate (${user}); ' + request.userInfo.username + ' may not approve ' + object.metadata.name`,
          reason: "Forbidden",
        },
      ],
    },
  };
}

export function approvalPolicyBinding(): k8s.V1ValidatingAdmissionPolicyBinding {
  return {
    apiVersion: "admissionregistration.k8s.io/v1",
    kind: "ValidatingAdmissionPolicyBinding",
    metadata: { name: POLICY_NAME, labels },
    spec: { policyName: POLICY_NAME, validationActions: ["Deny"] },
  };
}

export function gateClusterRole(): k8s.V1ClusterRole {
  return {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "ClusterRole",
    metadata: { name: GATE_ROLE, labels },
    rules: [
      { apiGroups: ["certificates.k8s.io"], resources: ["certificatesigningrequests"], verbs: ["get", "list", "watch"] },
      { apiGroups: ["certificates.k8s.io"], resources: ["certificatesigningrequests/approval"], verbs: ["update"] },
      { apiGroups: ["certificates.k8s.io"], resources: ["signers"], resourceNames: [KUBELET_CLIENT_SIGNER], verbs: ["approve"] },
      // a quarantined worker's cordon (kube/quarantine.ts): read the Node, replace it with fleetd's taint,
      // spec.unschedulable and label (and take back only those)
      { apiGroups: [""], resources: ["nodes"], verbs: ["get", "update"] },
    ],
  };
}

export function gateClusterRoleBinding(account: GateAccount): k8s.V1ClusterRoleBinding {
  checkAccount(account);
  return {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "ClusterRoleBinding",
    metadata: { name: GATE_ROLE, labels },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: GATE_ROLE },
    subjects: [{ kind: "ServiceAccount", namespace: account.namespace, name: account.name }],
  };
}

export function gateTokenRole(): k8s.V1Role {
  return {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "Role",
    metadata: { name: GATE_ROLE, namespace: TOKEN_NAMESPACE, labels },
    rules: [{ apiGroups: [""], resources: ["secrets"], verbs: ["create", "get", "list", "delete"] }],
  };
}

export function gateTokenRoleBinding(account: GateAccount): k8s.V1RoleBinding {
  checkAccount(account);
  return {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "RoleBinding",
    metadata: { name: GATE_ROLE, namespace: TOKEN_NAMESPACE, labels },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: GATE_ROLE },
    subjects: [{ kind: "ServiceAccount", namespace: account.namespace, name: account.name }],
  };
}

/** Every object, in apply order (RBAC first, then the policy, then its binding). */
export function csrGateObjects(account: GateAccount = DEFAULT_GATE_ACCOUNT): k8s.KubernetesObject[] {
  return [gateClusterRole(), gateClusterRoleBinding(account), gateTokenRole(), gateTokenRoleBinding(account), approvalPolicy(account), approvalPolicyBinding()];
}

type Outcome = "created" | "replaced";

/** Create each object, or replace it (keeping its resourceVersion) when it exists. Idempotent. */
export async function applyCsrGateObjects(kube: Kube, account: GateAccount = DEFAULT_GATE_ACCOUNT): Promise<{ kind: string; name: string; outcome: Outcome }[]> {
  const out: { kind: string; name: string; outcome: Outcome }[] = [];
  const upsert = async <T extends k8s.KubernetesObject>(obj: T, read: () => Promise<T>, create: () => Promise<unknown>, replace: (body: T) => Promise<unknown>) => {
    let existing: T | undefined;
    try {
      existing = await read();
    } catch (e) {
      if (!isNotFound(e)) throw e;
    }
    if (existing) await replace({ ...obj, metadata: { ...obj.metadata, resourceVersion: existing.metadata?.resourceVersion } });
    else await create();
    out.push({ kind: obj.kind ?? "", name: obj.metadata?.name ?? "", outcome: existing ? "replaced" : "created" });
  };
  const cr = gateClusterRole();
  await upsert(cr, () => kube.rbac.readClusterRole({ name: GATE_ROLE }), () => kube.rbac.createClusterRole({ body: cr }), (body) => kube.rbac.replaceClusterRole({ name: GATE_ROLE, body }));
  const crb = gateClusterRoleBinding(account);
  await upsert(crb, () => kube.rbac.readClusterRoleBinding({ name: GATE_ROLE }), () => kube.rbac.createClusterRoleBinding({ body: crb }), (body) => kube.rbac.replaceClusterRoleBinding({ name: GATE_ROLE, body }));
  const r = gateTokenRole();
  const ns = TOKEN_NAMESPACE;
  await upsert(r, () => kube.rbac.readNamespacedRole({ name: GATE_ROLE, namespace: ns }), () => kube.rbac.createNamespacedRole({ namespace: ns, body: r }), (body) => kube.rbac.replaceNamespacedRole({ name: GATE_ROLE, namespace: ns, body }));
  const rb = gateTokenRoleBinding(account);
  await upsert(rb, () => kube.rbac.readNamespacedRoleBinding({ name: GATE_ROLE, namespace: ns }), () => kube.rbac.createNamespacedRoleBinding({ namespace: ns, body: rb }), (body) => kube.rbac.replaceNamespacedRoleBinding({ name: GATE_ROLE, namespace: ns, body }));
  const p = approvalPolicy(account);
  await upsert(p, () => kube.admission.readValidatingAdmissionPolicy({ name: POLICY_NAME }), () => kube.admission.createValidatingAdmissionPolicy({ body: p }), (body) => kube.admission.replaceValidatingAdmissionPolicy({ name: POLICY_NAME, body }));
  const b = approvalPolicyBinding();
  await upsert(b, () => kube.admission.readValidatingAdmissionPolicyBinding({ name: POLICY_NAME }), () => kube.admission.createValidatingAdmissionPolicyBinding({ body: b }), (body) => kube.admission.replaceValidatingAdmissionPolicyBinding({ name: POLICY_NAME, body }));
  return out;
}
