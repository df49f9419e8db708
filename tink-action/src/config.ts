/**
 * The attest step's configuration, from the environment (Tinkerbell passes the action's `environment:`), checked
 * with zod: a wrong or missing value stops the action before it touches the TPM or the network.
 */
import { readFileSync, statSync } from "node:fs";
import { isAbsolute } from "node:path";
import { z } from "zod";
import { MODES, type Mode } from "@fleetd/platform/protocol";
import { IFNAME } from "./lldp/ifname.js";
import { CERTIFICATE_LABELS, type PemBlock, parseCertificate, pemBlocks } from "@fleetd/verify/x509";

/** Where the attest step leaves its results for the following actions (the Template mounts `/worker:/worker`). */
export const DEFAULT_OUT = "/worker/fleetd";
export const DEFAULT_TPM = "/dev/tpmrm0";
export const DEFAULT_TIMEOUT_SECONDS = 600;
export const DEFAULT_LLDP_WAIT_SECONDS = 35;

/**
 * Where a TPM 1.2's owner (or SRK) secret comes from: the TCG well-known secret (20 zero bytes), or a file holding
 * the 20-byte TPM_AUTHDATA (40 hex digits, or the raw 20 bytes) — in production a Kubernetes Secret the Template
 * mounts read-only, never an environment value (a Workflow's environment is readable by anyone who can read the
 * Workflow). Read only when the action finds a TPM 1.2; never logged.
 */
export type Tpm12AuthSource = { kind: "well-known" } | { kind: "file"; path: string };

export type TpmSpec = { kind: "device"; path: string } | { kind: "tcp"; host: string; port: number } | { kind: "unix"; path: string };

export interface AttestConfig {
  server: URL;
  /** PEM certificates the server's chain must end in; nothing else is trusted (no system roots). */
  ca?: string;
  mode: Mode;
  workflow: string;
  tpm: TpmSpec;
  out: string;
  timeoutSeconds: number;
  bootInterface?: string;
  /** Where `/sys` and `/proc` are read (tests point it at a tree of their own). */
  root: string;
  lldp: "lldpd" | "off";
  lldpWaitSeconds: number;
  logLevel: string;
  /** TPM 1.2 machines: the owner and SRK secrets (owner unset: a TPM 1.2 is refused locally, naming the setting). */
  tpm12: { ownerAuth?: Tpm12AuthSource; srkAuth: Tpm12AuthSource };
}

export class ActionConfigError extends Error {
  override readonly name = "ActionConfigError";
  constructor(readonly issues: string[]) {
    super(`configuration refused: ${issues.join("; ")}`);
  }
}


const intIn = (min: number, max: number) =>
  z
    .string()
    .regex(/^\d+$/, "must be a whole number")
    .transform(Number)
    .pipe(z.number().int().min(min).max(max));

const Env = z.object({
  FLEETD_SERVER: z.url({ protocol: /^https?$/, error: "must be an https:// URL" }),
  FLEETD_SERVER_CA: z.string().min(1).optional(),
  FLEETD_MODE: z.enum(MODES, { error: `must be one of ${MODES.join(", ")}` }),
  FLEETD_WORKFLOW: z.string().min(1).max(253),
  FLEETD_TPM: z.string().min(1).default(DEFAULT_TPM),
  FLEETD_OUT: z.string().refine(isAbsolute, "must be an absolute path").default(DEFAULT_OUT),
  FLEETD_TIMEOUT_SECONDS: intIn(1, 86_400).default(DEFAULT_TIMEOUT_SECONDS),
  FLEETD_BOOT_INTERFACE: z.string().regex(IFNAME, "must be a network interface name").optional(),
  FLEETD_ROOT: z.string().refine(isAbsolute, "must be an absolute path").default("/"),
  FLEETD_LLDP: z.enum(["lldpd", "off"]).default("lldpd"),
  FLEETD_LLDP_WAIT_SECONDS: intIn(0, 600).default(DEFAULT_LLDP_WAIT_SECONDS),
  FLEETD_ALLOW_HTTP: z.literal("lab", { error: 'only "lab" is accepted (plain HTTP is for loopback tests)' }).optional(),
  FLEETD_TPM12_OWNER_AUTH: z.string().regex(/^(well-known|file:\/.+)$/, 'must be "well-known" or file:/absolute/path').optional(),
  FLEETD_TPM12_SRK_AUTH: z.string().regex(/^(well-known|file:\/.+)$/, 'must be "well-known" or file:/absolute/path').default("well-known"),
  FLEETD_LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
});

/** `/dev/tpmrm0` (or any absolute device path), `swtpm:HOST:PORT` (swtpm's TCP command port), `unix:PATH`. */
export function parseTpmSpec(s: string): TpmSpec {
  if (s.startsWith("unix:")) {
    const path = s.slice(5);
    if (!isAbsolute(path)) throw new ActionConfigError([`FLEETD_TPM: unix:PATH needs an absolute path (got ${JSON.stringify(s)})`]);
    return { kind: "unix", path };
  }
  const tcp = /^swtpm:([A-Za-z0-9.-]+|\[[0-9a-fA-F:]+\]):(\d{1,5})$/.exec(s);
  if (tcp) {
    const port = Number(tcp[2]);
    if (port < 1 || port > 65535) throw new ActionConfigError([`FLEETD_TPM: port ${port} is out of range`]);
    return { kind: "tcp", host: (tcp[1] ?? "").replace(/^\[|\]$/g, ""), port };
  }
  if (s.startsWith("swtpm:")) throw new ActionConfigError([`FLEETD_TPM: expected swtpm:HOST:PORT (got ${JSON.stringify(s)})`]);
  if (!isAbsolute(s)) throw new ActionConfigError([`FLEETD_TPM: expected a device path, swtpm:HOST:PORT or unix:PATH (got ${JSON.stringify(s)})`]);
  return { kind: "device", path: s };
}

/**
 * The pinned CA: inline PEM, or the path of a PEM file. Every block must be a certificate that parses; at least
 * one is required. Returns the PEM text as given (normalised to the certificate blocks).
 */
export function loadCa(value: string): string {
  let text = value;
  if (!value.includes("-----BEGIN")) {
    if (!isAbsolute(value)) throw new ActionConfigError(["FLEETD_SERVER_CA: neither PEM nor an absolute file path"]);
    try {
      if (statSync(value).size > 1 << 20) throw new ActionConfigError([`FLEETD_SERVER_CA: ${value} is larger than 1 MiB`]);
      text = readFileSync(value, "utf8");
    } catch (e) {
      if (e instanceof ActionConfigError) throw e;
      throw new ActionConfigError([`FLEETD_SERVER_CA: cannot read ${value}: ${(e as NodeJS.ErrnoException).code ?? String(e)}`]);
    }
  }
  let blocks: PemBlock[];
  try {
    blocks = pemBlocks(text).filter((b) => CERTIFICATE_LABELS.has(b.label));
  } catch (e) {
    // e.g. the shipped template's placeholder text between the BEGIN and END lines
    throw new ActionConfigError([`FLEETD_SERVER_CA: no PEM certificate found (${(e as Error).message})`]);
  }
  if (blocks.length === 0) throw new ActionConfigError(["FLEETD_SERVER_CA: no PEM certificate found"]);
  blocks.forEach((b, i) => {
    try {
      parseCertificate(b.der);
    } catch (e) {
      throw new ActionConfigError([`FLEETD_SERVER_CA: certificate ${i + 1} does not parse: ${(e as Error).message}`]);
    }
  });
  return blocks.map((b) => text.slice(b.start, b.end)).join("\n") + "\n";
}

export function loadConfig(env: NodeJS.ProcessEnv): AttestConfig {
  // Empty values count as unset (a Template may render an optional value to "").
  const present = Object.fromEntries(Object.entries(env).filter(([k, v]) => k.startsWith("FLEETD_") && v !== undefined && v !== ""));
  const parsed = Env.safeParse(present);
  if (!parsed.success) {
    throw new ActionConfigError(
      parsed.error.issues.map((i) => `${i.path.join(".") || "environment"}: ${i.code === "invalid_type" && present[String(i.path[0])] === undefined ? "is required" : i.message}`),
    );
  }
  const e = parsed.data;
  const server = new URL(e.FLEETD_SERVER);
  const issues: string[] = [];
  if (server.protocol === "http:" && e.FLEETD_ALLOW_HTTP !== "lab") issues.push("FLEETD_SERVER: plain http:// is refused (https with a pinned CA; FLEETD_ALLOW_HTTP=lab is for loopback tests)");
  if (server.protocol === "https:" && !e.FLEETD_SERVER_CA) issues.push("FLEETD_SERVER_CA: required for https (the server's CA is pinned; system roots are not used)");
  if (server.username || server.password) issues.push("FLEETD_SERVER: credentials in the URL are refused");
  if (issues.length) throw new ActionConfigError(issues);
  return {
    server,
    ...(e.FLEETD_SERVER_CA && server.protocol === "https:" ? { ca: loadCa(e.FLEETD_SERVER_CA) } : {}),
    mode: e.FLEETD_MODE,
    workflow: e.FLEETD_WORKFLOW,
    tpm: parseTpmSpec(e.FLEETD_TPM),
    out: e.FLEETD_OUT,
    timeoutSeconds: e.FLEETD_TIMEOUT_SECONDS,
    ...(e.FLEETD_BOOT_INTERFACE ? { bootInterface: e.FLEETD_BOOT_INTERFACE } : {}),
    root: e.FLEETD_ROOT,
    lldp: e.FLEETD_LLDP,
    lldpWaitSeconds: e.FLEETD_LLDP_WAIT_SECONDS,
    logLevel: e.FLEETD_LOG_LEVEL,
    tpm12: {
      ...(e.FLEETD_TPM12_OWNER_AUTH ? { ownerAuth: authSource(e.FLEETD_TPM12_OWNER_AUTH) } : {}),
      srkAuth: authSource(e.FLEETD_TPM12_SRK_AUTH),
    },
  };
}

function authSource(v: string): Tpm12AuthSource {
  return v === "well-known" ? { kind: "well-known" } : { kind: "file", path: v.slice("file:".length) };
}

/** A TPM 1.2 secret from its source: 20 bytes. The file holds 40 hex digits (a trailing newline is fine) or 20 raw bytes. */
export function readTpm12Auth(src: Tpm12AuthSource, what: string): Uint8Array {
  if (src.kind === "well-known") return new Uint8Array(20);
  let raw: Buffer;
  try {
    if (statSync(src.path).size > 64) throw new ActionConfigError([`${what}: ${src.path} is not a 20-byte secret`]);
    raw = readFileSync(src.path);
  } catch (e) {
    if (e instanceof ActionConfigError) throw e;
    throw new ActionConfigError([`${what}: cannot read ${src.path}: ${(e as NodeJS.ErrnoException).code ?? String(e)}`]);
  }
  if (raw.length === 20) return new Uint8Array(raw);
  const text = raw.toString("latin1").trim();
  if (/^[0-9a-fA-F]{40}$/.test(text)) return new Uint8Array(Buffer.from(text, "hex"));
  throw new ActionConfigError([`${what}: ${src.path} holds neither 40 hex digits nor 20 bytes`]);
}

/** How a secret source is shown in logs: never the secret. */
export function describeAuth(src: Tpm12AuthSource | undefined): string {
  return src === undefined ? "unset" : src.kind === "well-known" ? "well-known" : `file:${src.path}`;
}

export { IFNAME };
