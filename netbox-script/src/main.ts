#!/usr/bin/env node
/**
 * netbox-script: `node netbox-script/dist/main.js [--config FILE]` (or FLEETD_CONFIG). Starts through the service
 * kit (@fleetd/platform/service): runs until SIGTERM/SIGINT, then stops accepting webhooks, lets the worker finish
 * its job and exits. Exit codes (fleetd's one table, `EXIT` in @fleetd/platform/cmd; --help lists it): 0 stopped,
 * 2 configuration or start-up error, 4 a failure while stopping.
 */
import { runService, serviceLogger } from "@fleetd/platform/service";
import { loadHandlerConfig } from "./config.js";
import { startHandler } from "./handler.js";

await runService({
  name: "netbox-script",
  usage: `usage: netbox-script [--config FILE]
  NetBox's event-rule webhook (POST /netbox/events) into a durable queue, its worker and reconcile loop, with
  /healthz, /readyz (NetBox, the queue, the leader under HA) and /metrics. FILE defaults to $FLEETD_CONFIG.`,
  options: { config: { type: "string" } },
  async start(values) {
    const log = serviceLogger("netbox-script");
    const h = await startHandler(loadHandlerConfig(typeof values["config"] === "string" ? values["config"] : undefined), { logger: log });
    return {
      async stop() {
        log.info("stopping");
        await h.stop();
      },
    };
  },
});
