/** The `eventlog` entry point of this package: everything its files export. */
export * from "./certs.js";
export * from "./digests.js";
export * from "./events.js";
export * from "./findings.js";
export * from "./guid.js";
export * from "./interpret.js";
export * from "./parse.js";
export * from "./pcrFile.js";
export * from "./replay.js";
export * from "./report.js";
export * from "./sbat.js";
export * from "./secureboot.js";
export * from "./structures.js";
export * from "./uefi.js";
