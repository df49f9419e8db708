#!/usr/bin/env node
/**
 * netbox-script: `node netbox-script/dist/main.js [--config FILE]` (or FLEETD_CONFIG). Runs until SIGTERM.
 */
import { parseArgs } from "node:util";
import { loadHandlerConfig } from "./config.js";
import { startHandler } from "./handler.js";

const { values } = parseArgs({ options: { config: { type: "string" } }, strict: true });
try {
  const h = await startHandler(loadHandlerConfig(values.config));
  const stop = (): void => {
    void h.stop().then(() => process.exit(0));
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
} catch (e) {
  process.stderr.write(`netbox-script: ${(e as Error).message}\n`);
  process.exit(2);
}
