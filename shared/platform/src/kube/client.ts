/**
 * Kubernetes clients for fleetd's two clusters, from kubeconfig files named in the site configuration:
 * the **management** cluster (Tinkerbell and Rufio objects: Hardware, Template, Workflow, BMC Machine/Job) and
 * the **workload** cluster (the nodes fleetd admits and retires: CSRs, bootstrap tokens, Nodes, evictions).
 * Platform code in `shared` takes a `Kube` and never loads configuration itself.
 */
import * as k8s from "@kubernetes/client-node";

export interface Kube {
  readonly config: k8s.KubeConfig;
  readonly core: k8s.CoreV1Api;
  readonly custom: k8s.CustomObjectsApi;
  readonly certificates: k8s.CertificatesV1Api;
  readonly coordination: k8s.CoordinationV1Api;
  readonly policy: k8s.PolicyV1Api;
  readonly admission: k8s.AdmissionregistrationV1Api;
  readonly rbac: k8s.RbacAuthorizationV1Api;
  /** The identity requests are made as (from the kubeconfig's current context), for logs and journal entries. */
  readonly user: string;
}

export function kubeFromConfig(config: k8s.KubeConfig): Kube {
  return {
    config,
    core: config.makeApiClient(k8s.CoreV1Api),
    custom: config.makeApiClient(k8s.CustomObjectsApi),
    certificates: config.makeApiClient(k8s.CertificatesV1Api),
    coordination: config.makeApiClient(k8s.CoordinationV1Api),
    policy: config.makeApiClient(k8s.PolicyV1Api),
    admission: config.makeApiClient(k8s.AdmissionregistrationV1Api),
    rbac: config.makeApiClient(k8s.RbacAuthorizationV1Api),
    user: config.getCurrentUser()?.name ?? "unknown",
  };
}

/** Load a kubeconfig file (its current context). In-cluster configuration when `path` is "in-cluster". */
export function loadKube(path: string): Kube {
  const config = new k8s.KubeConfig();
  if (path === "in-cluster") config.loadFromCluster();
  else config.loadFromFile(path);
  return kubeFromConfig(config);
}

/** The HTTP status of a client-node error (ApiException.code), or undefined for other errors. */
export function kubeStatus(e: unknown): number | undefined {
  if (e instanceof k8s.ApiException) return e.code;
  if (typeof e === "object" && e !== null && "code" in e && typeof (e as { code: unknown }).code === "number") return (e as { code: number }).code;
  return undefined;
}

export const isNotFound = (e: unknown): boolean => kubeStatus(e) === 404;
export const isConflict = (e: unknown): boolean => kubeStatus(e) === 409;
export const isAlreadyExists = isConflict;
