/** The `protocol` entry point of this package: everything its files export. */
export * from "./bindings.js";
export * from "./canonicalJson.js";
export * from "./messages.js";
