/** The `trust` entry point of this package: everything its files export. */
export * from "./authorities.js";
export * from "./ekCaStore.js";
export * from "./profiles.js";
