/** The `text` entry point of this package: everything its files export. */
export * from "./own.js";
export * from "./untrusted.js";
