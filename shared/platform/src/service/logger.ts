/**
 * One logger shape for every fleetd service: pino JSON, `service` as the one base key, errors with their stack
 * (log `{ err }`, never `err.message`), and secrets redacted wherever they appear as a field. Nothing should log a
 * secret; the redaction is the second line of defence. An error's `code` stays visible (it names the failure).
 */
import pino, { type DestinationStream, type Logger } from "pino";

/** Field names that hold secrets in fleetd: bootstrap and API tokens, PINs, passwords, install codes, credentials. */
const SECRET_FIELDS = ["token", "pin", "password", "secret", "installCode", "bearer", "authorization", "credential", "privateKey"];
export const REDACT_PATHS: readonly string[] = [
  ...SECRET_FIELDS,
  ...SECRET_FIELDS.map((f) => `*.${f}`),
  "req.headers.authorization",
  "req.headers.cookie",
  'req.headers["x-hook-signature"]',
];

export interface ServiceLoggerOptions {
  /** Default: FLEETD_LOG_LEVEL, else "info". */
  level?: string;
  /** Default: stdout. */
  destination?: DestinationStream;
}

export function serviceLogger(service: string, opts: ServiceLoggerOptions = {}): Logger {
  const options = {
    level: opts.level ?? process.env["FLEETD_LOG_LEVEL"] ?? "info",
    base: { service },
    redact: { paths: [...REDACT_PATHS], censor: "[redacted]" },
    serializers: { err: pino.stdSerializers.err },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  return opts.destination ? pino(options, opts.destination) : pino(options);
}
