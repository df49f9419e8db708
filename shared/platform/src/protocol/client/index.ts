/** The `protocol/client` entry point of this package: everything its files export. */
export * from "./attest.js";
export * from "./attest12.js";
export * from "./renew.js";
