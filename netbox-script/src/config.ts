/** netbox-script's configuration: fleetd's site configuration plus the `handler` section, zod-validated. */
import { z } from "zod";
import { ListenerLimits } from "@fleetd/platform/http";
import { ConfigError, loadSiteConfig, type SiteConfig } from "@fleetd/platform/fleet";
import { applyHaEnv, LEASE_TIMING, LeaderElectionFields, LeaseName, leaseTimingOk } from "@fleetd/platform/kube";
import { DocumentLocation } from "@fleetd/platform/spire";

const Slug = z.string().regex(/^[-a-z0-9_]+$/);

/**
 * SPIRE's node list (`spire-nodes.json`, shared/platform/src/spire/nodeList.ts), published on every relevant
 * device webhook and every reconcile pass, and read back by retirement's `spire` step together with spire-plugin's
 * status. Absent: no list is published and retirement's spire step reports SPIRE as not configured.
 */
export const SpireNodesSection = z.strictObject({
  /** The SPIRE trust domain (`spiffe://<td>/node/<name>`). */
  trustDomain: z.string().regex(/^[a-z0-9._-]{1,255}$/),
  /** fleetd's CA bundle (PEM): its roots are the entries' `tpm_devid:ca:fingerprint` selectors. */
  caBundle: z.string().min(1),
  /** Where the list is written (a file, or a ConfigMap key). */
  list: DocumentLocation,
  /** Where spire-plugin writes its status (retirement waits on it). */
  status: DocumentLocation,
  /** NetBox device-role slugs (the control-plane one decides keepFailedControlPlanes). */
  roleSlugs: z.strictObject({ worker: Slug.default("fleetd-worker"), "control-plane": Slug.default("fleetd-control-plane") }).prefault({}),
  /** How long retirement's spire step waits between looks at spire-plugin's status. */
  confirmPollMs: z.number().int().min(100).max(60_000).default(1000),
});
export type SpireNodesSection = z.infer<typeof SpireNodesSection>;

export const HandlerSection = z.strictObject({
  listen: z
    .strictObject({
      host: z.string().default("127.0.0.1"),
      port: z.number().int().min(0).max(65535).default(8470),
      /** Connection caps (in all, per source address) and timeouts (shared/platform/src/http/listenerLimits.ts). */
      limits: ListenerLimits.prefault({}),
    })
    .prefault({}),
  /**
   * The queue, delivery ids and recorded intents (`store/handler.db`, SQLite, in a 0700 directory) when there
   * is no `ha` section (under `ha` they are Secrets in `ha.namespace`), and `handled.log`. A file queue of an
   * older netbox-script found here (`queue/`, `intents.jsonl`) is imported at start (README).
   */
  stateDir: z.string().min(1),
  /** A job claimed longer ago than this is taken over (the replica or process that claimed it died). */
  claimStaleSeconds: z.number().int().min(10).max(86_400).default(600),
  /** The nodes file (TPM family, role): the handler reads it at start. */
  nodesFile: z.string().min(1),
  /** How often the reconcile loop looks for requests a lost webhook missed. */
  reconcileIntervalSeconds: z.number().int().min(1).max(86_400).default(60),
  /** Larger webhook bodies are refused (413) before reading further. */
  maxBodyBytes: z.number().int().min(1024).max(10 * 1024 * 1024).default(256 * 1024),
  /** A job that keeps failing (NetBox down, ...) is retried this many times, then parked (kept for an operator). */
  maxAttempts: z.number().int().min(1).max(1000).default(20),
  /**
   * High availability (optional): several replicas, one leader (Lease `lease` in `namespace`) runs the worker
   * and the reconcile loop; every replica accepts webhooks into the one queue they share, held in Kubernetes
   * (Secrets in `namespace`: kubeHandlerStore.ts), so whichever replica leads runs every hint.
   */
  ha: z.strictObject({ ...LeaderElectionFields, lease: LeaseName.default("fleetd-netbox-script") }).refine(leaseTimingOk, LEASE_TIMING)
    .optional(),
  spireNodes: SpireNodesSection.optional(),
});
export type HandlerSection = z.infer<typeof HandlerSection>;

export interface HandlerConfig {
  site: SiteConfig & { webhook: NonNullable<SiteConfig["webhook"]> };
  handler: HandlerSection;
}

/** `env`: FLEETD_HA_IDENTITY over `handler.ha.identity` (the pod name, when every replica reads one file). */
export function toHandlerConfig(site: SiteConfig, env: NodeJS.ProcessEnv = {}): HandlerConfig {
  if (!site.webhook) throw new ConfigError("netbox-script needs the webhook section (secret, url)");
  const raw = (site.handler ?? {}) as Record<string, unknown>;
  const h = HandlerSection.safeParse(raw["ha"] === undefined ? raw : { ...raw, ha: applyHaEnv(raw["ha"], env) });
  if (!h.success) throw new ConfigError(`invalid handler configuration: ${h.error.issues.map((i) => `handler.${i.path.join(".")}: ${i.message}`).join("; ")}`);
  return { site: { ...site, webhook: site.webhook }, handler: h.data };
}

export function loadHandlerConfig(path: string | undefined, env: NodeJS.ProcessEnv = process.env): HandlerConfig {
  return toHandlerConfig(loadSiteConfig(path, env), env);
}

/**
 * The site's `spire.keepFailedControlPlanes` (default true): a control plane whose runtime verdict failed keeps
 * its SPIRE entry if it passed once.
 */
export function keepFailedControlPlanesOf(site: SiteConfig): boolean {
  return site.spire.keepFailedControlPlanes;
}
