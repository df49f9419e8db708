/** The `tpm` entry point of this package: everything its files export. */
export * from "./commands.js";
export * from "./files.js";
export * from "./name.js";
export * from "./publicKey.js";
export * from "./structures.js";
