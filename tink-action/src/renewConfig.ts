/**
 * `renew`'s configuration: `FLEETD_*` environment (the DaemonSet's `env:`) and command-line flags, which win over
 * the environment. Checked with zod before anything touches the TPM, the files or the network; a bad value is an
 * ActionConfigError naming the variable (or flag).
 */
import { isAbsolute } from "node:path";
import { z } from "zod";
import { ActionConfigError, DEFAULT_TPM, loadCa, parseTpmSpec, type TpmSpec } from "./config.js";
import { parseSignalSpec, type SignalSpec } from "./spireSignal.js";

export const DEFAULT_SEED_DIR = "/var/lib/fleetd/seed";
export const DEFAULT_DEVID_DIR = "/var/lib/fleetd/devid";
export const DEFAULT_EVENT_LOG = "/sys/kernel/security/tpm0/binary_bios_measurements";
export const DEFAULT_STATUS_FILE = "/run/fleetd-renew/status.json";
export const DEFAULT_FAILURES = 3;
export const DEFAULT_BACKOFF_BASE_SECONDS = 30;
export const DEFAULT_BACKOFF_CAP_SECONDS = 3600;

export interface RenewConfig {
  server: URL;
  /** Pinned CA (PEM) for https. */
  ca?: string;
  seedDir: string;
  devidDir: string;
  tpm: TpmSpec;
  eventLog: string;
  /** Consecutive failed attestations/renewals that make the node's own verdict `failed` (readiness off). */
  failuresForVerdict: number;
  /** Backoff between failed attempts: base·2^(n-1), capped, jittered (backoffDelayMs). */
  backoff: { baseMs: number; capMs: number };
  /** How a server outage (503) is waited out within one attempt before the attempt counts as failed. */
  outageBudgetMs: number;
  /** How the SPIRE agent is made to read the renewed files (a restart). */
  spireSignal: SignalSpec;
  statusFile: string;
  /** `/healthz` and `/readyz` on this port (all interfaces); undefined: no listener. */
  healthPort?: number;
  logLevel: string;
}

const intIn = (min: number, max: number) =>
  z
    .string()
    .regex(/^\d+$/, "must be a whole number")
    .transform(Number)
    .pipe(z.number().int().min(min).max(max));

const absPath = z.string().refine(isAbsolute, "must be an absolute path");

const Env = z.object({
  FLEETD_SERVER: z.url({ protocol: /^https?$/, error: "must be an https:// URL" }),
  FLEETD_SERVER_CA: z.string().min(1).optional(),
  FLEETD_ALLOW_HTTP: z.literal("lab", { error: 'only "lab" is accepted (plain HTTP is for loopback tests)' }).optional(),
  FLEETD_SEED_DIR: absPath.default(DEFAULT_SEED_DIR),
  FLEETD_DEVID_DIR: absPath.default(DEFAULT_DEVID_DIR),
  FLEETD_TPM: z.string().min(1).default(DEFAULT_TPM),
  FLEETD_EVENT_LOG: absPath.default(DEFAULT_EVENT_LOG),
  FLEETD_RENEW_FAILURES: intIn(1, 1000).default(DEFAULT_FAILURES),
  FLEETD_RENEW_BACKOFF_BASE_SECONDS: intIn(1, 86_400).default(DEFAULT_BACKOFF_BASE_SECONDS),
  FLEETD_RENEW_BACKOFF_CAP_SECONDS: intIn(1, 7 * 86_400).default(DEFAULT_BACKOFF_CAP_SECONDS),
  FLEETD_RENEW_OUTAGE_SECONDS: intIn(0, 86_400).default(300),
  FLEETD_SPIRE_SIGNAL: z.string().min(1).default("none"),
  FLEETD_STATUS_FILE: absPath.default(DEFAULT_STATUS_FILE),
  FLEETD_HEALTH_PORT: z.union([z.literal("off"), intIn(1, 65535)]).default("off"),
  FLEETD_LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
});

/** Flag → environment variable (flags win). */
export const RENEW_FLAGS = {
  server: "FLEETD_SERVER",
  "server-ca": "FLEETD_SERVER_CA",
  seed: "FLEETD_SEED_DIR",
  devid: "FLEETD_DEVID_DIR",
  tpm: "FLEETD_TPM",
  "event-log": "FLEETD_EVENT_LOG",
  failures: "FLEETD_RENEW_FAILURES",
  "spire-signal": "FLEETD_SPIRE_SIGNAL",
  "status-file": "FLEETD_STATUS_FILE",
  "health-port": "FLEETD_HEALTH_PORT",
} as const;

export function loadRenewConfig(env: NodeJS.ProcessEnv, flags: Partial<Record<keyof typeof RENEW_FLAGS, string>> = {}): RenewConfig {
  // Empty values count as unset (a manifest may render an optional value to "").
  const present: Record<string, string> = Object.fromEntries(Object.entries(env).filter(([k, v]) => k.startsWith("FLEETD_") && v !== undefined && v !== "")) as Record<string, string>;
  const from: Record<string, string> = {};
  for (const [flag, name] of Object.entries(RENEW_FLAGS)) {
    const v = flags[flag as keyof typeof RENEW_FLAGS];
    if (v !== undefined) {
      present[name] = v;
      from[name] = `--${flag}`;
    }
  }
  const label = (name: string) => (from[name] ? `${from[name]} (${name})` : name);
  const parsed = Env.safeParse(present);
  if (!parsed.success) {
    throw new ActionConfigError(
      parsed.error.issues.map((i) => {
        const name = String(i.path[0] ?? "environment");
        return `${label(name)}: ${i.code === "invalid_type" && present[name] === undefined ? "is required" : i.message}`;
      }),
    );
  }
  const e = parsed.data;
  const server = new URL(e.FLEETD_SERVER);
  const issues: string[] = [];
  if (server.protocol === "http:" && e.FLEETD_ALLOW_HTTP !== "lab") issues.push(`${label("FLEETD_SERVER")}: plain http:// is refused (https with a pinned CA; FLEETD_ALLOW_HTTP=lab is for loopback tests)`);
  if (server.protocol === "https:" && !e.FLEETD_SERVER_CA) issues.push(`${label("FLEETD_SERVER_CA")}: required for https (the server's CA is pinned; system roots are not used)`);
  if (server.username || server.password) issues.push(`${label("FLEETD_SERVER")}: credentials in the URL are refused`);
  if (e.FLEETD_RENEW_BACKOFF_CAP_SECONDS < e.FLEETD_RENEW_BACKOFF_BASE_SECONDS) issues.push("FLEETD_RENEW_BACKOFF_CAP_SECONDS: must be at least FLEETD_RENEW_BACKOFF_BASE_SECONDS");
  if (e.FLEETD_SEED_DIR === e.FLEETD_DEVID_DIR) issues.push(`${label("FLEETD_DEVID_DIR")}: must not be the seed directory`);
  let spireSignal: SignalSpec | undefined;
  try {
    spireSignal = parseSignalSpec(e.FLEETD_SPIRE_SIGNAL);
  } catch (err) {
    issues.push(`${label("FLEETD_SPIRE_SIGNAL")}: ${(err as Error).message}`);
  }
  let tpm: TpmSpec | undefined;
  try {
    tpm = parseTpmSpec(e.FLEETD_TPM);
  } catch (err) {
    issues.push(...(err instanceof ActionConfigError ? err.issues.map((i) => i.replace(/^FLEETD_TPM/, label("FLEETD_TPM"))) : [String(err)]));
  }
  if (issues.length || !spireSignal || !tpm) throw new ActionConfigError(issues);
  return {
    server,
    ...(e.FLEETD_SERVER_CA && server.protocol === "https:" ? { ca: loadCa(e.FLEETD_SERVER_CA) } : {}),
    seedDir: e.FLEETD_SEED_DIR,
    devidDir: e.FLEETD_DEVID_DIR,
    tpm,
    eventLog: e.FLEETD_EVENT_LOG,
    failuresForVerdict: e.FLEETD_RENEW_FAILURES,
    backoff: { baseMs: e.FLEETD_RENEW_BACKOFF_BASE_SECONDS * 1000, capMs: e.FLEETD_RENEW_BACKOFF_CAP_SECONDS * 1000 },
    outageBudgetMs: e.FLEETD_RENEW_OUTAGE_SECONDS * 1000,
    spireSignal,
    statusFile: e.FLEETD_STATUS_FILE,
    ...(e.FLEETD_HEALTH_PORT === "off" ? {} : { healthPort: e.FLEETD_HEALTH_PORT }),
    logLevel: e.FLEETD_LOG_LEVEL,
  };
}
