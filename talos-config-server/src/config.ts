/**
 * talos-config-server's configuration: fleetd's site configuration file (netbox, accounts, …) plus the `server`
 * section, zod-validated, like netbox-script's `handler` section. Environment overrides: FLEETD_CONFIG (the
 * file), FLEETD_NETBOX_URL, FLEETD_NETBOX_TOKEN, FLEETD_SERVER_HOST, FLEETD_SERVER_PORT, FLEETD_LOG_LEVEL, and under
 * `server.ha` FLEETD_HA_IDENTITY and FLEETD_HA_INTERNAL_URL (each replica's own, from the downward API).
 *
 * Secrets come only from the environment or from files the configuration names: the NetBox token
 * (FLEETD_NETBOX_TOKEN or `netbox.tokenFile`), the PKCS#11 PIN (`server.ca.signer.pin: {env}|{file}`), the TLS
 * keys (`server.tls.keyFile`; with HA also `server.ha.internal.tls.keyFile` and `clientKeyFile`), the Talos
 * cluster secrets workers get (`server.talos.siteFile`) and the control planes' CA keys (the Talos secrets bundle
 * the site file names, `controlPlane.secretsBundleFile`, checked at start and read again at each control-plane
 * render). A NetBox token written into the file is refused outside `mode: lab`. Nothing here is ever logged.
 *
 * Plain HTTP only with `mode: lab`: at fetch time the install code is a bearer token.
 */
import { trustedProxies } from "./clientAddress.js";
import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { ListenerLimits } from "@fleetd/platform/http";
import { ConfigError, parseSiteConfig, readConfigFile, type SiteConfig, DEFAULT_MODE_GATES, type ModeGates } from "@fleetd/platform/fleet";
import { Pkcs11SignerConfig, MAX_LEAF_LIFETIME_DAYS } from "@fleetd/platform/pki";
import { ConfigInputError, TalosSiteConfig, siteSecretsBundle } from "@fleetd/platform/talos/config";
import { applyHaEnv, LEASE_TIMING, LeaderElectionFields, LeaseName, leaseTimingOk } from "@fleetd/platform/kube";

const Path = z.string().min(1, "must be a path");
const Slug = z.string().regex(/^[a-z0-9][a-z0-9_-]*$/, "must be a NetBox slug");
const Statuses = z.array(Slug).max(16);
const seconds = (min: number, max: number, def: number) => z.number().int().min(min).max(max).default(def);

export const ServerSection = z
  .strictObject({
    /** `production` (default) or `lab`: only the lab may serve plain HTTP or keep the NetBox token in this file. */
    mode: z.enum(["production", "lab"]).default("production"),
    listen: z
      .strictObject({
        host: z.string().min(1).default("0.0.0.0"),
        port: z.number().int().min(0).max(65535).default(8443),
        /** Connection caps (in all, per source address) and timeouts (shared/platform/src/http/listenerLimits.ts). */
        limits: ListenerLimits.prefault({}),
      })
      .prefault({}),
    /** PEM certificate (chain) and private key served by HTTPS. Required unless `mode: lab`. */
    tls: z.strictObject({ certFile: Path, keyFile: Path }).optional(),
    /** SQLite file: sessions, AK Names, pending EKs (`fleetd pending`), install codes, issued serials. Not with `ha`. */
    stateDb: Path.optional(),
    /**
     * High availability (optional; without it, one process as before): the state in Kubernetes Secrets, the CA
     * signer a single leader (Lease `signerLease`) that the other replicas forward issuance to, and the
     * server's loops (session sweeper, CSR gate) on the leader of `loopsLease` only. See README "HA".
     */
    ha: z
      .strictObject({
        ...LeaderElectionFields,
        /**
         * Where the other replicas reach this replica's internal listener (`internal.listen`, the pod's address),
         * published on the Lease while leading. https only: the internal listener is mutual TLS and nothing else.
         */
        internalUrl: z.url({ protocol: /^https$/, error: "must be an https: URL (the internal listener accepts only mutual-TLS clients)" }),
        /** The replicas' shared secret (≥ 32 bytes) authenticating internal requests (HMAC-SHA256), on top of mutual TLS. */
        peerSecretFile: Path,
        /** Replaced by `internal.tls.caFile` (now required): named here so an old configuration says where it went. */
        peerCaFile: z.never({ error: "moved to server.ha.internal.tls.caFile (required: the internal listener is mutual TLS only)" }).optional(),
        /**
         * The replicas' own listener (the internal API, POST /internal/v1/issue, openapi-internal.yaml): HTTPS that
         * accepts only clients with a certificate from the peer CA, TLS 1.3. The public listener does not serve it.
         */
        internal: z.strictObject({
          listen: z
            .strictObject({
              host: z.string().min(1).default("0.0.0.0"),
              port: z.number().int().min(0).max(65535).default(9443),
              /** The same connection policy as every fleetd listener (shared/platform/src/http/listenerLimits.ts). */
              limits: ListenerLimits.prefault({}),
            })
            .prefault({}),
          tls: z.strictObject({
            /** PEM CA certificate(s) of the replicas only: client certificates and the leader's server certificate must chain to it. */
            caFile: Path,
            /** This replica's server certificate (chain) and key; it must name the host of `internalUrl` (DNS or IP SAN). */
            certFile: Path,
            keyFile: Path,
            /** The client certificate (chain) and key this replica presents when it forwards to the leader. */
            clientCertFile: Path,
            clientKeyFile: Path,
          }),
        }),
        signerLease: LeaseName.default("fleetd-ca-signer"),
        loopsLease: LeaseName.default("fleetd-config-server"),
      })
      .refine(leaseTimingOk, LEASE_TIMING)
      .optional(),
    /** NetBox device-role slugs of the nodes file's roles (defaults as the nodes file's). */
    roleSlugs: z
      .strictObject({ worker: Slug.default("fleetd-worker"), "control-plane": Slug.default("fleetd-control-plane") })
      .prefault({}),
    /** Directory of TPM manufacturer CA certificates (PEM or DER) EK certificates must chain to. */
    ekRootsDir: Path,
    /** Site Secure Boot authorities (`site:<name>` in policy profiles): `<dir>/<name>.pem`. */
    siteAuthoritiesDir: Path.optional(),
    /** Policy profiles (hookos.yaml, …); default: the repository's policy/. */
    policyDir: Path.optional(),
    /** The profile every attestation from the provisioning OS is judged by. */
    provisioningProfile: z.string().regex(/^[a-z0-9][a-z0-9-]*$/).default("hookos"),
    /** Accept EK certificates past notAfter (long-lived identity documents). */
    allowExpiredEkCertificates: z.boolean().default(false),
    /** Unknown EK bindings listed as pending at most (known ones are refreshed); beyond it, not recorded. */
    maxPendingEks: z.number().int().min(1).max(100_000).default(1000),
    /** attest mode renews the LDevID when less than this many days of its life are left. */
    renewBeforeDays: z.number().min(0).max(365).default(7),
    ca: z.strictObject({
      /** The CA key on a PKCS#11 token (YubiKey PIV; SoftHSM2 in tests). The PIN: `{ env: NAME }` or `{ file: PATH }`. */
      signer: Pkcs11SignerConfig,
      /** The CA bundle state (shared/platform/src/pki/bundleState.ts), rewritten atomically after each issuance. */
      bundleStateFile: Path,
      /** LDevID and LAK lifetime, at most 30 days. */
      ldevidLifetimeDays: z.number().int().min(1).max(MAX_LEAF_LIFETIME_DAYS).default(MAX_LEAF_LIFETIME_DAYS),
    }),
    talos: z.strictObject({
      /** YAML file with the Talos site configuration (talos, cluster, network); holds cluster secrets. */
      siteFile: Path,
      /** Lifetime of the per-node bootstrap token the rendered config carries. */
      bootstrapTokenTtlSeconds: seconds(600, 7 * 86_400, 86_400),
    }),
    /**
     * The kubelet bootstrap CSR gate (csrGate.ts), run when the site configuration names a workload cluster
     * (`kubernetes.workload.kubeconfig`). `run: false` when something else (leader election) starts it.
     */
    csrGate: z
      .strictObject({
        run: z.boolean().default(true),
        intervalSeconds: seconds(1, 300, 60),
        /** How long an approved token's Secret is kept after the certificate is issued (the kubelet reads it). */
        tokenGraceSeconds: seconds(0, 3600, 120),
      })
      .prefault({}),
    ttl: z
      .strictObject({
        /** Session and nonce lifetime. */
        sessionSeconds: seconds(30, 3600, 300),
        /** Install code (and its one-time config) lifetime. */
        installCodeSeconds: seconds(300, 86_400, 7200),
        /** A config-fetch claim older than this is abandoned (the process sending it died). */
        staleClaimSeconds: seconds(5, 3600, 60),
      })
      .prefault({}),
    /** NetBox statuses that allow each mode; a mode not given keeps its default. */
    gates: z
      .strictObject({ intake: Statuses.optional(), provision: Statuses.optional(), attest: Statuses.optional(), wipe: Statuses.optional() })
      .prefault({}),
    /** Wrong install codes per source address (never per UUID: a UUID is public). */
    rateLimit: z
      .strictObject({
        /** Wrong install codes per client address per window. */
        maxFailures: z.number().int().min(1).max(1000).default(5),
        windowSeconds: seconds(1, 86_400, 60),
        /** Attestation requests (/v1/attest/*) per client address per window; an attestation makes three. */
        attestRequests: z.number().int().min(3).max(100_000).default(60),
        attestWindowSeconds: seconds(1, 86_400, 60),
      })
      .prefault({}),
    /**
     * Proxies (CIDRs or addresses) whose X-Forwarded-For is believed for the client address, e.g. the ingress
     * or the Service's node addresses. Empty: the socket address is the client.
     */
    trustedProxies: z
      .array(z.string().min(1).max(64))
      .max(256)
      .default([])
      .superRefine((list, ctx) => {
        try {
          trustedProxies(list);
        } catch (e) {
          ctx.addIssue({ code: "custom", message: (e as Error).message });
        }
      }),
    /**
     * Protocol requests worked on at once (their bodies read only then) and the longest a request past that waits
     * before a 503 the machine retries: a power-on storm queues instead of holding every event log in memory.
     * maxWaitMs must leave the body time to arrive within listen.limits.requestTimeoutMs.
     */
    steps: z.strictObject({ concurrency: z.number().int().min(1).max(256).default(8), maxWaitMs: z.number().int().min(100).max(300_000).default(20_000) }).prefault({}),
    /** Largest JSON body; evidence carries an event log of up to 1 MiB as base64. */
    bodyLimitBytes: z.number().int().min(64 * 1024).max(16 * 1024 * 1024).default(2 * 1024 * 1024),
    logLevel: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
  })
  .superRefine((s, ctx) => {
    if (s.steps.maxWaitMs + 5000 > s.listen.limits.requestTimeoutMs) {
      ctx.addIssue({ code: "custom", path: ["steps", "maxWaitMs"], message: `must be at least 5 s below listen.limits.requestTimeoutMs (${s.listen.limits.requestTimeoutMs} ms): a request that waited its turn still needs time to send its body` });
    }
    if (!s.ha && !s.stateDb) ctx.addIssue({ code: "custom", path: ["stateDb"], message: "required (unless ha: the state is then in Kubernetes)" });
    if (s.ha && s.stateDb) ctx.addIssue({ code: "custom", path: ["stateDb"], message: "not with ha: the replicas share the Kubernetes-backed state" });
    if (s.ha) {
      const i = s.ha.internal.listen;
      const wildcard = (h: string) => h === "0.0.0.0" || h === "::";
      if (i.port !== 0 && i.port === s.listen.port && (i.host === s.listen.host || wildcard(i.host) || wildcard(s.listen.host))) {
        ctx.addIssue({ code: "custom", path: ["ha", "internal", "listen", "port"], message: `must differ from listen.port (${s.listen.port}): the internal API has a listener of its own` });
      }
    }
    if (s.mode !== "lab" && !s.tls) {
      ctx.addIssue({
        code: "custom",
        path: ["tls"],
        message: "required: plain HTTP is allowed only with server.mode: lab (at fetch time the install code is a bearer token); give tls.certFile and tls.keyFile",
      });
    }
  });
export type ServerSection = z.infer<typeof ServerSection>;

export interface ServerConfig {
  /** The file it came from. */
  path: string;
  site: SiteConfig;
  server: ServerSection;
  gates: ModeGates;
  talos: TalosSiteConfig;
}

const issues = (prefix: string, e: z.ZodError): string =>
  e.issues.map((i) => `${[prefix, ...i.path.map(String)].filter(Boolean).join(".") || "(root)"}: ${i.message}`).join("; ");

/** FLEETD_SERVER_HOST, FLEETD_SERVER_PORT, FLEETD_LOG_LEVEL, FLEETD_HA_IDENTITY, FLEETD_HA_INTERNAL_URL over the file's `server` section. */
function applyServerEnv(section: Record<string, unknown>, env: NodeJS.ProcessEnv): Record<string, unknown> {
  const out = structuredClone(section);
  const host = env["FLEETD_SERVER_HOST"];
  const port = env["FLEETD_SERVER_PORT"];
  if (host || port) {
    const listen = (typeof out["listen"] === "object" && out["listen"] !== null ? out["listen"] : {}) as Record<string, unknown>;
    if (host) listen["host"] = host;
    if (port) {
      if (!/^\d{1,5}$/.test(port)) throw new ConfigError(`FLEETD_SERVER_PORT: "${port}" is not a port number`);
      listen["port"] = Number(port);
    }
    out["listen"] = listen;
  }
  if (env["FLEETD_LOG_LEVEL"]) out["logLevel"] = env["FLEETD_LOG_LEVEL"];
  if (out["ha"] !== undefined) out["ha"] = applyHaEnv(out["ha"], env, { FLEETD_HA_INTERNAL_URL: "internalUrl" });
  return out;
}

export function loadTalosSite(path: string): TalosSiteConfig {
  let raw: unknown;
  try {
    raw = parseYaml(readFileSync(path, "utf8"), { maxAliasCount: 100 });
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new ConfigError(`server.talos.siteFile: ${code ? `cannot read ${path}: ${code}` : `${path} is not valid YAML: ${(e as Error).message}`}`);
  }
  const r = TalosSiteConfig.safeParse(raw);
  if (!r.success) throw new ConfigError(`invalid Talos site file ${path}: ${issues("", r.error)}`);
  if (r.data.controlPlane) {
    // Fail at start, not at the first control plane's provision: the bundle is there, private, and the site's.
    try {
      siteSecretsBundle(r.data);
    } catch (e) {
      if (e instanceof ConfigInputError) throw new ConfigError(`Talos site file ${path}: controlPlane.secretsBundleFile: ${e.message}`);
      throw e;
    }
  }
  return r.data;
}

/** Validate a parsed configuration file (the YAML as read) with the environment's overrides. */
export function toServerConfig(path: string, raw: unknown, env: NodeJS.ProcessEnv = process.env): ServerConfig {
  if (!raw || typeof raw !== "object" || Array.isArray(raw)) throw new ConfigError(`configuration ${path} must be a mapping`);
  const file = raw as Record<string, unknown>;
  const sectionRaw = file["server"];
  if (sectionRaw === undefined) throw new ConfigError("server: required: talos-config-server needs its `server` section");
  if (typeof sectionRaw !== "object" || sectionRaw === null || Array.isArray(sectionRaw)) throw new ConfigError("server: must be a mapping");
  const parsed = ServerSection.safeParse(applyServerEnv(sectionRaw as Record<string, unknown>, env));
  if (!parsed.success) throw new ConfigError(`invalid talos-config-server configuration: ${issues("server", parsed.error)}`);
  const server = parsed.data;
  const nb = file["netbox"];
  if (server.mode !== "lab" && nb && typeof nb === "object" && (nb as Record<string, unknown>)["token"] !== undefined) {
    throw new ConfigError("netbox.token: talos-config-server takes the NetBox token only from FLEETD_NETBOX_TOKEN or netbox.tokenFile, never from the configuration file (allowed only with server.mode: lab)");
  }
  const site = parseSiteConfig(raw, env);
  const gates: ModeGates = {
    intake: server.gates.intake ?? DEFAULT_MODE_GATES.intake,
    provision: server.gates.provision ?? DEFAULT_MODE_GATES.provision,
    attest: server.gates.attest ?? DEFAULT_MODE_GATES.attest,
    wipe: server.gates.wipe ?? DEFAULT_MODE_GATES.wipe,
  };
  return { path, site, server, gates, talos: loadTalosSite(server.talos.siteFile) };
}

/** `--config FILE` or FLEETD_CONFIG. */
export function loadServerConfig(path: string | undefined, env: NodeJS.ProcessEnv = process.env): ServerConfig {
  const f = readConfigFile(path, env);
  return toServerConfig(f.path, f.raw, env);
}

export { ConfigError };
