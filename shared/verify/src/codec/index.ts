/** The `codec` entry point of this package: everything its files export. */
export * from "./codec.js";
