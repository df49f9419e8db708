/** The `tpm12` entry point of this package: everything its files export. */
export * from "./commands.js";
export * from "./keys.js";
export * from "./structures.js";
