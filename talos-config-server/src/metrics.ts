/** prom-client metrics of the config server (a registry per app, so tests can run several). */
import { Counter, Histogram, Registry } from "prom-client";

export function createMetrics() {
  const registry = new Registry();
  return {
    registry,
    attestations: new Counter({ name: "fleetd_attestation_steps_total", help: "Attestation protocol steps by outcome", labelNames: ["step", "outcome"], registers: [registry] }),
    stepSeconds: new Histogram({ name: "fleetd_attestation_step_seconds", help: "Server time per protocol step", labelNames: ["step"], registers: [registry] }),
    configFetches: new Counter({ name: "fleetd_talos_config_fetches_total", help: "Talos config fetches by outcome", labelNames: ["outcome"], registers: [registry] }),
  };
}
export type Metrics = ReturnType<typeof createMetrics>;
