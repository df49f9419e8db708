/** The `policy` entry point of this package: everything its files export. */
export * from "./authorities.js";
export * from "./builtin.js";
export * from "./evaluate.js";
export * from "./load.js";
export * from "./schema.js";
export * from "./tolerances.js";
export * from "./verdict.js";
