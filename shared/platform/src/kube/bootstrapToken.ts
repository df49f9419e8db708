/**
 * Per-node kubelet bootstrap tokens in the workload cluster: the Secret `kube-system/bootstrap-token-<id>`
 * (type `bootstrap.kubernetes.io/token`) that makes `<id>.<secret>` authenticate as `system:bootstrap:<id>`
 * (research/talos.md §5). fleetd's tokens:
 * - expire (`expiration`, RFC 3339 = the rendered token's expiry; the API server refuses expired tokens and the
 *   tokencleaner controller, when on, deletes them);
 * - authenticate only (`usage-bootstrap-authentication: "true"`; no `usage-bootstrap-signing`);
 * - carry `auth-extra-groups: system:bootstrappers:nodes`, the group Talos binds to `system:node-bootstrapper`
 *   (the right to create CSRs);
 * - are labelled `fleetd.io/owner: fleetd` (../fleet/ownership.ts) and annotated with the node they were rendered for.
 *
 * The token secret never appears in a log line or an error message: errors carry the token id and the API's
 * status only.
 */
import { type MaybeOutage, Unavailable } from "../outage/outage.js";
import type * as k8s from "@kubernetes/client-node";
import type { BootstrapTokens } from "../fleet/ports.js";
import { isNotFound, kubeStatus, type Kube } from "./client.js";
import { OWNER_LABEL } from "../fleet/ownership.js";

export const TOKEN_NAMESPACE = "kube-system";
export const TOKEN_SECRET_TYPE = "bootstrap.kubernetes.io/token";
export const MANAGED_BY_LABEL = OWNER_LABEL;
export const MANAGED_BY = "fleetd";
export const NODE_LABEL = "fleetd.io/node";
export const NODE_ANNOTATION = "fleetd.io/node";
/** Talos binds `system:node-bootstrapper` (create CSRs) to this group. */
export const BOOTSTRAPPERS_GROUP = "system:bootstrappers:nodes";
export const FLEETD_TOKENS_SELECTOR = `${MANAGED_BY_LABEL}=${MANAGED_BY}`;

const TOKEN_ID = /^[a-z0-9]{6}$/;
const TOKEN_SECRET = /^[a-z0-9]{16}$/;
const LABEL_VALUE = /^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$/;

export const tokenSecretName = (tokenId: string): string => `bootstrap-token-${tokenId}`;

export class BootstrapTokenError extends Error implements MaybeOutage {
  override readonly name = "BootstrapTokenError";
  constructor(
    readonly code: "invalid-token" | "exists" | "api",
    message: string,
    readonly status?: number,
  ) {
    super(message);
  }

  /** The API server did not answer, or answered 5xx: an outage (a 403 is not one: it stays a failure). */
  outage(): Unavailable | undefined {
    if (this.code === "api" && (this.status === undefined || this.status >= 500)) return new Unavailable("kubernetes-unavailable", this.message);
    return undefined;
  }
}

/** RFC 3339 in UTC, whole seconds (what kubeadm writes). */
export function rfc3339(d: Date): string {
  return d.toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** The Secret for a token (pure; the secret is in `stringData`). */
export function bootstrapTokenSecret(node: string, token: { id: string; secret: string }, expiresAt: Date): k8s.V1Secret {
  if (!TOKEN_ID.test(token.id) || !TOKEN_SECRET.test(token.secret)) throw new BootstrapTokenError("invalid-token", `bootstrap token ${token.id}: not of the form [a-z0-9]{6}.[a-z0-9]{16}`);
  return {
    apiVersion: "v1",
    kind: "Secret",
    metadata: {
      name: tokenSecretName(token.id),
      namespace: TOKEN_NAMESPACE,
      labels: { [MANAGED_BY_LABEL]: MANAGED_BY, ...(LABEL_VALUE.test(node) ? { [NODE_LABEL]: node } : {}) },
      annotations: { [NODE_ANNOTATION]: node },
    },
    type: TOKEN_SECRET_TYPE,
    stringData: {
      description: `fleetd: single-use kubelet bootstrap token for node ${node}`,
      "token-id": token.id,
      "token-secret": token.secret,
      expiration: rfc3339(expiresAt),
      "usage-bootstrap-authentication": "true",
      "auth-extra-groups": BOOTSTRAPPERS_GROUP,
    },
  };
}

export interface FleetdToken {
  tokenId: string;
  /** The node it was rendered for: the `fleetd.io/node` annotation, exactly as fleetd wrote it. */
  node: string;
  /** The Secret's UID as listed: deletes carry it as a precondition. */
  uid?: string;
  expiresAt?: Date;
}

function apiError(what: string, e: unknown): BootstrapTokenError {
  const status = kubeStatus(e);
  // never the error's body: it could echo the request
  return new BootstrapTokenError("api", `${what}: ${status !== undefined ? `API status ${status}` : (e as Error).name || "request failed"}`, status);
}

/** fleetd's bootstrap tokens in a cluster (the workload cluster's kube-system). */
export class KubeBootstrapTokens implements BootstrapTokens {
  constructor(private readonly kube: Kube) {}

  /** Create the token's Secret; an existing Secret of that name is an error (token ids are random, never reused). */
  async create(node: string, token: { id: string; secret: string }, expiresAt: Date): Promise<void> {
    const body = bootstrapTokenSecret(node, token, expiresAt);
    try {
      await this.kube.core.createNamespacedSecret({ namespace: TOKEN_NAMESPACE, body });
    } catch (e) {
      if (kubeStatus(e) === 409) throw new BootstrapTokenError("exists", `bootstrap token ${token.id} for node ${node}: Secret ${TOKEN_NAMESPACE}/${tokenSecretName(token.id)} already exists`, 409);
      throw apiError(`creating bootstrap token ${token.id} for node ${node}`, e);
    }
  }

  /**
   * Delete a token's Secret if it is fleetd's (and, with `expect`, still the object that was selected: that UID,
   * that node annotation); true when something was deleted. Idempotent.
   */
  async delete(tokenId: string, expect?: { uid?: string; node?: string }): Promise<boolean> {
    if (!TOKEN_ID.test(tokenId)) throw new BootstrapTokenError("invalid-token", `bootstrap token id ${JSON.stringify(tokenId)} is not [a-z0-9]{6}`);
    const name = tokenSecretName(tokenId);
    let existing: k8s.V1Secret;
    try {
      existing = await this.kube.core.readNamespacedSecret({ name, namespace: TOKEN_NAMESPACE });
    } catch (e) {
      if (isNotFound(e)) return false;
      throw apiError(`reading bootstrap token ${tokenId}`, e);
    }
    // touch only what fleetd owns
    if (existing.metadata?.labels?.[MANAGED_BY_LABEL] !== MANAGED_BY) return false;
    if (expect?.uid !== undefined && existing.metadata?.uid !== expect.uid) return false; // another object of that name now
    if (expect?.node !== undefined && existing.metadata?.annotations?.[NODE_ANNOTATION] !== expect.node) return false;
    try {
      await this.kube.core.deleteNamespacedSecret({ name, namespace: TOKEN_NAMESPACE, body: { preconditions: { uid: existing.metadata?.uid } } });
      return true;
    } catch (e) {
      // 404: gone meanwhile; 409: the UID precondition failed (another object of that name now)
      if (isNotFound(e) || kubeStatus(e) === 409) return false;
      throw apiError(`deleting bootstrap token ${tokenId}`, e);
    }
  }

  /** fleetd's tokens (by label), with the node and expiry they carry; never the secret. */
  async list(): Promise<FleetdToken[]> {
    let list: k8s.V1SecretList;
    try {
      list = await this.kube.core.listNamespacedSecret({ namespace: TOKEN_NAMESPACE, labelSelector: FLEETD_TOKENS_SELECTOR });
    } catch (e) {
      throw apiError("listing fleetd's bootstrap tokens", e);
    }
    const out: FleetdToken[] = [];
    for (const s of list.items) {
      if (s.type !== TOKEN_SECRET_TYPE) continue;
      const id = Buffer.from(s.data?.["token-id"] ?? "", "base64").toString();
      if (!TOKEN_ID.test(id) || s.metadata?.name !== tokenSecretName(id)) continue;
      const exp = Buffer.from(s.data?.["expiration"] ?? "", "base64").toString();
      const expiresAt = exp ? new Date(exp) : undefined;
      out.push({ tokenId: id, node: s.metadata?.annotations?.[NODE_ANNOTATION] ?? "", ...(s.metadata?.uid ? { uid: s.metadata.uid } : {}), ...(expiresAt && !Number.isNaN(expiresAt.getTime()) ? { expiresAt } : {}) });
    }
    return out;
  }

  /**
   * fleetd's tokens rendered for `node`: fleetd's label, and the node annotation equal to `node` — compared
   * exactly, never searched for in the description (retiring a node named `node`, `token` or `fleetd` must not
   * select every token).
   */
  async ofNode(node: string): Promise<FleetdToken[]> {
    return (await this.list()).filter((t) => t.node === node);
  }
}
