/** spire-plugin: the SPIRE node-entry sync service (config, loop, assembly). */
export * from "./config.js";
export * from "./sync.js";
export * from "./service.js";
