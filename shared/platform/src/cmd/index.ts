/** The `cmd` entry point of this package: everything its files export. */
export * from "./common.js";
export * from "./exit.js";
