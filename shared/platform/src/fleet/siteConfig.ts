/**
 * fleetd's site configuration (SiteConfig: NetBox and its accounts, the webhook, Kubernetes, Tinkerbell, and the
 * handler's and server's own sections), read by the CLI, netbox-script and talos-config-server: a YAML/JSON file
 * (FLEETD_CONFIG or --config) whose values may be overridden by environment variables. Never constants.
 */
import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { TinkerbellSiteConfig } from "./tinkerbellSiteConfig.js";

const Url = z.string().url().refine((u) => /^https?:\/\//.test(u), "must be an http(s) URL");
const Secret = z.string().min(1);

/** Node class → runtime profile, unless the site configuration says otherwise (`runtime.profiles`). */
export const DEFAULT_RUNTIME_PROFILES: Readonly<Record<string, string>> = { talos: "talos", ubuntu: "ubuntu" };

export const SiteConfig = z.strictObject({
  netbox: z.strictObject({
    url: Url,
    /** v2 token `nbt_<key>.<secret>` of the service account that runs the command. */
    token: Secret,
    timeoutMs: z.number().int().positive().max(300_000).default(30_000),
  }),
  accounts: z.strictObject({
    /** The NetBox username of the inventory-apply service account: the only author EK bindings are accepted from. */
    apply: z.string().min(1),
    /** The NetBox username netbox-script writes as; its own changes never trigger work (no loops). */
    handler: z.string().min(1),
    /**
     * The NetBox username talos-config-server writes as (verdicts, the proven boot MAC); default: the handler's.
     * A `boot_mac` counts as proven only when the change log shows this account wrote it.
     */
    attestation: z.string().min(1).optional(),
  }),
  /** NetBox group whose members may request wipe and decommission. */
  authorizedGroup: z.string().min(1),
  webhook: z
    .strictObject({
      /** Shared secret NetBox signs deliveries with (X-Hook-Signature, HMAC-SHA512). At least 32 characters. */
      secret: z.string().min(32),
      /** URL NetBox delivers to (netbox-script's /netbox/events). */
      url: Url,
      /** Bodies whose `timestamp` is older than this are refused. */
      maxAgeSeconds: z.number().int().positive().max(3600).default(300),
    })
    .optional(),
  /** netbox-script's own section (listen address, state directory, ...), validated by netbox-script. */
  handler: z.record(z.string(), z.unknown()).optional(),
  /** talos-config-server's own section (TLS, state DB, CA, ...), validated by talos-config-server. */
  server: z.record(z.string(), z.unknown()).optional(),
  /**
   * The two Kubernetes clusters (kubeconfig paths, or "in-cluster"): `management` runs Tinkerbell and Rufio
   * (Hardware, Template, Workflow, BMC Machine/Job live in `namespace`); `workload` is the cluster whose nodes
   * fleetd admits and retires (CSRs, bootstrap tokens, Nodes, evictions). Both may be the same cluster.
   */
  kubernetes: z
    .strictObject({
      management: z.strictObject({
        kubeconfig: z.string().min(1),
        namespace: z.string().regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, "must be a namespace name").default("tinkerbell"),
        /** fleetd's Templates: images (pinned by digest), the attestation server and its CA (shared/platform/src/tinkerbell). */
        tinkerbell: TinkerbellSiteConfig.optional(),
      }),
      workload: z.strictObject({ kubeconfig: z.string().min(1) }),
    })
    .optional(),
  /**
   * Runtime attestation of installed nodes (talos-config-server/README.md "Renewal"): the policy profile each
   * node class is judged by. A class not listed is refused (no profile, no verdict). Default: talos → talos,
   * ubuntu → ubuntu.
   */
  runtime: z
    .strictObject({
      profiles: z
        .record(z.string().regex(/^[a-z0-9][a-z0-9-]*$/, "must be a node class"), z.string().regex(/^[a-z0-9][a-z0-9-]*$/, "must be a profile name"))
        .default({ ...DEFAULT_RUNTIME_PROFILES }),
    })
    .prefault({}),
  /** SPIRE (the node entry sync, spire-plugin). */
  spire: z
    .strictObject({
      /**
       * A control plane whose runtime verdict failed keeps its SPIRE node entry (default true: a control plane is
       * alerted on, never quarantined — taking its identity away could take the cluster down with it).
       */
      keepFailedControlPlanes: z.boolean().default(true),
    })
    .prefault({}),
  features: z
    .strictObject({
      /**
       * Control-plane installation (off by default): provision is dispatched for control-plane nodes, whose
       * Talos config talos-config-server renders with the cluster's CA keys (its site file's `controlPlane:`).
       */
      controlPlanes: z.boolean().default(false),
    })
    .default({ controlPlanes: false }),
});
export type SiteConfig = z.infer<typeof SiteConfig>;

/** The account whose writes of `boot_mac` (and verdicts) count: accounts.attestation, else the handler's. */
export const attestationAccount = (c: Pick<SiteConfig, "accounts">): string => c.accounts.attestation ?? c.accounts.handler;

export class ConfigError extends Error {
  override readonly name = "ConfigError";
  readonly code = "config-invalid";
}

/**
 * Environment overrides: FLEETD_NETBOX_URL, FLEETD_NETBOX_TOKEN, FLEETD_WEBHOOK_SECRET. The token may also be a
 * file reference, `netbox.tokenFile` (a mounted secret; one trailing newline dropped), read here.
 */
function applyEnv(raw: Record<string, unknown>, env: NodeJS.ProcessEnv): Record<string, unknown> {
  const out = structuredClone(raw);
  const nb = (out["netbox"] ??= {}) as Record<string, unknown>;
  if (env["FLEETD_NETBOX_URL"]) nb["url"] = env["FLEETD_NETBOX_URL"];
  if (typeof nb["tokenFile"] === "string") {
    if (nb["token"] !== undefined) throw new ConfigError("netbox: give token or tokenFile, not both");
    nb["token"] = readSecretFile(nb["tokenFile"], "netbox.tokenFile");
    delete nb["tokenFile"];
  } else if (nb["tokenFile"] !== undefined) {
    throw new ConfigError("netbox.tokenFile: must be a file path");
  }
  if (env["FLEETD_NETBOX_TOKEN"]) nb["token"] = env["FLEETD_NETBOX_TOKEN"];
  if (env["FLEETD_WEBHOOK_SECRET"] && out["webhook"] && typeof out["webhook"] === "object") {
    (out["webhook"] as Record<string, unknown>)["secret"] = env["FLEETD_WEBHOOK_SECRET"];
  }
  return out;
}

/** A secret kept in a file: its text without one trailing newline; errors name the file, never the content. */
export function readSecretFile(path: string, what: string): string {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new ConfigError(`${what}: cannot read ${path}: ${(e as NodeJS.ErrnoException).code ?? "unreadable"}`);
  }
  const value = text.replace(/\r?\n$/, "");
  if (value.length === 0 || /[\r\n\0]/.test(value)) throw new ConfigError(`${what}: ${path} must hold one non-empty line`);
  return value;
}

export function parseSiteConfig(raw: unknown, env: NodeJS.ProcessEnv = {}): SiteConfig {
  if (!raw || typeof raw !== "object" || Array.isArray(raw)) throw new ConfigError("configuration must be a mapping");
  const res = SiteConfig.safeParse(applyEnv(raw as Record<string, unknown>, env));
  if (!res.success) {
    const issues = res.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`);
    throw new ConfigError(`invalid fleetd configuration: ${issues.join("; ")}`);
  }
  return res.data;
}

export function loadSiteConfig(path: string | undefined, env: NodeJS.ProcessEnv = process.env): SiteConfig {
  return parseSiteConfig(readConfigFile(path, env).raw, env);
}

/** The configuration file (--config or FLEETD_CONFIG) as parsed YAML, before any validation. */
export function readConfigFile(path: string | undefined, env: NodeJS.ProcessEnv = process.env): { path: string; raw: unknown } {
  const p = path ?? env["FLEETD_CONFIG"];
  if (!p) throw new ConfigError("no configuration: pass --config FILE or set FLEETD_CONFIG");
  let text: string;
  try {
    text = readFileSync(p, "utf8");
  } catch (e) {
    throw new ConfigError(`cannot read configuration ${p}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = parseYaml(text, { maxAliasCount: 100 });
  } catch (e) {
    throw new ConfigError(`configuration ${p} is not valid YAML: ${(e as Error).message}`);
  }
  return { path: p, raw };
}
