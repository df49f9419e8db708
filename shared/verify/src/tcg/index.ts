/** The `tcg` entry point of this package: everything its files export. */
export * from "./constants.js";
