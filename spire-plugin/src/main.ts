#!/usr/bin/env node
/**
 * spire-plugin: `node spire-plugin/dist/main.js [--config FILE] [--dry-run]` (or FLEETD_SPIRE_PLUGIN_CONFIG).
 * Starts through the service kit (@fleetd/platform/service): runs until SIGTERM/SIGINT. `--dry-run` computes one
 * pass's plan against the real SPIRE server, prints it as JSON and exits without writing anything (0: the plan;
 * 1: no list, or a refused one; 5: SPIRE or the list's store did not answer).
 */
import { EXIT } from "@fleetd/platform/cmd";
import { runService, serviceLogger } from "@fleetd/platform/service";
import { loadSpirePluginConfig } from "./config.js";
import { dryRun, startSpirePlugin } from "./service.js";

await runService({
  name: "spire-plugin",
  usage: `usage: spire-plugin [--config FILE] [--dry-run]
  Sidecar of spire-server: reconciles SPIRE node entries (spiffe://<td>/node/<name>) from spire-nodes.json over
  the admin socket and bans the agents of nodes that leave the list; /healthz, /readyz, /metrics. FILE defaults to
  $FLEETD_SPIRE_PLUGIN_CONFIG. --dry-run prints the plan (creates, updates, deletes, bans) and writes nothing.`,
  options: { config: { type: "string" }, "dry-run": { type: "boolean" } },
  async start(values) {
    const log = serviceLogger("spire-plugin");
    const cfg = loadSpirePluginConfig(typeof values["config"] === "string" ? values["config"] : undefined);
    if (values["dry-run"] === true) {
      const r = await dryRun(cfg, { logger: log });
      process.stdout.write(`${JSON.stringify(r, null, 2)}\n`);
      // the plan (0); a refused list (1); SPIRE or the list's store unavailable (5)
      process.exit(r.outcome === "dry-run" ? EXIT.ok : r.outcome === "list-refused" || r.outcome === "no-list" ? EXIT.refused : EXIT.unavailable);
    }
    const p = await startSpirePlugin(cfg, { logger: log });
    return {
      async stop() {
        log.info("stopping");
        await p.stop();
      },
    };
  },
});
