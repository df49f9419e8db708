/** The `talos/config` entry point of this package: everything its files export. */
export * from "./errors.js";
export * from "./machineConfig.js";
export * from "./net.js";
export * from "./renderControlPlane.js";
export * from "./renderNode.js";
export * from "./renderWorker.js";
export * from "./schemas.js";
export * from "./secretsBundle.js";
export * from "./token.js";
