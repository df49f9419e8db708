/** The `http` entry point of this package: everything its files export. */
export * from "./listenerLimits.js";
export * from "./openapi.js";
export * from "./stepGate.js";
