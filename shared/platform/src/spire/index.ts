/** The SPIRE adapter: the server's admin API (entries, agents, health) and the Workload API's X.509 fetch. */
export * from "./errors.js";
export * from "./server.js";
export * from "./spiffeId.js";
export * from "./wire.js";
export * from "./workload.js";
export * from "./proto.js";
export * from "./nodeList.js";
export * from "./entrySync.js";
export * from "./documentStore.js";
export * from "./syncStatus.js";
export * from "./publish.js";
