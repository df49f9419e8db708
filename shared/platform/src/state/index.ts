/** The `state` entry point of this package: everything its files export. */
export * from "./handlerStore.js";
export * from "./kubeHandlerStore.js";
export * from "./kubeRecords.js";
export * from "./kubeStore.js";
export * from "./privateFiles.js";
export * from "./sqliteHandlerStore.js";
export * from "./sqliteStore.js";
export * from "./store.js";
