/** The `outage` entry point of this package: everything its files export. */
export * from "./backoff.js";
export * from "./failpoint.js";
export * from "./outage.js";
