/** prom-client metrics of the config server (a registry per app, so tests can run several; the service kit's). */
import { Counter, Gauge, Histogram } from "prom-client";
import { serviceRegistry } from "@fleetd/platform/service";

export interface MetricSources {
  /** How many unknown EKs wait for an operator (`fleetd pending`), read at each scrape. */
  pendingEks?: () => Promise<number>;
  /** The outbox's queued items and the age of the oldest (seconds), read at each scrape. */
  outbox?: () => Promise<{ items: number; oldestSeconds: number }>;
}

export function createMetrics(sources: MetricSources = {}) {
  // with Node's process metrics (fleetd_talos_config_server_process_cpu_seconds_total, heap, event loop lag, …)
  const registry = serviceRegistry("fleetd_talos_config_server_");
  const pending = sources.pendingEks;
  if (pending) {
    new Gauge({
      name: "fleetd_attestation_pending_eks",
      help: "Unknown EKs recorded by challenges and not yet approved (fleetd pending)",
      registers: [registry],
      async collect() {
        this.set(await pending());
      },
    });
  }
  const outbox = sources.outbox;
  if (outbox) {
    new Gauge({
      name: "fleetd_outbox_items",
      help: "Writes to NetBox and clean-ups recorded and not yet delivered (the outbox)",
      registers: [registry],
      async collect() {
        this.set((await outbox()).items);
      },
    });
    new Gauge({
      name: "fleetd_outbox_oldest_item_age_seconds",
      help: "Age of the oldest undelivered outbox item (0 when empty): how far NetBox is behind fleetd's record",
      registers: [registry],
      async collect() {
        this.set((await outbox()).oldestSeconds);
      },
    });
  }
  return {
    registry,
    unauthenticatedRefusals: new Counter({
      name: "fleetd_attestation_unauthenticated_refusals_total",
      help: "Attestation refusals before credential activation verified (journalled at most once per window per device), by step",
      labelNames: ["step"],
      registers: [registry],
    }),
    attestations: new Counter({ name: "fleetd_attestation_steps_total", help: "Attestation protocol steps by outcome", labelNames: ["step", "outcome"], registers: [registry] }),
    stepSeconds: new Histogram({ name: "fleetd_attestation_step_seconds", help: "Server time per protocol step", labelNames: ["step"], registers: [registry] }),
    configFetches: new Counter({ name: "fleetd_talos_config_fetches_total", help: "Talos config fetches by outcome", labelNames: ["outcome"], registers: [registry] }),
    outages: new Counter({ name: "fleetd_attestation_dependency_outages_total", help: "Requests answered 503 because a dependency was down, by step and reason", labelNames: ["step", "reason"], registers: [registry] }),
    runtimeVerdicts: new Counter({
      name: "fleetd_runtime_verdicts_total",
      help: "Runtime attestations (renewal endpoint) by verdict and class profile",
      labelNames: ["verdict", "profile"],
      registers: [registry],
    }),
    quarantines: new Counter({
      name: "fleetd_quarantines_total",
      help: "Workers quarantined (latched, Node cordoned) after an authenticated runtime quote missed their class profile, by profile",
      labelNames: ["profile"],
      registers: [registry],
    }),
    quarantineAlerts: new Counter({
      name: "fleetd_quarantine_alerts_total",
      help: "Control planes whose authenticated runtime quote missed their class profile (alerted, not cordoned), by profile",
      labelNames: ["profile"],
      registers: [registry],
    }),
    outboxDeliveries: new Counter({
      name: "fleetd_outbox_deliveries_total",
      help: "Outbox delivery attempts by effect kind and outcome (delivered, moot, outage, failed, invalid)",
      labelNames: ["kind", "outcome"],
      registers: [registry],
    }),
  };
}
export type Metrics = ReturnType<typeof createMetrics>;
