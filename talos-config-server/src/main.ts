#!/usr/bin/env node
/**
 * talos-config-server: `node talos-config-server/dist/main.js [--config FILE]` (or FLEETD_CONFIG). Starts through
 * the service kit (@fleetd/platform/service): runs until SIGTERM/SIGINT, then stops accepting, lets requests in
 * flight finish, closes the PKCS#11 session and the state. Exit codes (fleetd's one table, `EXIT` in
 * @fleetd/platform/cmd; --help lists it): 0 stopped, 2 configuration or start-up error (the message names the field
 * or file), 4 a failure while stopping.
 */
import { runService, serviceLogger } from "@fleetd/platform/service";
import { loadServerConfig } from "./config.js";
import { startServer } from "./server.js";

await runService({
  name: "talos-config-server",
  usage: `usage: talos-config-server [--config FILE]
  The attestation API (/v1/attest/*), install codes and the one-time Talos config (/talos/config), with /healthz,
  /readyz (NetBox, state store, CA signer or leader) and /metrics. FILE defaults to $FLEETD_CONFIG.`,
  options: { config: { type: "string" } },
  async start(values) {
    const cfg = loadServerConfig(typeof values["config"] === "string" ? values["config"] : undefined);
    const log = serviceLogger("talos-config-server", { level: cfg.server.logLevel });
    const running = await startServer(cfg, log);
    return {
      async stop() {
        log.info("stopping");
        await running.stop();
      },
    };
  },
});
