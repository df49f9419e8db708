/**
 * spire-plugin's configuration (its own file: the sidecar needs neither NetBox nor the site file), zod-validated:
 * the trust domain and admin socket of its spire-server, where the node list and its own status live, the
 * interval, limits, the health listener and leader election.
 */
import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { applyHaEnv, LEASE_TIMING, LeaderElectionFields, LeaseName, leaseTimingOk } from "@fleetd/platform/kube";
import { DocumentLocation, NODE_LIST_MAX_BYTES } from "@fleetd/platform/spire";

export const SpirePluginConfig = z.strictObject({
  /** The SPIRE server's trust domain (a list for another trust domain is refused). */
  trustDomain: z.string().regex(/^[a-z0-9._-]{1,255}$/),
  /**
   * spire-server's `tpm_devid` `devid_ca_path` (the same file, mounted into the sidecar): a list naming a CA
   * fingerprint that is not one of its roots is refused, read again on every pass (a CA rollover adds a root there).
   */
  devidCaPath: z.string().min(1).refine((p) => p.startsWith("/"), "an absolute path"),
  /** spire-server's admin socket (`server { socket_path }`), shared through an emptyDir. */
  socketPath: z.string().min(1).refine((p) => p.startsWith("/"), "an absolute path"),
  /** spire-nodes.json, as netbox-script publishes it. */
  list: DocumentLocation,
  /** Where this sync writes its status (retirement's spire step reads it). */
  status: DocumentLocation,
  /** A full pass at least this often (the watch triggers one at once on every change). */
  intervalSeconds: z.number().int().min(1).max(3600).default(30),
  /** Larger lists are refused (no entry changes). */
  maxListBytes: z.number().int().min(1024).max(NODE_LIST_MAX_BYTES).default(NODE_LIST_MAX_BYTES),
  pageSize: z.number().int().min(1).max(5000).default(500),
  batchSize: z.number().int().min(1).max(5000).default(200),
  /** Deadline of one SPIRE RPC. */
  rpcTimeoutMs: z.number().int().min(1000).max(600_000).default(120_000),
  listen: z.strictObject({ host: z.string().default("0.0.0.0"), port: z.number().int().min(0).max(65535).default(8481) }).prefault({}),
  /** Several replicas (one per spire-server replica): one leader writes. */
  ha: z.strictObject({ ...LeaderElectionFields, lease: LeaseName.default("fleetd-spire-plugin") }).refine(leaseTimingOk, LEASE_TIMING).optional(),
});
export type SpirePluginConfig = z.infer<typeof SpirePluginConfig>;

export class SpirePluginConfigError extends Error {
  override readonly name = "SpirePluginConfigError";
}

export function parseSpirePluginConfig(raw: unknown): SpirePluginConfig {
  const r = SpirePluginConfig.safeParse(raw);
  if (!r.success) throw new SpirePluginConfigError(`invalid spire-plugin configuration: ${r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
  return r.data;
}

/** Reads a YAML or JSON file (`path`, else $FLEETD_SPIRE_PLUGIN_CONFIG); FLEETD_HA_IDENTITY over `ha.identity`. */
export function loadSpirePluginConfig(path: string | undefined, env: NodeJS.ProcessEnv = process.env): SpirePluginConfig {
  const p = path ?? env["FLEETD_SPIRE_PLUGIN_CONFIG"];
  if (!p) throw new SpirePluginConfigError("no configuration: pass --config FILE or set FLEETD_SPIRE_PLUGIN_CONFIG");
  let text: string;
  try {
    text = readFileSync(p, "utf8");
  } catch (e) {
    throw new SpirePluginConfigError(`${p}: ${(e as Error).message}`);
  }
  const raw: unknown = parseYaml(text);
  if (typeof raw === "object" && raw !== null && !Array.isArray(raw) && "ha" in raw) {
    return parseSpirePluginConfig({ ...raw, ha: applyHaEnv((raw as { ha: unknown }).ha, env) });
  }
  return parseSpirePluginConfig(raw);
}
