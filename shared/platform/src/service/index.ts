/** The service kit: one logger shape, health/readiness/metrics handlers, and how binaries start and stop. */
export * from "./health.js";
export * from "./logger.js";
export * from "./main.js";
