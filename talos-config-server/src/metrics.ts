/** prom-client metrics of the config server (a registry per app, so tests can run several). */
import { Counter, Gauge, Histogram, Registry } from "prom-client";

export interface MetricSources {
  /** How many unknown EKs wait for an operator (`fleetd pending`), read at each scrape. */
  pendingEks?: () => Promise<number>;
}

export function createMetrics(sources: MetricSources = {}) {
  const registry = new Registry();
  const pending = sources.pendingEks;
  if (pending) {
    new Gauge({
      name: "fleetd_pending_eks",
      help: "Unknown EKs recorded by challenges and not yet approved (fleetd pending)",
      registers: [registry],
      async collect() {
        this.set(await pending());
      },
    });
  }
  return {
    registry,
    unauthenticatedRefusals: new Counter({
      name: "fleetd_attest_unauthenticated_refusals_total",
      help: "Attestation refusals before credential activation verified (journalled at most once per window per device), by step",
      labelNames: ["step"],
      registers: [registry],
    }),
    attestations: new Counter({ name: "fleetd_attestation_steps_total", help: "Attestation protocol steps by outcome", labelNames: ["step", "outcome"], registers: [registry] }),
    stepSeconds: new Histogram({ name: "fleetd_attestation_step_seconds", help: "Server time per protocol step", labelNames: ["step"], registers: [registry] }),
    configFetches: new Counter({ name: "fleetd_talos_config_fetches_total", help: "Talos config fetches by outcome", labelNames: ["outcome"], registers: [registry] }),
    outages: new Counter({ name: "fleetd_dependency_outages_total", help: "Requests answered 503 because a dependency was down, by step and reason", labelNames: ["step", "reason"], registers: [registry] }),
    journalLost: new Counter({ name: "fleetd_journal_entries_lost_total", help: "Refusal journal entries not written because NetBox was down (the refusal was still answered), by step", labelNames: ["step"], registers: [registry] }),
  };
}
export type Metrics = ReturnType<typeof createMetrics>;
