#!/usr/bin/env node
/**
 * talos-config-server: `node talos-config-server/dist/main.js [--config FILE]` (or FLEETD_CONFIG). Runs until
 * SIGTERM/SIGINT: then stops accepting, lets requests in flight finish, closes the PKCS#11 session and the state.
 * Exit codes: 0 stopped, 2 configuration or start-up error (the message names the field or file), 1 a failure
 * while stopping.
 */
import { parseArgs } from "node:util";
import pino from "pino";
import { loadServerConfig } from "./config.js";
import { startServer } from "./server.js";

function fail(message: string): never {
  process.stderr.write(`talos-config-server: ${message}\n`);
  process.exit(2);
}

let config: string | undefined;
try {
  config = parseArgs({ options: { config: { type: "string" } }, strict: true }).values.config;
} catch (e) {
  fail(`${(e as Error).message}\nusage: talos-config-server [--config FILE]`);
}

try {
  const cfg = loadServerConfig(config);
  // Nothing logs a secret; the redaction is a second line of defence (an error's `code` stays visible).
  const log = pino({ level: cfg.server.logLevel, base: { service: "talos-config-server" }, redact: ["token", "pin", "*.token", "*.pin"] });
  const running = await startServer(cfg, log);
  let signalled = false;
  const stop = (signal: string): void => {
    if (signalled) return;
    signalled = true;
    log.info({ signal }, "stopping");
    running.stop().then(
      () => process.exit(0),
      (e: unknown) => {
        log.error({ err: e }, "stopping failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
} catch (e) {
  fail(e instanceof Error ? `${e.name === "Error" ? "" : `${e.name}: `}${e.message}` : String(e));
}
