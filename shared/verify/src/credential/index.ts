/** The `credential` entry point of this package: everything its files export. */
export * from "./labeledEncapsulation.js";
export * from "./makeCredential.js";
