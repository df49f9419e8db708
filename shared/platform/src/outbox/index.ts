/** The `outbox` entry point of this package: everything its files export. */
export * from "./effects.js";
export * from "./worker.js";
