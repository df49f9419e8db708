/**
 * The world's kube-apiserver as the lab machines' workload cluster, set up as a site sets up Talos's cluster for
 * fleetd (talos-config-server README, "Bootstrap tokens and the kubelet bootstrap CSR gate"):
 *  - `fleetd kube setup` (the CSR gate's RBAC and the approval admission policy) for talos-config-server's
 *    ServiceAccount in the `fleetd` namespace;
 *  - Talos's bootstrap RBAC binding that lets bootstrap tokens (system:bootstrappers:nodes) create CSRs, and its
 *    renewal binding. Not its auto-approve binding for bootstrap CSRs: with it kube-controller-manager's approver
 *    approves too, and fleetd's admission policy refuses that only once the API server has loaded the policy
 *    (asynchronously: a CSR right after `kube setup` was AutoApproved here). kube/csrGate.it.test.ts pins the
 *    refusal with the binding in place; here every approval can only be the gate's;
 *  - fleetd's CSR gate (talos-config-server's loop) as that ServiceAccount, over the world's state store (the
 *    tokens the provision rendered) and journalling to NetBox;
 * The world is started with `workloadCluster` for this (bootstrap tokens are then Secrets in this cluster, its
 * serving certificate names the boot network's address, and the configs name that address as the endpoint; the
 * test exposes the API server there with `exposeTcp`: a TCP relay, TLS end to end).
 */
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import * as k8s from "@kubernetes/client-node";
import pino from "pino";
import { kubeFromConfig, type Kube } from "@fleetd/platform/kube";
import { startCsrGate, type CsrGate } from "@fleetd/talos-config-server/csrGate";
import type { World } from "../attestation/world.js";
import type { ControlPlane } from "../harness/kube.js";

const CLI = fileURLToPath(new URL("../../../shared/cli/dist/main.js", import.meta.url));
export const GATE_NAMESPACE = "fleetd";
export const GATE_ACCOUNT = "talos-config-server";

export interface WorkloadCluster {
  gate: CsrGate;
  /** The cluster as its admin. */
  admin: Kube;
  stop(): Promise<void>;
}

function crb(name: string, role: string, groups: string[]): k8s.V1ClusterRoleBinding {
  return {
    metadata: { name },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: role },
    subjects: groups.map((g) => ({ apiGroup: "rbac.authorization.k8s.io", kind: "Group", name: g })),
  };
}

/** What the gate needs of a world: its cluster (as admin), the attestation state store, the NetBox journal. */
export type WorkloadParts = Pick<World, "kube" | "store" | "inventory"> & { cp: Pick<ControlPlane, "kubeconfig" | "server" | "caPem"> };

/** Sets up the world's cluster as the workload cluster and starts fleetd's CSR gate on it. */
export async function startWorkloadCluster(w: WorkloadParts): Promise<WorkloadCluster> {
  const admin = w.kube;
  await admin.core.createNamespace({ body: { metadata: { name: GATE_NAMESPACE } } });
  await admin.core.createNamespacedServiceAccount({ namespace: GATE_NAMESPACE, body: { metadata: { name: GATE_ACCOUNT } } });
  const r = spawnSync(process.execPath, [CLI, "kube", "setup", "--kubeconfig", w.cp.kubeconfig], { encoding: "utf8", timeout: 60_000 });
  if (r.status !== 0) throw new Error(`fleetd kube setup: ${r.stderr}`);
  // Talos's bindings (its control plane's bootstrap manifests).
  await admin.rbac.createClusterRoleBinding({ body: crb("system-bootstrap-node-bootstrapper", "system:node-bootstrapper", ["system:bootstrappers:nodes", "system:nodes"]) });
  await admin.rbac.createClusterRoleBinding({ body: crb("system-bootstrap-node-renewal", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", ["system:nodes"]) });

  // The gate's identity: the ServiceAccount, by a TokenRequest.
  const tr = await admin.core.createNamespacedServiceAccountToken({ namespace: GATE_NAMESPACE, name: GATE_ACCOUNT, body: { spec: { audiences: [], expirationSeconds: 3600 } } });
  const kc = new k8s.KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "workload", server: w.cp.server, caData: Buffer.from(w.cp.caPem).toString("base64") }],
    users: [{ name: "gate", token: tr.status?.token ?? "" }],
    contexts: [{ name: "gate", cluster: "workload", user: "gate" }],
    currentContext: "gate",
  });
  const gate = startCsrGate({ kube: kubeFromConfig(kc), store: w.store, journal: w.inventory, log: pino({ level: process.env["FLEETD_LOG_LEVEL"] ?? "silent" }), intervalMs: 10_000 });
  return { gate, admin, stop: () => gate.stop() };
}
