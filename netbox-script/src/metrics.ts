/** Prometheus metrics of the handler (GET /metrics). */
import { Counter, Gauge, Histogram, type Registry } from "prom-client";
import { serviceRegistry } from "@fleetd/platform/service";

export interface Metrics {
  registry: Registry;
  webhooks: Counter<"outcome">;
  decisions: Counter<"outcome" | "action">;
  jobErrors: Counter<"outcome">;
  queueDepth: Gauge;
  queueParked: Gauge;
  reconcileRuns: Counter<"outcome">;
  receiptToDecision: Histogram;
  workflowOutcomes: Counter<"outcome">;
}

export function createMetrics(): Metrics {
  const registry = serviceRegistry("fleetd_netbox_script_");
  return {
    registry,
    webhooks: new Counter({ name: "fleetd_netbox_script_webhooks_total", help: "Webhook deliveries by outcome", labelNames: ["outcome"], registers: [registry] }),
    decisions: new Counter({ name: "fleetd_netbox_script_decisions_total", help: "Handler decisions", labelNames: ["outcome", "action"], registers: [registry] }),
    jobErrors: new Counter({ name: "fleetd_netbox_script_job_errors_total", help: "Jobs that failed and were retried or parked", labelNames: ["outcome"], registers: [registry] }),
    queueDepth: new Gauge({ name: "fleetd_netbox_script_queue_depth", help: "Pending jobs", registers: [registry] }),
    queueParked: new Gauge({ name: "fleetd_netbox_script_queue_parked", help: "Jobs parked after maxAttempts failures (for an operator)", registers: [registry] }),
    reconcileRuns: new Counter({ name: "fleetd_netbox_script_reconcile_runs_total", help: "Reconcile passes", labelNames: ["outcome"], registers: [registry] }),
    workflowOutcomes: new Counter({ name: "fleetd_netbox_script_workflow_outcomes_total", help: "Ends of fleetd's Tinkerbell Workflows followed up: journalled, restarted (boot Job failed), error", labelNames: ["outcome"], registers: [registry] }),
    receiptToDecision: new Histogram({ name: "fleetd_netbox_script_receipt_to_decision_seconds", help: "Webhook receipt to decision", buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10], registers: [registry] }),
  };
}
