/** The `kube` entry point of this package: everything its files export. */
export * from "./bootstrapToken.js";
export * from "./client.js";
export * from "./csrGate.js";
export * from "./csrGatePolicy.js";
export * from "./leader.js";
export * from "./parseCsr.js";
export * from "./quarantine.js";
