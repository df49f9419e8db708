/** The `attest` entry point of this package: everything its files export. */
export * from "./checkKeyAttributes.js";
export * from "./parseEvidence.js";
export * from "./pcrs.js";
export * from "./verdict.js";
export * from "./verifyCertify.js";
export * from "./verifyQuote.js";
export * from "./verifySignature.js";
